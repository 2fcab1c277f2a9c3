"""The simulation driver: replays a trace in virtual time through the real actors.

Each step moves the clock to the next interesting time (a trace event, a container's end, a tick),
publishes the tick and the events due, waits until every actor has handled everything (the links are
quiescent), then checks the invariants and samples the metrics. Nothing here reads the wall clock
except to measure ``allocations_per_s``; the same trace and seed give the same decisions.

:func:`drive` is the driver for any transport, given as :class:`Links` (how to publish, how decisions
come back, how to wait for quiescence); :func:`simulate` runs it on the memory bus
(:class:`MemoryLinks`), :mod:`sniper.simulator.kafka_run` through a Kafka broker. Both give the same report.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import anyio

from sniper.actors.partition import PartitionRuntime
from sniper.actors.policy import PolicyActor
from sniper.actors.router import Router
from sniper.core.config import PartitionConfig, SchedulerConfig, parse_partition
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.simulator.metrics import IdealFn, Metrics
from sniper.simulator.model import ClusterModel
from sniper.simulator.rm import StandInRM
from sniper.transport.bus import DECISIONS, FEED, TICK
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


@dataclasses.dataclass(slots=True)
class SimulationResult:
    report: dict[str, Any]
    decisions: list[d.DecisionMsg]
    metrics: dict[str, Metrics]
    models: dict[str, ClusterModel]
    runtimes: dict[str, PartitionRuntime]

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
    trace = sorted((_with_policy(e, settings.policy) for e in events), key=lambda e: e.t)
    names = sorted({e.partition for e in trace} | {part.name for part in (config.partitions if config else ())})
    try:
        router = links.router
        runtimes: dict[str, PartitionRuntime] = {}
        models: dict[str, ClusterModel] = {}
        metrics: dict[str, Metrics] = {}
        for name in names:
            initial = _initial_config(name, config, trace, settings.policy)
            provided = config is not None and any(part.name == name for part in config.partitions)
            runtimes[name] = PartitionRuntime(name, router, config=initial if provided else None, batch=settings.batch)
            models[name] = ClusterModel(name, initial)
            metrics[name] = Metrics(models[name], ideal_fn)
        rm = StandInRM()
        decisions_log: list[d.DecisionMsg] = []
        decisions = router.inbox([(DECISIONS, None)], group="resource-manager", capacity=1 << 16)
        clock = {"now": 0.0, "last_activity": 0.0}
        end_hint = settings.until if settings.until is not None else (trace[-1].t if trace else 0.0)

        async def publish_feed(event: f.Feed) -> None:
            model = models.get(event.partition)
            if model is not None:
                model.on_event(event)
            rm.observe(event)
            await router.publish(FEED, event.partition, event)

        async def consume_decisions() -> None:
            while True:
                try:
                    dec = await decisions.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    return
                decisions_log.append(dec)
                if not isinstance(dec, d.Rejected | d.ReservationEnded):
                    clock["last_activity"] = clock["now"]
                model = models.get(dec.partition)
                if model is not None:
                    model.on_decision(dec)
                    metrics[dec.partition].record(dec)
                for event in rm.on_decision(dec, clock["now"]):
                    await publish_feed(event)
                decisions.ack()

        wall_start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for runtime in runtimes.values():
                await tg.start(runtime.run)
            await links.ready()
            tg.start_soon(consume_decisions)
            await links.idle()
            i = 0
            next_tick = 0.0
            while True:
                upcoming = [next_tick]
                if i < len(trace):
                    upcoming.append(trace[i].t)
                rm_next = rm.next_time()
                if rm_next is not None:
                    upcoming.append(rm_next)
                nxt = min(upcoming)
                if settings.until is not None:
                    if nxt > settings.until:
                        break
                elif i >= len(trace) and rm_next is None:
                    waiting = any(m.pending_containers() for m in models.values())
                    if not waiting or nxt - clock["last_activity"] > settings.quiet:
                        break
                now = clock["now"] = nxt
                if now >= next_tick:
                    next_tick = (math.floor(now / settings.tick + 1e-9) + 1) * settings.tick
                await router.publish(TICK, "*", p.Tick(now=now))
                while i < len(trace) and trace[i].t <= now:
                    await publish_feed(trace[i])
                    i += 1
                for event in rm.due(now):
                    await publish_feed(event)
                await links.idle()
                for name, model in models.items():
                    model.check(now)
                    metrics[name].sample(now)
                if progress is not None:
                    progress(now, settings.until if settings.until is not None else max(end_hint, now))
            wall = time.perf_counter() - wall_start
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await links.aclose()
    report = build_report(runtimes, models, metrics, decisions_log, clock["now"], wall, settings, rm)
    report["transport"] = links.name
    report["topic_prefix"] = links.prefix
    return SimulationResult(report, decisions_log, metrics, models, runtimes)


def build_report(
    runtimes: dict[str, PartitionRuntime],
    models: dict[str, ClusterModel],
    metrics: dict[str, Metrics],
    decisions: list[d.DecisionMsg],
    sim_seconds: float,
    wall: float,
    settings: SimulationSettings,
    rm: StandInRM,
) -> dict[str, Any]:
    per_partition: dict[str, dict[str, Any]] = {}
    for name, runtime in runtimes.items():
        core = runtime.cache_core
        assert core is not None
        model, m = models[name], metrics[name]
        cfg = core.state.config
        pre = cfg.preemption if cfg is not None else None
        grace = pre.grace if pre is not None else 15.0
        wasted, ping_pong, undecided = m.preemption_outcomes(grace, settings.tick)
        allocations = sum(1 for x in decisions if isinstance(x, d.Allocated) and x.partition == name)
        per_partition[name] = {
            "policy": pre.policy if pre is not None else "none",
            "allocations": allocations,
            "preemptions": m.preemption_totals(),
            "wasted_preemptions": wasted,
            "ping_pong": ping_pong,
            "preemptions_undecided": undecided,
            "time_to_guarantee": m.time_to_guarantee(),
            "utilization": m.utilization(),
            "opportunistic": m.opportunistic(),
            "fairness_gap": m.fairness_gap(),
            "pending_at_end": model.pending_containers(),
            "rejected": sum(1 for x in decisions if isinstance(x, d.Rejected) and x.partition == name),
            "proposals_rejected": core.stats.placements_rejected,
            "proposals": core.stats.proposals,
            "mask": mask_statistics(runtime),
            "invariant_violations": len(model.violations),
            "violations": [dataclasses.asdict(v) for v in model.violations[:50]],
            "preemption_log": m.preemption_log(),
        }
    total_allocations = sum(r["allocations"] for r in per_partition.values())
    report: dict[str, Any] = {
        "policy": settings.policy or next(iter(per_partition.values()), {}).get("policy", "none"),
        "sim_seconds": round(sim_seconds, 3),
        "seed": settings.seed,
        "allocations": total_allocations,
        "allocations_per_s": round(total_allocations / wall, 1) if wall > 0 else None,
        "wall_seconds": round(wall, 3),
        "decisions": len(decisions),
        "retries": rm.retries,
        "lost_work_seconds": round(rm.lost_work, 3),
    }
    if len(per_partition) == 1:
        report.update({k: v for k, v in next(iter(per_partition.values())).items() if k != "policy"})
    else:
        for key in ("wasted_preemptions", "ping_pong", "pending_at_end", "rejected", "proposals_rejected"):
            report[key] = sum(r[key] for r in per_partition.values())
        report["invariant_violations"] = sum(r["invariant_violations"] for r in per_partition.values())
        report["preemptions"] = {
            "victims": sum(r["preemptions"]["victims"] for r in per_partition.values()),
            "resources": _sum_resources(r["preemptions"]["resources"] for r in per_partition.values()),
            "cancelled": sum(r["preemptions"]["cancelled"] for r in per_partition.values()),
        }
        report["time_to_guarantee"] = {
            f"{name}:{q}": v for name, r in per_partition.items() for q, v in r["time_to_guarantee"].items()
        }
        report["partitions"] = per_partition
    return report


def mask_statistics(runtime: PartitionRuntime) -> dict[str, int]:
    """Preemption-mask figures summed over the partition's policy actors."""
    out = {"masked": 0, "hits": 0, "clears": 0, "entries_at_end": 0}
    for actor in runtime.actors:
        policy = actor.replica_of.policy if isinstance(actor, PolicyActor) else None
        mask = None if policy is None else policy.mask
        if mask is not None:
            out["masked"] += mask.masked
            out["hits"] += mask.hits
            out["clears"] += mask.clears
            out["entries_at_end"] += len(mask)
    return out


def _sum_resources(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in items:
        for k, v in r.items():
            out[k] = out.get(k, 0) + v
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
