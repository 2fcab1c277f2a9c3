"""The simulation driver: replays a trace in virtual time through the real actors.

Each step moves the clock to the next time that can change something (a trace event, a container's
end, the next tick while the scheduler holds work that time moves: pending asks a policy may act on,
notices and reservations with deadlines), publishes the tick and the events due, waits until every
actor has handled everything (the links are quiescent), then checks the invariants and samples the
metrics when the model changed (the room of the nodes the step touched and of those that failed before;
``full_check``: of every node, the reference, which finds the same violations). Idle and settled time
(:func:`_has_work`) is jumped over: ticking through it would change only the phase of the policies'
rounds, which the driver keeps with one tick at the last round ticking would have run
(:func:`_round_ticks`; exact while the active policies share one phase), and the allocator's
missed-opportunity counts, which it carries over (:func:`_carry_missed`).
The trace cursor, the stand-in resource manager and the stop rules are the shared
:class:`~sniper.simulator.player.Player`.
Nothing here reads the wall clock except to measure ``allocations_per_s``; the same trace and seed
give the same decisions, and ``skip_idle=False`` (tick every second) gives the same decisions too.

:func:`drive` is the driver for any transport, given as :class:`Links` (how to publish, how decisions
come back, how to wait for quiescence); :func:`simulate` runs it on the memory bus
(:class:`MemoryLinks`), :mod:`sniper.simulator.kafka_run` through a Kafka broker. Both give the same report.
"""

from __future__ import annotations

import abc
import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio

from sniper.actors.allocator import AllocatorActor
from sniper.actors.partition import PartitionRuntime
from sniper.actors.policy import PolicyActor
from sniper.actors.router import Router
from sniper.core.config import PartitionConfig, SchedulerConfig, parse_partition
from sniper.core.preemption import quota_preemption
from sniper.core.preemption.policies import Policy, ProportionalBaseline, SniperPolicy, enabled_policies
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.simulator.metrics import IdealFn, Metrics
from sniper.simulator.model import ClusterModel
from sniper.simulator.player import EPS, Player, last_round_before, ticks_between
from sniper.simulator.report import PartitionFigures, Report, build_report
from sniper.transport.bus import DECISIONS, FEED, TICK, Subscription
from sniper.transport.memory import MemoryBus

Progress = Callable[[float, float | None], None]


@dataclasses.dataclass(frozen=True, slots=True)
class SimulationSettings:
    until: float | None = None
    seed: int = 0
    tick: float = 1.0
    policy: str | None = None  # overrides every partition's configured policy
    batch: int = 4096
    quiet: float = 60.0  # after the trace, stop once nothing happened for this long
    skip_idle: bool = True  # jump over idle time (False: tick every second, the reference)
    am_response: float | None = None  # a contract AM's answer to a preempt_request (None: half the grace)
    am_release_gap: float = 0.0  # seconds between the containers of one AM answer (0: all at once)
    full_check: bool = False  # check every node's room at every step (the reference), not what the step touched


@dataclasses.dataclass(slots=True)
class SimulationResult:
    summary: Report
    decisions: list[d.DecisionMsg]
    metrics: dict[str, Metrics]
    models: dict[str, ClusterModel]
    runtimes: dict[str, PartitionRuntime]
    steps: int = 0  # driver steps taken (virtual-time jumps)

    @property
    def report(self) -> dict[str, Any]:
        """The report as JSON-ready builtins (the struct is :attr:`summary`)."""
        return self.summary.to_dict()

    @property
    def violations(self) -> int:
        return sum(len(m.violations) for m in self.models.values())


def _with_policy(event: f.Feed, policy: str | None) -> f.Feed:
    if policy is None or not isinstance(event, f.PartitionConfigEvent):
        return event
    raw = dict(event.config)
    raw["preemption"] = {**dict(raw.get("preemption") or {}), "policy": policy}
    return f.PartitionConfigEvent(t=event.t, partition=event.partition, id=event.id, config=raw)


def _initial_config(
    name: str, config: SchedulerConfig | None, events: list[f.Feed], policy: str | None
) -> PartitionConfig | None:
    if config is not None:
        for part in config.partitions:
            if part.name == name:
                return part if policy is None else part.with_policy(policy)
    for e in events:
        if isinstance(e, f.PartitionConfigEvent) and e.partition == name:
            try:
                return parse_partition(e.config, f"partition {name}")
            except ValueError:
                return None
    return None


