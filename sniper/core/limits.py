"""User, group and application limits (YuniKorn's queue ``limits`` and ``maxapplications``), sans-IO.

A :class:`Limits` view, built from a partition state for one allocation call, one proposal or one
preemption round, answers whether an app may start and whether one more container keeps its user and
group within every ``maxresources`` up the queue tree. An app *runs* while it holds a container, a
reservation or a proposal in flight; a waiting app (pending asks, nothing held) starts only when every
``maxapplications`` that covers it has room, first come first served: it is admitted when the apps
already running plus the waiting apps submitted before it leave a slot. The view charges what its
caller picks, so a batch never takes a user over a limit that each pick alone would respect. It also
tells a queue's demand as the limits let it run (:func:`pending_demand`): what preemption may free room for.
Invariant: no container the view admits takes a user or group above a ``maxresources``, and no app it
admits takes a queue, user or group above a ``maxapplications``.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable

from sniper.core import resources as res
from sniper.core.config import WILDCARD, LimitConfig
from sniper.core.resources import Resource
from sniper.core.state import Allocation, App, Ask, PartitionState, Queue
from sniper.core.units import human, named

Scope = tuple[str, str, str]  # (queue path, "queue" | "user" | "group", name): whom one bound covers


@dataclasses.dataclass(frozen=True, slots=True)
class Bound:
    """One limit as it applies to one app: its scope and what the scope may hold."""

    scope: Scope
    description: str
    max_resources: Resource | None
    max_applications: int | None

    def label(self) -> str:
        path, kind, name = self.scope
        who = f"queue {path}" if kind == "queue" else f"{kind} {name!r} in {path}"
        return who + (f" (limit {self.description!r})" if self.description else "")


def has_limits(state: PartitionState) -> bool:
    return any(q.config.max_applications is not None or q.config.limits for q in state.queues.values())


def _user_limit(limits: tuple[LimitConfig, ...], user: str) -> LimitConfig | None:
    """The entry naming ``user``, else the wildcard entry (YuniKorn: a named user's limit wins)."""
    wildcard = None
    for lim in limits:
        if user in lim.users:
            return lim
        if WILDCARD in lim.users:
            wildcard = lim
    return wildcard


def tracked_group(app: App) -> str | None:
    """The one group an app's usage counts against (YuniKorn's ugm): the first of the app's groups that
    a group limit names, looking from the leaf queue up to the root; else its first group when a
    wildcard group limit covers it; else none."""
    if not app.groups:
        return None
    wildcard = False
    for q in app.queue.lineage():
        for lim in q.config.limits:
            for name in lim.groups:
                if name == WILDCARD:
                    wildcard = True
                elif name in app.groups:
                    return name
    return app.groups[0] if wildcard else None


def _group_limit(limits: tuple[LimitConfig, ...], group: str) -> LimitConfig | None:
    wildcard = None
    for lim in limits:
        if group in lim.groups:
            return lim
        if WILDCARD in lim.groups:
            wildcard = lim
    return wildcard


def bounds_of(app: App) -> list[Bound]:
    """Every bound that covers ``app``, leaf first: queue ``maxapplications``, user and group limits."""
    out: list[Bound] = []
    group = tracked_group(app)
    for q in app.queue.lineage():
        cfg = q.config
        if cfg.max_applications is not None:
            out.append(Bound((q.path, "queue", ""), "", None, cfg.max_applications))
        if not cfg.limits:
            continue
        user = _user_limit(cfg.limits, app.user) if app.user else None
        if user is not None:
            out.append(Bound((q.path, "user", app.user), user.description, user.max_resources, user.max_applications))
        grp = None if group is None else _group_limit(cfg.limits, group)
        if grp is not None and group is not None:
            out.append(Bound((q.path, "group", group), grp.description, grp.max_resources, grp.max_applications))
    return out


def pending_demand(state: PartitionState) -> dict[str, Resource]:
    """Every queue's pending demand that its limits let run (:meth:`Limits.demand`); without limits, its
    pending. The demand the ideal assignment and Sniper's beneficiary test see."""
    view = Limits.of(state)
    if view is None:
        return {path: dict(q.pending) for path, q in state.queues.items()}
    return view.demand()


def app_usage(app: App) -> Resource:
    """What the app holds: committed containers, reservations and (allocator only) proposals in flight."""
    out = dict(app.allocated)
    for ask in app.asks.values():
        held = ask.reserved + ask.allocating
        if held:
            res.add_into(out, ask.resource, held)
    return out


def is_running(app: App) -> bool:
    return bool(app.allocations) or any(ask.reserved or ask.allocating for ask in app.asks.values())


class Limits:
    """The limits of one partition at one moment, with what the caller charged since."""

    def __init__(self, state: PartitionState) -> None:
        self.state = state
        self._bounds: dict[str, list[Bound]] = {}
        self.used: dict[Scope, Resource] = {}  # per user or group scope, what its running apps hold
        self.running: dict[Scope, int] = {}
        self._waiting: dict[Scope, list[int]] = {}  # submit_seq of waiting apps, sorted
        self._running_apps: set[str] = set()
        for app in state.apps.values():
            running = is_running(app)
            if running:
                self._running_apps.add(app.name)
            usage = app_usage(app) if running else {}
            for bound in self.bounds(app):
                if usage:
                    res.add_into(self.used.setdefault(bound.scope, {}), usage)
                if running:
                    self.running[bound.scope] = self.running.get(bound.scope, 0) + 1
                elif app.pending_asks:
                    self._waiting.setdefault(bound.scope, []).append(app.submit_seq)
        for seqs in self._waiting.values():
            seqs.sort()

    @classmethod
    def of(cls, state: PartitionState) -> Limits | None:
        """A view, or ``None`` when the partition configures no limit (nothing to check)."""
        return cls(state) if has_limits(state) else None

    def fork(self) -> Limits:
        """A copy whose charges leave this view untouched (a gang tried as a unit, kept or dropped whole)."""
        out = Limits.__new__(Limits)
        out.state, out._bounds, out._waiting = self.state, self._bounds, self._waiting
        out.used = {k: dict(v) for k, v in self.used.items()}
        out.running = dict(self.running)
        out._running_apps = set(self._running_apps)
        return out

    def bounds(self, app: App) -> list[Bound]:
        out = self._bounds.get(app.name)
        if out is None:
            out = self._bounds[app.name] = bounds_of(app)
        return out

    # ------------------------------------------------------------------ checks

    def refusal(self, ask: Ask) -> str | None:
        """Why one more container of ``ask`` would break a limit, or ``None`` when it may have one."""
        app = ask.app
        waits = self._waits(app)
        if waits is not None:
            return waits
        for b in self.bounds(app):
            if b.max_resources is None:
                continue
            used = self.used.get(b.scope, {})
            for k, v in ask.resource.items():
                if k in b.max_resources and used.get(k, 0) + v > b.max_resources[k]:
                    return (
                        f"{b.label()} would exceed its maxresources {named(k, b.max_resources[k])} "
                        f"(holds {human(k, used.get(k, 0))}, asks {human(k, v)})"
                    )
        return None

    def _waits(self, app: App) -> str | None:
        """Why a waiting app may not start (a ``maxapplications`` full), or ``None`` when it runs or may."""
        if app.name in self._running_apps:
            return None
        for b in self.bounds(app):
            if b.max_applications is None:
                continue
            running = self.running.get(b.scope, 0)
            ahead = bisect.bisect_left(self._waiting.get(b.scope, []), app.submit_seq)
            if running + ahead >= b.max_applications:
                earlier = f" and {ahead} app(s) submitted earlier wait before it" if ahead else ""
                return f"app waits: {b.label()} runs {running} of its maxapplications {b.max_applications}{earlier}"
        return None

    def demand(self) -> dict[str, Resource]:
        """Every queue's pending demand as far as the limits let it run (YARN's pending considering the
        user limit): an app that must wait on a ``maxapplications`` contributes nothing; the others, in
        submission order and each app's asks in scheduling order, contribute the whole containers that fit
        in what their user's and group's ``maxresources`` still leave (the headroom one app takes, the
        next of the same user or group no longer has). Parents sum their children."""
        headroom: dict[Scope, Resource] = {}
        out: dict[str, Resource] = {path: {} for path in self.state.queues}
        for app in sorted(self.state.apps.values(), key=lambda a: a.submit_seq):
            if not app.pending_asks or self._waits(app) is not None:
                continue
            capped = [b for b in self.bounds(app) if b.max_resources is not None]
            for b in capped:
                if b.scope not in headroom and b.max_resources is not None:
                    used = self.used.get(b.scope, {})
                    headroom[b.scope] = {k: max(0, cap - used.get(k, 0)) for k, cap in b.max_resources.items()}
            for ask in app.pending_asks:
                n = ask.pending
                for b in capped:
                    room = headroom[b.scope]
                    n = min([n] + [room[k] // v for k, v in ask.resource.items() if v > 0 and k in room])
                if n <= 0:
                    continue
                for b in capped:
                    room = headroom[b.scope]
                    for k, v in ask.resource.items():
                        if k in room:
                            room[k] -= v * n
                for q in app.queue.lineage():
                    res.add_into(out[q.path], ask.resource, n)
        return out

    def allows(self, ask: Ask) -> bool:
        return self.refusal(ask) is None

    def holds_unit(self, ask: Ask, members: int) -> bool:
        """Whether ``members`` more containers of ``ask`` keep its user and group within every
        ``maxresources`` (a gang placed whole; whether its app may start is the candidate walk's to say).
        Charges nothing."""
        for b in self.bounds(ask.app):
            if b.max_resources is None:
                continue
            used = self.used.get(b.scope, {})
            for k, v in ask.resource.items():
                if k in b.max_resources and used.get(k, 0) + v * members > b.max_resources[k]:
                    return False
        return True

    def charge(self, ask: Ask, times: int = 1) -> None:
        """Count one more container of ``ask`` (``times=-1`` un-counts it) in every scope covering its app.

        An app's first container makes it run; the waiting ranks are kept from the view's moment, so
        the apps it admitted then stay admitted (the count of running plus earlier waiting apps is
        unchanged by one of them starting)."""
        app = ask.app
        self._running_apps.add(app.name)
        for b in self.bounds(app):
            res.add_into(self.used.setdefault(b.scope, {}), ask.resource, times)

    # ------------------------------------------------------------------ intra-queue preemption

    def excess(self, app: App, leaving: Iterable[Allocation] = ()) -> Resource:
        """How far the app's user (or group) is above a ``maxresources`` covering it, once ``leaving``
        is gone: the most in each resource over every such bound (empty when within all of them)."""
        out: Resource = {}
        gone = [({b.scope for b in self.bounds(self.state.apps[v.app])}, v.resource) for v in leaving]
        for b in self.bounds(app):
            if b.max_resources is None or b.scope[1] == "queue":
                continue
            used = dict(self.used.get(b.scope, {}))
            for scopes, amount in gone:
                if b.scope in scopes:
                    res.sub_into(used, amount)
            for k, cap in b.max_resources.items():
                over = used.get(k, 0) - cap
                if over > out.get(k, 0):
                    out[k] = over
        return out

    def may_take(self, victim: Allocation, for_ask: Ask, also: Iterable[Allocation] = ()) -> bool:
        """Intra-queue rule for limits (architecture: invariant 5b): a container of a user (or group)
        above its limit may go for another user of the same queue who is within its limits; never the
        reverse. ``also`` are victims already chosen with it. The victim's scope is still above the
        limit without them, so a user is never taken below its limit by more than one container."""
        if victim.am or victim.preempting:
            return False
        victim_app = self.state.apps.get(victim.app)
        if victim_app is None or victim_app is for_ask.app or victim.queue is not for_ask.app.queue:
            return False
        if victim_app.user == for_ask.app.user:
            return False
        over = self.excess(victim_app, [v for v in also if v.app in self.state.apps])
        return res.any_positive(over) and not res.any_positive(self.excess(for_ask.app))

    def take(self, victim: Allocation) -> None:
        """Count a victim as gone from its user's and group's usage (one preemption round)."""
        app = self.state.apps.get(victim.app)
        if app is None:
            return
        for b in self.bounds(app):
            res.add_into(self.used.setdefault(b.scope, {}), victim.resource, -1)

    def over_limit_queues(self) -> list[Queue]:
        """Leaf queues where a user or group above a ``maxresources`` holds a container while another
        scope of the same queue has pending asks: where intra-queue preemption for limits may act."""
        out: list[Queue] = []
        for queue in self.state.queues.values():
            if not queue.is_leaf or not res.any_positive(queue.pending):
                continue
            over = [a for a in queue.apps.values() if a.allocations and res.any_positive(self.excess(a))]
            if not over:
                continue
            scopes = {(a.user, tracked_group(a)) for a in over}
            if any(
                a.pending_asks and (a.user, tracked_group(a)) not in scopes and not res.any_positive(self.excess(a))
                for a in queue.apps.values()
            ):
                out.append(queue)
        return out
