"""The YARN proportional preemption policy (the "shotgun" baseline), as a sans-IO class kept across rounds.

Owns :class:`ProportionalPolicy` (``round(snapshot, now_ms) -> RoundResult``), its tunables
:class:`ProportionalConfig`, the in-app victim order :func:`preemption_order`, and the preempt-then-kill
tracking. It reproduces YARN's ``ProportionalCapacityPreemptionPolicy.editSchedule`` with the
``FifoCandidatesSelector`` (and, when enabled, the preempt-to-balance selector):

1. The ideal assignment of :func:`sniper.core.preemption.ideal.compute_ideal` with the round's allowance
   ``trunc(cluster * total_preemption_per_round)``.
2. Per leaf (pre-order), unless its preemption is disabled: acted on only when
   ``used > trunc(guaranteed * (1 + max_ignored_over_capacity))`` (deadzone); the amount to obtain is
   ``to_be_preempted * natural_termination_factor`` rounded by the calculator (default: half up; dominant: up).
3. Selection: apps last-submitted first; in an app its reservations first, then running containers by
   numerically larger priority, then larger ``seq`` (YARN's container id); AM containers are skipped and
   remembered; a container is taken while something remains to obtain (the last may overshoot) and only if
   it fits in what is left of the round's allowance. Then the remembered AMs, in order, while something
   remains and the queue's skipped AM total exceeds ``trunc(guaranteed * max_am_resource_percent)``.
   Sniper's app limits, as YARN skips AMs: containers of an app that opted out of preemption are skipped;
   what only they could give is taken from other leaves' tasks, each leaf kept at or above its guarantee,
   as far as leaves below their guarantee ask for it; they are taken, while something remains, after
   every other container of the leaf (before the AMs) only when no other leaf could give; an app
   never has more than its disruption budget (``max_disruption``) killable at once, its own containers
   under notice counted, the rest of its containers passed over (``budget_refused``).
4. Preempt-to-balance (optional): a second selection on an ideal assignment computed without the leaf cap,
   its targets reduced by what the first already took, the allowance shared with it.
5. Events: a selected container is *marked* the first time; selected again once
   ``first_marked + max_wait <= now`` it becomes *killable* (and is forgotten); entries older than
   ``2 * max_wait_before_kill_ms`` are forgotten; in observe-only mode nothing is marked or remembered.

Invariants: no I/O, no clock, no randomness: the result is a function of the snapshot, ``now_ms``, the
config and the tracking state left by earlier rounds; the snapshot is never mutated; a container is never
selected twice in one round; ties are broken by snapshot order, then by ids.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from sniper.core.preemption.calculator import (
    CALCULATORS,
    ResourceCalculator,
    java_float,
    make_calculator,
    multiply_trunc,
)
from sniper.core.preemption.ideal import IdealAssignment, compute_ideal
from sniper.core.preemption.model import AppSnapshot, ClusterSnapshot, ContainerSnapshot, QueueSnapshot
from sniper.core.preemption.quotas import guarantee_floor
from sniper.core.resources import Resource, add, component_max, drf_below, sub

if TYPE_CHECKING:
    from sniper.core.config import PreemptionConfig

YARN_BALANCE_MAX_WAIT_MS = 300_000  # YARN's default max wait before kill for preemption to balance queues


@dataclasses.dataclass(frozen=True, slots=True)
class ProportionalConfig:
    """The policy's tunables, with YARN's defaults and names (times in milliseconds).

    ``priority_layers`` and ``avoid_ineffective`` are Sniper's options (see :mod:`sniper.core.preemption.ideal`);
    they are off for the YARN baseline. ``max_wait_before_kill_for_balance_ms`` is the wait of the
    preempt-to-balance selector (YARN default: 5 minutes).
    """

    max_wait_before_kill_ms: int = 15_000
    monitoring_interval_ms: int = 3_000
    total_preemption_per_round: float = 0.1
    natural_termination_factor: float = 0.2
    max_ignored_over_capacity: float = 0.1
    observe_only: bool = False
    preemption_to_balance_queues_beyond_guaranteed: bool = False
    max_wait_before_kill_for_balance_ms: int = YARN_BALANCE_MAX_WAIT_MS
    resource_calculator: str = "default"
    priority_layers: bool = False
    avoid_ineffective: bool = False

    def __post_init__(self) -> None:
        if self.resource_calculator not in CALCULATORS:
            raise ValueError(
                f"unknown resource_calculator {self.resource_calculator!r}; expected one of {', '.join(CALCULATORS)}"
            )
        for name in ("max_wait_before_kill_ms", "monitoring_interval_ms", "max_wait_before_kill_for_balance_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        for name in ("total_preemption_per_round", "natural_termination_factor", "max_ignored_over_capacity"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")

    @classmethod
    def from_preemption_config(
        cls,
        cfg: PreemptionConfig,
        *,
        resource_calculator: str = "dominant",
        priority_layers: bool = False,
        avoid_ineffective: bool = False,
    ) -> ProportionalConfig:
        """The tunables of a partition's ``preemption`` section of ``queues.yaml`` (seconds become ms)."""
        return cls(
            max_wait_before_kill_ms=round(cfg.grace * 1000),
            monitoring_interval_ms=round(cfg.interval * 1000),
            total_preemption_per_round=cfg.total_preemption_per_round,
            natural_termination_factor=cfg.natural_termination_factor,
            max_ignored_over_capacity=cfg.max_ignored_over_capacity,
            observe_only=cfg.observe_only,
            resource_calculator=resource_calculator,
            priority_layers=priority_layers,
            avoid_ineffective=avoid_ineffective,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Candidate:
    """A container selected this round, the leaf it is taken from, and whether the balance pass chose it."""

    container: ContainerSnapshot
    queue: str
    balance: bool = False

    @property
    def app(self) -> str:
        return self.container.app


@dataclasses.dataclass(frozen=True, slots=True)
class QueueFigures:
    """One queue's figures from the round's (last) ideal assignment; ``to_obtain`` is what selection aimed to
    free from a leaf after the deadzone and the natural termination factor (empty when not acted on)."""

    ideal_assigned: Resource
    to_be_preempted: Resource
    preemptable_extra: Resource
    untouchable_extra: Resource
    to_obtain: Resource


@dataclasses.dataclass(frozen=True, slots=True)
class RoundResult:
    """What one round decided.

    ``candidates``: every container selected this round, in selection order (also in observe-only mode).
    ``marked``: containers marked for preemption for the first time this round. ``killable``: containers whose
    wait expired this round. ``unreserved``: reservations the policy asked to drop while selecting (YARN's
    KILL_RESERVED_CONTAINER). In observe-only mode the last three are empty.
    """

    now_ms: int
    candidates: tuple[Candidate, ...]
    marked: tuple[Candidate, ...]
    killable: tuple[Candidate, ...]
    unreserved: tuple[Candidate, ...]
    queues: Mapping[str, QueueFigures]
    budget_refused: frozenset[str] = frozenset()  # containers passed over for their app's disruption budget

    @property
    def event_count(self) -> int:
        """Events a resource manager would receive: marks, kills and dropped reservations."""
        return len(self.marked) + len(self.killable) + len(self.unreserved)

    def marked_per_app(self, apps: Iterable[str] = ()) -> dict[str, int]:
        """Newly marked containers per app; every app in ``apps`` is present (0 when none)."""
        return _count(self.marked, apps)

    def killable_per_app(self, apps: Iterable[str] = ()) -> dict[str, int]:
        """Containers that became killable per app; every app in ``apps`` is present (0 when none)."""
        return _count(self.killable, apps)


def _count(items: Iterable[Candidate], apps: Iterable[str]) -> dict[str, int]:
    out = dict.fromkeys(apps, 0)
    for item in items:
        out[item.app] = out.get(item.app, 0) + 1
    return out


def preemption_order(containers: Iterable[ContainerSnapshot]) -> list[ContainerSnapshot]:
    """The order in which the policy visits one app's containers.

    Reservations first, in the given order; then the others by numerically larger ``priority`` (a lower
    scheduling priority) first, then larger ``seq`` (allocated later) first, then larger id.
    """
    items = list(containers)
    reserved = [c for c in items if c.reserved]
    live = sorted((c for c in items if not c.reserved), key=lambda c: (c.priority, c.seq, c.id), reverse=True)
    return reserved + live


def app_order(apps: Iterable[AppSnapshot]) -> list[AppSnapshot]:
    """The order in which the policy visits a leaf's apps: last submitted first (ties: larger id first)."""
    return sorted(apps, key=lambda a: (a.submit_order, a.id), reverse=True)


class ProportionalPolicy:
    """YARN's proportional capacity preemption, one :meth:`round` per monitoring interval.

    The instance keeps the first-marked time of every container it marked (YARN's ``preemptionCandidates``);
    everything else is recomputed from the snapshot each round.
    """

    def __init__(self, config: ProportionalConfig | None = None) -> None:
        self._config = config or ProportionalConfig()
        self._first_marked: dict[str, int] = {}

    @property
    def config(self) -> ProportionalConfig:
        return self._config

    @property
    def first_marked(self) -> Mapping[str, int]:
        """Container id to the time (ms) it was first marked, for containers still tracked."""
        return dict(self._first_marked)

    def reset(self) -> None:
        """Forget every tracked container."""
        self._first_marked.clear()

    def forgets_at(self, now_ms: int) -> bool:
        """Whether a round at ``now_ms`` drops a tracked container whose mark is older than the horizon."""
        horizon = 2 * self._config.max_wait_before_kill_ms
        return any(first + horizon < now_ms for first in self._first_marked.values())

    def expire(self, now_ms: int) -> None:
        """Drop every tracked container whose mark is older than the horizon (twice the wait), as a round
        at ``now_ms`` does after selecting; in observe-only mode nothing is tracked."""
        horizon = 2 * self._config.max_wait_before_kill_ms
        for cid in [cid for cid, first in self._first_marked.items() if first + horizon < now_ms]:
            del self._first_marked[cid]

    def forget(self, container_ids: Iterable[str]) -> None:
        """Forget containers marked but not preempted after all (a later round may select them again)."""
        for cid in container_ids:
            self._first_marked.pop(cid, None)

    def round(self, snapshot: ClusterSnapshot, now_ms: int) -> RoundResult:
        """Run one round on ``snapshot`` at time ``now_ms`` and return its decisions."""
        cfg = self._config
        calc = make_calculator(cfg.resource_calculator, snapshot.resource_names)
        cluster = dict(snapshot.resource)
        allowance = multiply_trunc(cluster, java_float(cfg.total_preemption_per_round))
        selection = _Selection(calc, cluster, allowance, observe_only=cfg.observe_only)
        passes = [(False, cfg.max_wait_before_kill_ms)]
        if cfg.preemption_to_balance_queues_beyond_guaranteed:
            passes.append((True, cfg.max_wait_before_kill_for_balance_ms))
        wait_of: dict[str, int] = {}
        figures: dict[str, QueueFigures] = {}
        for balance, wait in passes:
            ideal = compute_ideal(
                snapshot,
                calc,
                total_preemption_allowed=selection.allowance,
                preempt_to_balance=balance,
                priority_layers=cfg.priority_layers,
                avoid_ineffective=cfg.avoid_ineffective,
            )
            to_obtain = self._to_obtain(snapshot, ideal, calc, cluster)
            before = len(selection.candidates)
            selection.run(snapshot, to_obtain, balance=balance)
            for cand in selection.candidates[before:]:
                wait_of[cand.container.id] = wait
            figures = {
                q.path: QueueFigures(
                    ideal_assigned=q.ideal_assigned,
                    to_be_preempted=q.to_be_preempted,
                    preemptable_extra=q.preemptable_extra,
                    untouchable_extra=q.untouchable_extra,
                    to_obtain=to_obtain.get(q.path, {}),
                )
                for q in ideal
            }
        candidates = tuple(selection.candidates)
        refused = frozenset(selection.budget_refused)
        if cfg.observe_only:
            return RoundResult(now_ms, candidates, (), (), (), figures, refused)
        marked: list[Candidate] = []
        killable: list[Candidate] = []
        for cand in candidates:
            cid = cand.container.id
            first = self._first_marked.get(cid)
            if first is not None and first + wait_of[cid] <= now_ms:
                killable.append(cand)
                del self._first_marked[cid]
            elif first is None:
                marked.append(cand)
                self._first_marked[cid] = now_ms
        self.expire(now_ms)
        unreserved = tuple(selection.unreserved)
        return RoundResult(now_ms, candidates, tuple(marked), tuple(killable), unreserved, figures, refused)

    def _to_obtain(
        self, snapshot: ClusterSnapshot, ideal: IdealAssignment, calc: ResourceCalculator, cluster: Resource
    ) -> dict[str, Resource]:
        """Per acted-on leaf: what to free this round (deadzone, then the natural termination factor)."""
        cfg = self._config
        factor = java_float(cfg.natural_termination_factor)
        out: dict[str, Resource] = {}
        for leaf in snapshot.leaves():
            if leaf.preemption_disabled:
                continue
            if not calc.gt(cluster, leaf.used, deadzone(leaf.guaranteed, cfg)):
                out[leaf.path] = {}
                continue
            target = ideal[leaf.path].to_be_preempted
            if calc.positive(cluster, target):
                target = calc.multiply_round_scalar(target, factor)
            out[leaf.path] = target
        return out


def deadzone(guaranteed: Resource, cfg: ProportionalConfig) -> Resource:
    """The usage a leaf guaranteed ``guaranteed`` must exceed (in the calculator's order) to be acted on:
    ``trunc(guaranteed * (1 + max_ignored_over_capacity))``."""
    return multiply_trunc(guaranteed, 1.0 + cfg.max_ignored_over_capacity)


class _Selection:
    """One round's container selection, shared by the normal and the balance pass (YARN's FIFO selector)."""

    def __init__(self, calc: ResourceCalculator, cluster: Resource, allowance: Resource, *, observe_only: bool) -> None:
        self.calc = calc
        self.cluster = cluster
        self.allowance = allowance
        self.observe_only = observe_only
        self.candidates: list[Candidate] = []
        self.unreserved: list[Candidate] = []
        self._selected: dict[str, Candidate] = {}
        self._taken_from: dict[str, Resource] = {}
        self._budget_left: dict[str, int] = {}  # app with a disruption budget -> containers it may still lose
        self.budget_refused: set[str] = set()
        self.snapshot: ClusterSnapshot | None = None  # the one :meth:`run` selects from

    def run(self, snapshot: ClusterSnapshot, to_obtain: Mapping[str, Resource], *, balance: bool) -> None:
        self.snapshot = snapshot
        for leaf in snapshot.leaves():
            if leaf.preemption_disabled:
                continue
            target = self._deduct_selected(leaf.path, to_obtain.get(leaf.path, {}))
            if self.calc.positive(self.cluster, target):
                self._select_from(leaf, target, balance)

    def _deduct_selected(self, queue: str, target: Resource) -> Resource:
        """YARN's ``deductActuallyToBePreempted`` for every container an earlier pass took from ``queue``."""
        calc, cluster = self.calc, self.cluster
        remaining = dict(target)
        for cand in self.candidates:
            if cand.queue != queue:
                continue
            res = cand.container.resource
            if calc.gt(cluster, remaining, res):
                remaining = sub(remaining, res)
            remaining = calc.rmax(cluster, remaining, {})
        return remaining

    def _select_from(self, leaf: QueueSnapshot, target: Resource, balance: bool) -> None:
        calc, cluster = self.calc, self.cluster
        state = _Target(target)
        skipped_am: list[tuple[AppSnapshot, ContainerSnapshot]] = []
        skipped_am_size: Resource = {}
        opted_out: list[tuple[AppSnapshot, ContainerSnapshot]] = []
        for app in app_order(leaf.apps):
            if state.done:
                break
            for c in preemption_order(app.containers):
                if state.done:
                    break
                if c.id in self._selected:
                    continue
                if c.reserved:
                    self._try(leaf, c, state, balance)
                    if not self.observe_only:
                        self.unreserved.append(Candidate(c, leaf.path, balance))
                    continue
                if c.killable:
                    continue
                if c.am:
                    skipped_am.append((app, c))
                    skipped_am_size = add(skipped_am_size, c.resource)
                    continue
                if not app.allow_preemption:
                    opted_out.append((app, c))
                    continue
                self._take(leaf, app, c, state, balance)
        if opted_out and not state.done and not self._spare(leaf, state, balance):
            return  # other queues can still give down to their guarantees: the opted-out app waits, and so do AMs
        for app, c in opted_out:
            if state.done:
                break
            self._take(leaf, app, c, state, balance)
        am_limit = multiply_trunc(leaf.guaranteed, java_float(leaf.max_am_resource_percent))
        for app, c in skipped_am:
            if state.done or calc.le(cluster, skipped_am_size, am_limit):
                break
            if self._take(leaf, app, c, state, balance):
                skipped_am_size = sub(skipped_am_size, c.resource)

    def _spare(self, leaf: QueueSnapshot, state: _Target, balance: bool) -> bool:
        """A soft opt-out: what is left to obtain from ``leaf`` only its opted-out apps could give. For leaves
        below their guarantee with demand (what victims under notice and this round's do not cover yet),
        tasks of other leaves are taken instead, each leaf kept at or above its guarantee; ``state`` is
        charged with what they give. Whether the opted-out containers may then be taken: only when no other
        leaf could still give a task down to its guarantee."""
        assert self.snapshot is not None
        others = [q for q in self.snapshot.leaves() if q is not leaf and not q.preemption_disabled]
        need: Resource = {}
        for q in self.snapshot.leaves():
            if q is not leaf and any(v > 0 for v in q.pending.values()):
                short = {k: min(q.pending.get(k, 0), g - q.used.get(k, 0)) for k, g in q.guaranteed.items()}
                need = add(need, {k: v for k, v in short.items() if v > 0})
        for q in self.snapshot.leaves():
            for app in q.apps:
                for c in app.containers:
                    if c.killable and not c.reserved:
                        need = sub(need, c.resource)
        for cand in self.candidates:
            need = sub(need, cand.container.resource)
        shift = _Target({k: min(v, need.get(k, 0)) for k, v in state.remaining.items() if need.get(k, 0) > 0})
        if self.calc.positive(self.cluster, shift.remaining):
            given = dict(shift.remaining)
            for q in others:
                for app, c in self._spare_tasks(q):
                    if shift.done:
                        break
                    self._take(q, app, c, shift, balance)
            state.remaining = self.calc.rmax(
                self.cluster, sub(state.remaining, sub(given, component_max(shift.remaining, {}))), {}
            )
            if self.calc.le(self.cluster, state.remaining, {}):
                state.done = True
        return not any(self._spare_tasks(q) for q in others)

    def _spare_tasks(self, leaf: QueueSnapshot) -> list[tuple[AppSnapshot, ContainerSnapshot]]:
        """``leaf``'s tasks (no AM, no opted-out app's) not yet leaving that it can lose, in the selection's
        order, while it stays at or above its guarantee (in the DRF comparison and on every resource its
        guarantee names, as far as it holds it)."""
        usage = dict(leaf.used)
        for app in leaf.apps:
            for c in app.containers:
                if c.killable and not c.reserved:
                    usage = sub(usage, c.resource)
        for cand in self.candidates:
            if cand.queue == leaf.path:
                usage = sub(usage, cand.container.resource)
        out: list[tuple[AppSnapshot, ContainerSnapshot]] = []
        for app in app_order(leaf.apps):
            if not app.allow_preemption:
                continue
            for c in preemption_order(app.containers):
                if c.am or c.reserved or c.killable or c.id in self._selected:
                    continue
                after = sub(usage, c.resource)
                if not _keeps_guarantee(after, usage, leaf.guaranteed, self.cluster):
                    continue
                usage = after
                out.append((app, c))
        return out

    def _take(self, leaf: QueueSnapshot, app: AppSnapshot, c: ContainerSnapshot, state: _Target, balance: bool) -> bool:
        """:meth:`_try` within ``app``'s disruption budget (its containers already killable counted)."""
        if app.max_disruption is None:
            return self._try(leaf, c, state, balance)
        left = self._budget_left.get(app.id)
        if left is None:
            left = app.max_disruption - sum(1 for x in app.containers if x.killable)
        if left <= 0:
            self.budget_refused.add(c.id)
            return False
        taken = self._try(leaf, c, state, balance)
        self._budget_left[app.id] = left - 1 if taken else left
        return taken

    def _try(self, leaf: QueueSnapshot, c: ContainerSnapshot, state: _Target, balance: bool) -> bool:
        """YARN's ``tryPreemptContainerAndDeductResToObtain``."""
        calc, cluster = self.calc, self.cluster
        if c.id in self._selected or state.done:
            return False
        if not (calc.any_major_above_zero(state.remaining) and calc.fits_in(c.resource, self.allowance)):
            return False
        after = sub(state.remaining, c.resource)
        if not calc.lt(cluster, component_max(after, {}), component_max(state.remaining, {})):
            return False
        state.remaining = after
        self.allowance = sub(self.allowance, c.resource)
        if calc.le(cluster, state.remaining, {}):
            state.done = True
        cand = Candidate(c, leaf.path, balance)
        self._selected[c.id] = cand
        self.candidates.append(cand)
        return True


def _keeps_guarantee(after: Resource, before: Resource, guaranteed: Resource, cluster: Resource) -> bool:
    """Whether a leaf holding ``after`` (``before`` a victim) is at or above its guarantee: by dominant share,
    and on every resource the guarantee names as far as it held it."""
    if not guaranteed:
        return all(v >= 0 for v in after.values())
    if any(after.get(k, 0) < min(g, before.get(k, 0)) for k, g in guaranteed.items()):
        return False
    return not drf_below(after, guarantee_floor(after, guaranteed, cluster), cluster)


@dataclasses.dataclass(slots=True)
class _Target:
    remaining: Resource
    done: bool = False
