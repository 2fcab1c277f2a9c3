"""Kafka test fixtures: one broker per test session, settings with a topic prefix per test, and a bus on them.

``kafka_bootstrap`` is ``$SNIPER_KAFKA_BOOTSTRAP`` when set (an external broker), else the address of
an :class:`~sniper.transport.broker.EmbeddedBroker` started once for the session and stopped at its end.
``kafka_settings`` gives every test its own topic prefix, so tests never see each other's records,
and short group timeouts (the bundled broker holds a join for about half the session timeout).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence

import anyio
import pytest
from anyio.abc import Process, TaskGroup

from sniper.bench.e2e import ASSIGNED, start_core
from sniper.messages import decisions as d
from sniper.resource_manager.checker import OrderedChecker
from sniper.transport.broker import EmbeddedBroker, resolve_bootstrap
from sniper.transport.kafka import KafkaBus, KafkaSettings, KafkaSubscription


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    external = resolve_bootstrap(None)
    if external is not None:
        yield external
        return
    with EmbeddedBroker() as broker:
        yield broker.bootstrap


def unique_prefix(label: str = "t") -> str:
    """A topic prefix no other test uses: ``sniper-test.<label>.<random>.``."""
    safe = "".join(c if c.isalnum() else "-" for c in label)[:40]
    return f"sniper-test.{safe}.{uuid.uuid4().hex[:10]}."


@pytest.fixture
def kafka_settings(kafka_bootstrap: str, request: pytest.FixtureRequest) -> KafkaSettings:
    settings = KafkaSettings(
        bootstrap=kafka_bootstrap,
        prefix=unique_prefix(request.node.name),
        partitions=4,
        commit_interval=0.2,
        close_timeout=5.0,
    )
    if resolve_bootstrap(None) is None:
        # The embedded broker accepts short sessions (a real Kafka's minimum is 6 s by default).
        settings = dataclasses.replace(settings, session_timeout_ms=2_000, heartbeat_interval_ms=500)
    return settings


@pytest.fixture
async def bus(kafka_settings: KafkaSettings) -> AsyncIterator[KafkaBus]:
    """A :class:`KafkaBus` on the test's own topics (a test module that needs validators at the edge
    defines its own ``bus``)."""
    async with KafkaBus(kafka_settings) as b:
        yield b


class TopicReader:
    """Reads the feed and the decisions topics into an independent :class:`OrderedChecker`, keeps the
    decisions in ``items`` and wakes waiters on every change (tests wait on conditions, never sleep)."""

    def __init__(self, feed: KafkaSubscription, decisions: KafkaSubscription) -> None:
        self.feed = feed
        self.decisions = decisions
        self.checker = OrderedChecker()
        self.items: list[d.DecisionMsg] = []
        self.changed = anyio.Event()

    def _wake(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    async def pump_feed(self) -> None:
        while True:
            try:
                _kp, offset, event, _value = await self.feed.receive_record()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
            self.feed.ack()
            self.checker.on_feed(offset, event, 0.0)
            self._wake()

    async def pump_decisions(self) -> None:
        while True:
            try:
                dec = await self.decisions.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
            self.decisions.ack()
            self.items.append(dec)
            self.checker.on_decision(dec, dec.t)
            self._wake()

    async def until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            await self.changed.wait()


class CoreSubprocess:
    """A ``sniper core`` subprocess (any role); its log tells which Kafka partitions it was last assigned.

    ``changed`` is set at every log line (``lines``), ``assigned`` follows the assignment lines.
    """

    def __init__(self, process: Process) -> None:
        self.process = process
        self.assigned: list[int] = []
        self.lines: list[str] = []
        self.changed = anyio.Event()

    @classmethod
    async def spawn(cls, settings: KafkaSettings, tg: TaskGroup, group: str, *options: str) -> CoreSubprocess:
        """Start ``sniper core --group group *options`` and read its log in ``tg``."""
        core = cls(await start_core(settings, group, *options))
        tg.start_soon(core.read_log)
        return core

    async def read_log(self) -> None:
        assert self.process.stderr is not None
        buffer = b""
        async for chunk in self.process.stderr:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace")
                self.lines.append(line)
                found = ASSIGNED.search(line)
                if found is not None:
                    self.assigned = [int(x) for x in found.group(1).replace(" ", "").split(",") if x]
                self.changed.set()  # on every line: waiters check their own condition
                self.changed = anyio.Event()

    async def until_assigned(self) -> None:
        while not self.assigned:
            await self.changed.wait()


async def until_any(cores: Sequence[CoreSubprocess], condition: Callable[[], bool]) -> None:
    """Wait until ``condition()`` holds, looking again whenever any of ``cores`` logs a line.

    A condition over several cores' logs (their assignments) changes on any one's line: waiting on one
    core's lines alone would miss the change a line of another makes.
    """
    while not condition():
        events = [core.changed for core in cores]  # taken before any await: no line can slip between
        async with anyio.create_task_group() as tg:

            async def wake(event: anyio.Event) -> None:
                await event.wait()
                tg.cancel_scope.cancel()

            for event in events:
                tg.start_soon(wake, event)