def _has_work(model: ClusterModel, runtime: PartitionRuntime, changed_at: float) -> bool:
    """Whether a tick can change anything in this partition: notices, reservations or preemption
    requests (deadlines; a request is settled at a tick), node reservations (timeouts), an allocator whose
    batch ran out, or pending asks while a preemption policy may still act on them.

    Pending asks are settled (ticks change nothing but the allocator's missed-opportunity counts, which
    the driver carries over) when every active policy's last round came after the partition's last
    change and could not act: sniper found no queue that could gain by preemption (no beneficiary or
    nothing to lose) and has no request in flight; YARN's baseline chose no container on the view as it
    is (its rounds until then would choose none; the one the driver keeps drops the marks they would
    have let expire). One missed cycle must be enough to be a candidate."""
    derived = model.derived()
    if derived.notices or model.reservations or model.requests or model.node_reservations:
        return True
    if any(isinstance(a, AllocatorActor) and a.core.dirty for a in runtime.actors):
        return True
    if _quota_work(runtime):
        return True
    config = model.config
    if not derived.pending_containers or config is None or not enabled_policies(config.preemption):
        return False
    if config.preemption.min_missed_opportunities > 1:
        return True
    for actor in runtime.actors:
        if not isinstance(actor, PolicyActor) or not actor.active:
            continue
        policy = actor.replica_of.policy
        if isinstance(policy, SniperPolicy):
            quotas = policy.last_quotas
            if policy.waiting is not None or quotas is None or (quotas.beneficiaries and quotas.may_lose):
                return True
        elif not isinstance(policy, ProportionalBaseline) or not policy.settled(actor.replica.state):
            return True
        if actor.next_round - policy.config.interval <= changed_at + EPS:
            return True  # no round has seen the latest state yet
    return False


def _coming_of_age(runtime: PartitionRuntime) -> float | None:
    """When the first container a settled proportional baseline left for its age comes of age (``None``:
    none waits)."""
    wakes = [
        policy.wake_at
        for actor in runtime.actors
        if isinstance(actor, PolicyActor)
        and actor.active
        and isinstance(policy := actor.replica_of.policy, ProportionalBaseline)
        and policy.wake_at is not None
    ]
    return min(wakes, default=None)


def _quota_work(runtime: PartitionRuntime) -> bool:
    """Whether quota preemption has a queue to bring back under its ``max`` (ticks run its delay out); it
    has none while only observing, which marks nothing."""
    core = runtime.cache_core
    if core is None or not core.state.max_since:
        return False
    state = core.state
    config = state.config
    return config is not None and not config.preemption.observe_only and quota_preemption.pending(state)


def _carry_missed(runtimes: dict[str, PartitionRuntime], cycles: int) -> None:
    """Count ``cycles`` skipped allocation cycles as missed for the asks the last cycle tried (settled
    time: each of those cycles would have tried the same asks and placed nothing)."""
    if cycles <= 0:
        return
    for runtime in runtimes.values():
        for actor in runtime.actors:
            if isinstance(actor, AllocatorActor):
                missed = actor.core.missed
                for key in actor.core.last_tried:
                    if key in missed:
                        missed[key] += cycles


def _round_ticks(
    runtimes: dict[str, PartitionRuntime], first_tick: float, before: float, tick: float, origin: float
) -> list[float]:
    """The last tick before ``before`` at which each active policy actor would have run a round had the
    driver ticked every ``tick`` from ``first_tick`` on (on the grid from ``origin``)."""
    out: set[float] = set()
    for runtime in runtimes.values():
        for actor in runtime.actors:
            if not isinstance(actor, PolicyActor) or not actor.active:
                continue
            config = actor.replica_of.state.config
            if config is None:
                continue
            at = last_round_before(
                actor.next_round - origin, config.preemption.interval, first_tick - origin, before - origin, tick
            )
            if at is not None:
                out.add(origin + at)
    return sorted(out)


class Links(abc.ABC):
    """How the driver and the partitions' actors reach each other: the transport side of a run.

    ``router`` carries every topic (the driver publishes the feed and the ticks on it and reads the
    decisions from it); ``name`` and ``prefix`` go into the report as ``transport`` and ``topic_prefix``.
    """

    name = "memory"
    prefix: str | None = None

    def __init__(self, router: Router) -> None:
        self.router = router

    async def ready(self) -> None:  # noqa: B027 - a hook, nothing to wait for by default
        """Return once every subscription made so far receives what is published from now on."""

    @abc.abstractmethod
    async def idle(self) -> None:
        """Return once every message delivered so far was acknowledged (the run is quiescent)."""

    @abc.abstractmethod
    async def aclose(self) -> None: ...


