"""Who may be preempted for whom: the queue relations of ARCHITECTURE sections 1 and 6 (invariant 5a).

- a ``disabled`` queue (or any queue under one) is never a victim;
- an ask in a ``fence`` queue (or any queue under one) never preempts outside the fence's subtree; asks
  from outside may still preempt inside it by the usual rules (YuniKorn's semantics);
- a queue is never preempted for a queue of lower business priority, compared where the two paths part
  (siblings' ``priority.offset``, as YARN's and YuniKorn's relative queue priorities);
- an ask that requires a node stands outside these relations: it preempts on its node by the required-node
  rule (``eligibility.refusal``), in whichever queue it is (:func:`required_node_leaves`).
Pure functions of the queue tree.
"""

from __future__ import annotations

from core.state import PartitionState, Queue


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
