"""The simulator's run through a Kafka broker: :func:`run_simulation_kafka` (``sniper simulate --transport kafka``).

The driver of the memory run, :func:`sniper.simulator.run.drive` (virtual time, the stand-in resource
manager, the independent model, the same report), on :class:`KafkaLinks`: feed events, decisions and
the actor links (view deltas, proposals, placement requests) travel on Kafka topics under a unique
prefix; only ticks stay in process. The broker is ``bootstrap``, else ``$SNIPER_KAFKA_BOOTSTRAP``, else
an embedded one.

Quiescence: :class:`CountingBus` counts, for every record published, the subscriptions that will
receive it (same topic, same or any key), and every acknowledgement; the driver advances virtual time
only when every delivered record was acknowledged (actors acknowledge after publishing what a message
caused), exactly like the memory bus. Every subscription joins before the first record is published.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import anyio

from sniper.actors.router import Router
from sniper.cluster.kafka_env import bootstrap_or_embedded, build_settings
from sniper.core.config import SchedulerConfig
from sniper.messages import feed as f
from sniper.simulator.metrics import IdealFn
from sniper.simulator.run import Links, Progress, SimulationResult, SimulationSettings, drive
from sniper.transport.bus import TICK, Bus, Subscription
from sniper.transport.kafka import KafkaBus, KafkaSettings, KafkaSubscription
from sniper.transport.memory import MemoryBus


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

    @property
    def in_flight(self) -> int:
        """Records delivered (or on their way) and not yet acknowledged."""
        return self._in_flight

    def _handled(self, count: int) -> None:
        self._in_flight = max(0, self._in_flight - count)
        if self._in_flight == 0:
            self._idle.set()

    async def wait_idle(self) -> None:
        while self._in_flight:
            await self._idle.wait()

    async def aclose(self) -> None:
        await self.inner.aclose()


class KafkaLinks(Links):
    """Feed, decisions and actor links on Kafka (through a :class:`CountingBus`); ticks in memory."""

    name = "kafka"

    def __init__(self, kafka: KafkaBus) -> None:
        self.memory = MemoryBus()
        self.bus = CountingBus(kafka)
        self.prefix = kafka.settings.prefix
        super().__init__(Router(self.bus, {TICK: self.memory}))

    async def ready(self) -> None:
        await self.bus.all_ready()

    async def idle(self) -> None:
        while self.bus.in_flight or self.memory.in_flight:
            await self.bus.wait_idle()
            await self.memory.wait_idle()

    async def aclose(self) -> None:
        await self.memory.aclose()
        await self.bus.aclose()


async def simulate_kafka(
    events: list[f.Feed],
    config: SchedulerConfig | None,
    settings: SimulationSettings,
    kafka: KafkaSettings,
    *,
    progress: Progress | None = None,
    ideal_fn: IdealFn | None = None,
) -> SimulationResult:
    """The run of :func:`sniper.simulator.run.drive` with every actor link on the broker ``kafka`` names."""
    bus = KafkaBus(kafka)
    try:
        await bus.start()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await bus.aclose()
        raise
    return await drive(events, config, settings, KafkaLinks(bus), progress, ideal_fn)


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
