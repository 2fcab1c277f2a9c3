"""Who may be preempted for whom: the queue relations (architecture: Vocabulary, invariant 5a).

- a ``disabled`` queue (or any queue under one) is never a victim;
- an ask in a ``fence`` queue (or any queue under one) never preempts outside the fence's subtree; asks
  from outside may still preempt inside it by the usual rules (YuniKorn's semantics);
- a queue is never preempted for a queue of lower business priority, compared where the two paths part
  (siblings' ``priority.offset``, as YARN's and YuniKorn's relative queue priorities);
- an ask that requires a node stands outside these relations: it preempts on its node by the required-node
  rule (``eligibility.refusal``), in whichever queue it is (:func:`required_node_leaves`).
And what apps and asks say of themselves (invariant 11):
- an app's disruption budget (``max_disruption``, Kubernetes' ``maxUnavailable``): at most that many of
  its guaranteed containers under notice at once (:func:`disruption_room`, :func:`over_budget`);
- an app that opted out (``allow_preemption: false``, YuniKorn's) gives victims of last resort only, as
  application masters are (:func:`last_resort`), and is spared while other queues can give down to their
  guarantees (:mod:`sniper.core.preemption.soft_opt_out`);
- an ask with ``preemption_policy: never`` (Kubernetes') is never a beneficiary (:func:`may_preempt`).
Opportunistic containers stand outside all three: always killable, never counted.
Pure functions of the queue tree, the state and the apps' figures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sniper.core.state import Allocation, App, Ask, PartitionState, Queue


def preemption_disabled(queue: Queue) -> bool:
    return any(q.config.preemption_policy == "disabled" for q in queue.lineage())


def _branches(a: Queue, b: Queue) -> tuple[Queue, Queue] | None:
    """The two children of the lowest common ancestor on the way to ``a`` and to ``b``."""
    a_line = list(a.lineage())[::-1]
    b_line = list(b.lineage())[::-1]
    for x, y in zip(a_line, b_line, strict=False):
        if x is not y:
            return x, y
    return None  # one contains the other


def may_preempt_for(victim: Queue, beneficiary: Queue) -> bool:
    """Whether ``victim``'s containers may be preempted for an ask of ``beneficiary`` (inter-queue)."""
    if victim is beneficiary or preemption_disabled(victim):
        return False
    for q in beneficiary.lineage():
        if q.config.preemption_policy == "fence" and not victim.is_within(q):
            return False
    parted = _branches(victim, beneficiary)
    if parted is not None:
        victim_side, beneficiary_side = parted
        if victim_side.priority > beneficiary_side.priority:
            return False
    return True


def required_node_leaves(state: PartitionState) -> set[str]:
    """Leaf queues with a pending ask that requires a node."""
    return {
        q.path
        for q in state.queues.values()
        if q.is_leaf and any(ask.required_node is not None for app in q.waiting_apps() for ask in app.pending_asks)
    }


def may_preempt(ask: Ask) -> bool:
    """Whether ``ask`` may be a beneficiary at all (``preemption_policy: never`` waits for free room)."""
    return not ask.never_preempts


def last_resort(alloc: Allocation, app: App | None) -> bool:
    """Whether ``alloc`` is a victim of last resort: an application master, or a container of an app that
    opted out of preemption (taken only when no set without such victims exists)."""
    return alloc.am or (app is not None and not app.allow_preemption)


def disruption_room(app: App, also: int = 0) -> int | None:
    """How many more of ``app``'s guaranteed containers may be put under notice now, with ``also`` more
    counted as under notice already (``None``: no budget)."""
    return None if app.max_disruption is None else max(0, app.max_disruption - app.disrupted - also)


def over_budget(
    victims: Iterable[Allocation], apps: Mapping[str, App], disrupted: Mapping[str, int] | None = None
) -> App | None:
    """The first app (of ``apps``, those with a budget or opted out) whose disruption budget ``victims``
    together would break, counting those it already has under notice (and, by app name, ``disrupted``
    more that a check counts beside the state); ``None`` when none."""
    taking: dict[str, int] = {}
    for v in victims:
        app = None if v.opportunistic else apps.get(v.app)
        if app is None or app.max_disruption is None:
            continue
        taking[v.app] = taking.get(v.app, 0) + 1
        room = disruption_room(app, disrupted.get(v.app, 0) if disrupted else 0)
        if room is not None and taking[v.app] > room:
            return app
    return None


def budget_refusal(app: App, disrupted: Mapping[str, int] | None = None) -> str:
    """How the cache names a victim set refused for ``app``'s disruption budget (``disrupted``: as in
    :func:`over_budget`)."""
    under_notice = app.disrupted + (disrupted.get(app.name, 0) if disrupted else 0)
    budget = f"max_disruption {app.max_disruption}, {under_notice} under notice"
    return f"app {app.name}'s disruption budget is used up ({budget})"