class MemoryLinks(Links):
    """Everything on one :class:`~sniper.transport.memory.MemoryBus`."""

    def __init__(self) -> None:
        self.bus = MemoryBus()
        super().__init__(Router(self.bus))

    async def idle(self) -> None:
        await self.bus.wait_idle()

    async def aclose(self) -> None:
        await self.bus.aclose()


async def simulate(
    events: list[f.Feed],
    config: SchedulerConfig | None = None,
    settings: SimulationSettings | None = None,
    *,
    progress: Progress | None = None,
    ideal_fn: IdealFn | None = None,
) -> SimulationResult:
    """The run on the memory bus."""
    return await drive(events, config, settings or SimulationSettings(), MemoryLinks(), progress, ideal_fn)


async def drive(
    events: list[f.Feed],
    config: SchedulerConfig | None,
    settings: SimulationSettings,
    links: Links,
    progress: Progress | None = None,
    ideal_fn: IdealFn | None = None,
) -> SimulationResult:
    """Replay ``events`` in virtual time through partitions whose actors run on ``links`` (closed at the end)."""
    player = Player(
        [_with_policy(e, settings.policy) for e in events],
        until=settings.until,
        tick=settings.tick,
        quiet=settings.quiet,
        skip_idle=settings.skip_idle,
        am_response=settings.am_response,
        am_release_gap=settings.am_release_gap,
        own_time=True,
    )
    try:
        world = _World.of(player, config, settings, links.router, ideal_fn)
        wall_start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for runtime in world.runtimes.values():
                await tg.start(runtime.run)
            await links.ready()
            tg.start_soon(world.consume_decisions)
            await links.idle()
            while (
                now := player.next_step(active=world.active(), waiting=world.waiting(), wake=world.wake())
            ) is not None:
                await world.step(now, settings.tick, links)
                if progress is not None:
                    progress(now - player.origin, player.end_hint)
            wall = time.perf_counter() - wall_start
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await links.aclose()
    return world.result(settings, wall, links)


@dataclasses.dataclass(slots=True)
class _World:
    """What :func:`drive` runs and watches: the trace's player, each partition's actors, its independent
    model and its metrics, when each model last changed, and every decision in the order it came."""

    player: Player
    router: Router
    runtimes: dict[str, PartitionRuntime]
    models: dict[str, ClusterModel]
    metrics: dict[str, Metrics]
    changed_at: dict[str, float]
    decisions: list[d.DecisionMsg]
    inbox: Subscription  # the resource manager's subscription to the decisions topic
    full_check: bool = False  # :meth:`ClusterModel.check` on every node's room, not only what a step touched

    @classmethod
    def of(
        cls,
        player: Player,
        config: SchedulerConfig | None,
        settings: SimulationSettings,
        router: Router,
        ideal_fn: IdealFn | None,
    ) -> _World:
        """The partitions the trace or the configuration names, each with its runtime, model and metrics."""
        trace = player.trace
        names = sorted({e.partition for e in trace} | {part.name for part in (config.partitions if config else ())})
        runtimes: dict[str, PartitionRuntime] = {}
        models: dict[str, ClusterModel] = {}
        metrics: dict[str, Metrics] = {}
        for name in names:
            initial = _initial_config(name, config, trace, settings.policy)
            provided = config is not None and any(part.name == name for part in config.partitions)
            runtimes[name] = PartitionRuntime(name, router, config=initial if provided else None, batch=settings.batch)
            models[name] = ClusterModel(name, initial)
            metrics[name] = Metrics(models[name], ideal_fn)
        inbox = router.inbox([(DECISIONS, None)], group="resource-manager", capacity=1 << 16)
        changed_at = dict.fromkeys(names, player.origin)
        return cls(player, router, runtimes, models, metrics, changed_at, [], inbox, settings.full_check)

    def active(self) -> bool:
        """Whether some partition holds work that time moves (:func:`_has_work`)."""
        return any(_has_work(self.models[n], self.runtimes[n], self.changed_at[n]) for n in self.models)

    def waiting(self) -> bool:
        """Whether some container is still asked for."""
        return any(m.pending_containers() for m in self.models.values())

    def wake(self) -> float | None:
        """The next boundary of an SLO plan (its guarantees change then), or the next time a settled
        baseline's young container comes of age (it may choose again then), if any."""
        wakes = [w for w in (m.slo.next_change(self.player.now) for m in self.models.values()) if w is not None]
        wakes += [w for runtime in self.runtimes.values() if (w := _coming_of_age(runtime)) is not None]
        return min(wakes, default=None)

    async def publish_feed(self, event: f.Feed) -> None:
        """One feed event: to its partition's model, the player, then the feed topic."""
        model = self.models.get(event.partition)
        if model is not None:
            model.on_event(event)
        self.player.observe(event)
        await self.router.publish(FEED, event.partition, event)

    async def consume_decisions(self) -> None:
        """Every decision, in order: logged, to its partition's model and metrics, then to the stand-in
        resource manager, whose answers go back on the feed."""
        while True:
            try:
                dec = await self.inbox.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
            self.decisions.append(dec)
            model = self.models.get(dec.partition)
            if model is not None:
                model.on_decision(dec)
                self.metrics[dec.partition].record(dec)
            for event in self.player.on_decision(dec, self.player.now):
                await self.publish_feed(event)
            self.inbox.ack()

    async def step(self, now: float, tick: float, links: Links) -> None:
        """Move the clock to ``now`` (with the policy rounds a jump over settled time would have run),
        publish the events due, wait for quiescence, then check and sample the models that changed."""
        player = self.player
        if now > player.next_tick:  # settled time jumped over: as if ticking through it
            origin = player.origin
            rounds = _round_ticks(self.runtimes, player.next_tick, now, tick, origin)
            _carry_missed(self.runtimes, ticks_between(player.next_tick - origin, now - origin, tick) - len(rounds))
            for at in rounds:
                await self.router.publish(TICK, "*", p.Tick(now=at))
                await links.idle()
        due = player.advance(now)
        await self.router.publish(TICK, "*", p.Tick(now=now))
        for event in due:
            await self.publish_feed(event)
        await links.idle()
        for name, model in self.models.items():
            if self.metrics[name].sample(now):
                model.check(now, full=self.full_check)
                self.changed_at[name] = now

    def result(self, settings: SimulationSettings, wall: float, links: Links) -> SimulationResult:
        """The report and everything behind it, once the last step is taken."""
        player = self.player
        for m in self.metrics.values():
            m.finish(player.now)
        parts = {
            name: _figures(self.runtimes[name], self.models[name], self.metrics[name], player) for name in self.models
        }
        report = build_report(
            parts,
            sim_seconds=player.now - player.origin,
            wall=wall,
            cycle=settings.tick,
            policy=settings.policy,
            seed=settings.seed,
            retries=player.rm.retries,
            transport=links.name,
            topic_prefix=links.prefix,
        )
        return SimulationResult(report, self.decisions, self.metrics, self.models, self.runtimes, player.steps)


