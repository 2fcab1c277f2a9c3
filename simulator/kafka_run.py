"""The simulator's run through a Kafka broker: :func:`run_simulation_kafka` (``sniper simulate --transport kafka``).

Same driver as :func:`simulator.run.simulate` (virtual time, the stand-in resource manager, the
independent model, the same report), but feed events, decisions and the actor links (view deltas,
proposals, placement requests) travel on Kafka topics under a unique prefix; only ticks stay in
process. The broker is ``bootstrap``, else ``$SNIPER_KAFKA_BOOTSTRAP``, else an embedded one.

Quiescence: :class:`CountingBus` counts, for every record published, the subscriptions that will
receive it (same topic, same or any key), and every acknowledgement; the driver advances virtual time
only when every delivered record was acknowledged (actors acknowledge after publishing what a message
caused), exactly like the memory bus. Every subscription joins before the first record is published.
"""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
from typing import Any

import anyio

from actors.partition import PartitionRuntime
from actors.router import Router
from cluster.kafka_env import bootstrap_or_embedded, build_settings
from core.config import SchedulerConfig
from messages import decisions as d
from messages import feed as f
from messages import protocol as p
from simulator.metrics import IdealFn, Metrics
from simulator.model import ClusterModel
from simulator.rm import StandInRM
from simulator.run import (
    Progress,
    SimulationResult,
    SimulationSettings,
    _initial_config,
    _with_policy,
    build_report,
)
from transport.bus import DECISIONS, FEED, TICK, Bus, Subscription
from transport.kafka import KafkaBus, KafkaSettings, KafkaSubscription
from transport.memory import MemoryBus


class _CountingSubscription(Subscription):
    def __init__(self, bus: CountingBus, inner: KafkaSubscription) -> None:
        self._bus = bus
        self.inner = inner

    async def receive(self) -> Any:
        return await self.inner.receive()

    def receive_nowait(self) -> Any:
        return self.inner.receive_nowait()

    def ack(self) -> None:
        self.inner.ack()
        self._bus._handled(1)

    def depth(self) -> int:
        return self.inner.depth()

    async def aclose(self) -> None:
        await self.inner.aclose()


class CountingBus(Bus):
    """A :class:`KafkaBus` that knows when every delivered record has been acknowledged.

    Each subscription gets its own consumer group (``prefix + group.key.n``), so every subscriber sees
    every record of its key, as on the memory bus.
    """

    def __init__(self, inner: KafkaBus) -> None:
        self.inner = inner
        self._subs: list[tuple[str, str | None, _CountingSubscription]] = []
        self._in_flight = 0
        self._idle = anyio.Event()
        self._idle.set()

    async def publish(self, topic: str, key: str, message: Any) -> None:
        receivers = sum(1 for t, k, _ in self._subs if t == topic and (k is None or k == key))
        if receivers:
            self._in_flight += receivers
            if self._idle.is_set():
                self._idle = anyio.Event()
        await self.inner.publish(topic, key, message)

    def subscribe(self, topic: str, *, group: str, key: str | None = None, capacity: int = 1024) -> Subscription:
        unique = f"{self.inner.settings.prefix}{group}.{key or '*'}.{len(self._subs)}"
        sub = _CountingSubscription(self, self.inner.subscribe(topic, group=unique, key=key, capacity=capacity))
        self._subs.append((topic, key, sub))
        return sub

    async def all_ready(self) -> None:
        async with anyio.create_task_group() as tg:
            for _, _, sub in self._subs:
                tg.start_soon(sub.inner.ready)

    def _handled(self, count: int) -> None:
        self._in_flight = max(0, self._in_flight - count)
        if self._in_flight == 0:
            self._idle.set()

    async def wait_idle(self) -> None:
        while self._in_flight:
            await self._idle.wait()

    async def aclose(self) -> None:
        await self.inner.aclose()


async def simulate_kafka(
    events: list[f.Feed],
    config: SchedulerConfig | None,
    settings: SimulationSettings,
    kafka: KafkaSettings,
    *,
    progress: Progress | None = None,
    ideal_fn: IdealFn | None = None,
) -> SimulationResult:
    trace = sorted((_with_policy(e, settings.policy) for e in events), key=lambda e: e.t)
    names = sorted({e.partition for e in trace} | {part.name for part in (config.partitions if config else ())})
    memory = MemoryBus()
    kbus = KafkaBus(kafka)
    await kbus.start()
    bus = CountingBus(kbus)
    router = Router(bus, {TICK: memory})
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
    decisions = bus.subscribe(DECISIONS, group="resource-manager", capacity=1 << 16)
    clock = {"now": 0.0, "last_activity": 0.0}
    end_hint = settings.until if settings.until is not None else (trace[-1].t if trace else 0.0)

    async def idle() -> None:
        while bus._in_flight or memory.in_flight:
            await bus.wait_idle()
            await memory.wait_idle()

    async def publish_feed(event: f.Feed) -> None:
        model = models.get(event.partition)
        if model is not None:
            model.on_event(event)
        rm.observe(event)
        await bus.publish(FEED, event.partition, event)

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
    try:
        async with anyio.create_task_group() as tg:
            for runtime in runtimes.values():
                await tg.start(runtime.run)
            await bus.all_ready()
            tg.start_soon(consume_decisions)
            await idle()
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
                await memory.publish(TICK, "*", p.Tick(now=now))
                while i < len(trace) and trace[i].t <= now:
                    await publish_feed(trace[i])
                    i += 1
                for event in rm.due(now):
                    await publish_feed(event)
                await idle()
                for name, model in models.items():
                    model.check(now)
                    metrics[name].sample(now)
                if progress is not None:
                    progress(now, settings.until if settings.until is not None else max(end_hint, now))
            wall = time.perf_counter() - wall_start
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await memory.aclose()
            await bus.aclose()
    report = build_report(runtimes, models, metrics, decisions_log, clock["now"], wall, settings, rm)
    report["transport"] = "kafka"
    report["kafka_prefix"] = kafka.prefix
    return SimulationResult(report, decisions_log, metrics, models, runtimes)


def run_simulation_kafka(
    events: list[f.Feed],
    config: SchedulerConfig | None = None,
    settings: SimulationSettings | None = None,
    *,
    progress: Progress | None = None,
    ideal_fn: IdealFn | None = None,
    bootstrap: str | None = None,
) -> SimulationResult:
    """Synchronous entry point on uvloop; topics get a fresh ``sniper-sim.<random>.`` prefix."""
    sim = settings or SimulationSettings()

    async def main() -> SimulationResult:
        async with bootstrap_or_embedded(bootstrap) as (address, embedded):
            kafka = build_settings(address, embedded=embedded, prefix=f"sniper-sim.{uuid.uuid4().hex[:10]}.")
            kafka = dataclasses.replace(kafka, commit_interval=0.5)
            return await simulate_kafka(events, config, sim, kafka, progress=progress, ideal_fn=ideal_fn)

    return anyio.run(main, backend="asyncio", backend_options={"use_uvloop": True})