def _figures(runtime: PartitionRuntime, model: ClusterModel, metrics: Metrics, player: Player) -> PartitionFigures:
    core = runtime.cache_core
    assert core is not None
    cfg = core.state.config
    return PartitionFigures(
        model=model,
        metrics=metrics,
        grace=cfg.preemption.grace if cfg is not None else 15.0,
        counts=Counter(type(x).__name__ for x in metrics.decisions),
        lost_work=player.rm.lost_work.get(runtime.partition, 0.0),
        lost_work_by_cause=player.rm.lost_work_by_cause.get(runtime.partition, {}),
        running_time_lost=player.rm.running_time_lost.get(runtime.partition, 0.0),
        proposals_rejected=core.stats.placements_rejected,
        proposals=core.stats.proposals,
        mask=mask_statistics(runtime),
        budget_refusals=sum(p.budget_refusals for p in runtime_policies(runtime)),
    )


def runtime_policies(runtime: PartitionRuntime) -> list[Policy]:
    """The partition's preemption policies, one per policy actor."""
    policies = [actor.replica_of.policy for actor in runtime.actors if isinstance(actor, PolicyActor)]
    return [policy for policy in policies if policy is not None]


def mask_statistics(runtime: PartitionRuntime) -> dict[str, int]:
    """Preemption-mask figures summed over the partition's policy actors."""
    out = {"masked": 0, "hits": 0, "clears": 0, "entries_at_end": 0}
    for policy in runtime_policies(runtime):
        mask = policy.mask
        if mask is not None:
            out["masked"] += mask.masked
            out["hits"] += mask.hits
            out["clears"] += mask.clears
            out["entries_at_end"] += len(mask)
    return out


def run_simulation(
    events: list[f.Feed],
    config: SchedulerConfig | None = None,
    settings: SimulationSettings | None = None,
    *,
    progress: Progress | None = None,
    ideal_fn: IdealFn | None = None,
) -> SimulationResult:
    """Synchronous entry point: runs :func:`simulate` on uvloop."""

    async def main() -> SimulationResult:
        return await simulate(events, config, settings, progress=progress, ideal_fn=ideal_fn)

    return anyio.run(main, backend="asyncio", backend_options={"use_uvloop": True})
