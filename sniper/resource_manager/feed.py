"""``sniper feed`` and ``sniper record``: a resource manager's side of a live cluster.

:func:`play` replays a trace onto the ``feed`` topic in scaled real time (trace second ``t``, counted
from the first event, is published at wall second ``t / speed``; every event gets an id, ``RUN:LINE``,
unless it has one) through the simulator's sans-IO :class:`~sniper.simulator.player.Player` (the trace
cursor and the stand-in resource manager the virtual-time driver uses): it consumes the decisions,
releases containers after their duration, answers kills and asks again for lost work. An
:class:`~sniper.resource_manager.checker.OrderedChecker` reads the feed and the decisions from Kafka and produces the
report of architecture: Metrics (one :class:`~sniper.simulator.report.Report`) as far as the decisions
allow, over the partitions the trace drives only (another feed's partitions on the same topics are
not this report's). Decisions of a deposed owner (a lower epoch than the highest seen for the
partition) are dropped, as a real resource manager would. The checker reads only the feed records the cores accept
(judged at the edge like them); the dead letters of the others are the cores' to write. At the end a
marker per partition (a ``sync`` event, answered by a ``synced`` decision and nothing else) proves that
a core answered every event before it;
``PlayResult.unanswered`` names the partitions whose marker got no answer within ``drain`` seconds,
with the number of events published to each.

:func:`record` writes the feed as it passes to a JSON Lines trace, which ``sniper simulate FILE`` can
replay: ``t`` is the event's own trace time less the first record's, so times and durations stay in
one time base (trace seconds) whatever the speed the feed was played at.

A play that gets no decision at all within ``answer_timeout`` wall seconds of its first event raises
:class:`NoAnswer`: no core is listening, and waiting longer would report an empty run as a success.

The wall clock is read here only; the trace clock is wall time since the start times ``speed``.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec

from sniper.core.config import SchedulerConfig
from sniper.core.recovery import feed_problem
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages.codec import encode_json_line
from sniper.resource_manager.checker import OrderedChecker
from sniper.simulator.metrics import IdealFn
from sniper.simulator.player import Player
from sniper.simulator.report import Report
from sniper.transport.bus import DECISIONS, FEED
from sniper.transport.kafka import KafkaBus, KafkaSettings, KafkaSubscription


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PlayOptions:
    speed: float = 1.0
    until: float | None = None  # trace seconds
    drain: float = 10.0  # after the trace: stop once nothing was decided for this many wall seconds
    sample: float = 1.0  # trace seconds between metric samples
    run: str = ""  # id prefix of the events; default: a random one
    answer_timeout: float = 30.0  # wall seconds from the first event to the first decision

    def __post_init__(self) -> None:
        if self.speed <= 0 or self.drain <= 0 or self.sample <= 0 or self.answer_timeout <= 0:
            raise ValueError("speed, drain, sample and answer_timeout must be positive")


class NoAnswer(RuntimeError):
    """No core decided anything within ``PlayOptions.answer_timeout`` of the first event."""


@dataclasses.dataclass(slots=True)
class PlayResult:
    summary: Report
    checker: OrderedChecker
    published: int
    unanswered: dict[str, int] = dataclasses.field(default_factory=dict)  # partition -> events unanswered

    @property
    def report(self) -> dict[str, Any]:
        """The report as JSON-ready builtins (the struct is :attr:`summary`)."""
        return self.summary.to_dict()

    @property
    def violations(self) -> int:
        return self.checker.violations


def with_config_events(events: list[f.Feed], config: SchedulerConfig | None) -> list[f.Feed]:
    """``events`` preceded by a ``partition_config`` event for each configured partition the trace does
    not configure itself (a bundled scenario's config lives beside its events)."""
    from sniper.core.config import partition_to_raw

    configured = {e.partition for e in events if isinstance(e, f.PartitionConfigEvent)}
    head: list[f.Feed] = [
        f.PartitionConfigEvent(t=0.0, partition=part.name, config=partition_to_raw(part))
        for part in (config.partitions if config else ())
        if part.name not in configured
    ]
    return head + events


def with_ids(events: list[f.Feed], run: str) -> list[f.Feed]:
    return [e if e.id else msgspec.structs.replace(e, id=f"{run}:{i}") for i, e in enumerate(events, start=1)]


async def play(
    settings: KafkaSettings,
    events: list[f.Feed],
    options: PlayOptions | None = None,
    *,
    config: SchedulerConfig | None = None,
    ideal_fn: IdealFn | None = None,
    progress: Callable[[float, float], None] | None = None,
) -> PlayResult:
    options = options or PlayOptions()
    run = options.run or uuid.uuid4().hex[:8]
    player = Player(with_ids(with_config_events(events, config), run), until=options.until)
    replay = _Replay(player, OrderedChecker(config, ideal_fn), options, run, progress)
    latest = dataclasses.replace(settings, auto_offset_reset="latest")
    async with KafkaBus(latest, validators={FEED: feed_problem}) as bus:
        decisions = await bus.subscribe_ready(DECISIONS, group=f"{settings.prefix}feeder-{run}", capacity=8192)
        feed = await bus.subscribe_ready(FEED, group=f"{settings.prefix}checker-{run}", capacity=8192, bad="skip")
        replay.start(bus)
        async with anyio.create_task_group() as tg:
            tg.start_soon(replay.read_decisions, decisions)
            tg.start_soon(replay.read_feed, feed)
            await replay.pace(settings.bootstrap)
            wall, seconds = time.monotonic() - replay.started, replay.now()
            await replay.mark_ends()
            tg.cancel_scope.cancel()
    return replay.result(wall, seconds)


class _Replay:
    """One :func:`play`: the trace's pacing, what was published, the decisions read and the end markers."""

    def __init__(
        self,
        player: Player,
        checker: OrderedChecker,
        options: PlayOptions,
        run: str,
        progress: Callable[[float, float], None] | None,
    ) -> None:
        self.player = player
        self.checker = checker
        self.options = options
        self.run = run
        self.progress = progress
        self.bus: KafkaBus | None = None
        self.started = time.monotonic()
        self.rm_ids = 0
        self.published = 0
        self.answered = False
        self.last_decision = self.started
        self.markers = {e.partition: f"{run}:end:{e.partition}" for e in player.trace}
        self.marked: set[str] = set()  # partitions whose end marker a core answered
        self.per_partition: Counter[str] = Counter()  # events published, per partition
        self.all_marked = anyio.Event()

    def start(self, bus: KafkaBus) -> None:
        """Trace time starts now."""
        self.bus = bus
        self.started = self.last_decision = time.monotonic()

    def now(self) -> float:
        """Trace seconds since the start."""
        return (time.monotonic() - self.started) * self.options.speed

    async def publish(self, batch: list[f.Feed]) -> None:
        assert self.bus is not None
        for event in batch:
            self.player.observe(event)
        await self.bus.publish_many(FEED, [(e.partition, e) for e in batch])
        self.published += len(batch)
        for event in batch:
            self.per_partition[event.partition] += 1

    def rm_events(self, batch: list[f.Feed]) -> list[f.Feed]:
        """The stand-in resource manager's events, stamped now with ids of their own."""
        out = []
        for event in batch:
            self.rm_ids += 1
            out.append(msgspec.structs.replace(event, id=f"{self.run}:rm{self.rm_ids}", t=self.now()))
        return out

    async def read_decisions(self, sub: KafkaSubscription) -> None:
        while True:
            try:
                dec = await sub.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
            sub.ack()
            if dec.partition not in self.markers:
                continue  # a partition this feed does not drive: not its report
            self.last_decision = time.monotonic()
            if isinstance(dec, d.Synced) and dec.event == self.markers.get(dec.partition):
                self.marked.add(dec.partition)
                if self.marked == self.markers.keys():
                    self.all_marked.set()
                continue  # the end markers stay out of the checker and the report
            self.answered = True
            t = self.now()
            if self.checker.on_decision(dec, t) and not isinstance(dec, d.Rejected):
                answer = self.player.on_decision(dec, t)
                if answer:
                    await self.publish(self.rm_events(answer))

    async def read_feed(self, sub: KafkaSubscription) -> None:
        while True:
            try:
                _kp, offset, event, _value = await sub.receive_record()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
            sub.ack()
            if event.partition not in self.markers:
                continue  # another resource manager's partition
            if event.id != self.markers.get(event.partition):  # the end markers stay out of the report
                self.checker.on_feed(offset, event, self.now())

    async def pace(self, bootstrap: str) -> None:
        """Publish the trace in scaled real time until it ends (or ``until``) and the cores went quiet."""
        options, player = self.options, self.player
        next_sample = 0.0
        while True:
            t = self.now()
            if options.until is not None and t > options.until:
                return
            before = player.cursor
            due = player.due(t)  # trace events first, then the resource manager's container ends
            traced = player.cursor - before
            batch = due[:traced] + self.rm_events(due[traced:])
            if batch:
                await self.publish(batch)
            if not self.answered and time.monotonic() - self.started > options.answer_timeout:
                raise NoAnswer(
                    f"no core answered {self.published} feed event(s) within {options.answer_timeout:g} s: "
                    f"start one (sniper core --bootstrap {bootstrap}) or raise --answer-timeout"
                )
            if t >= next_sample:
                self.checker.sample(t)
                next_sample = t + options.sample
                if self.progress is not None:
                    self.progress(t, player.end_hint)
            if player.cursor >= len(player.trace) and options.until is None and self.answered and self.drained(t):
                return
            await anyio.sleep(0.01)  # the replay's pacing timer, not a synchronisation

    def drained(self, t: float) -> bool:
        """The trace is out and the cores have nothing more to say: nothing pending, or quiet for ``drain``."""
        options = self.options
        quiet = time.monotonic() - self.last_decision
        pending = sum(p.model.pending_containers() for p in self.checker.parts.values())
        upcoming = self.player.rm.next_time()
        if upcoming is None and (pending == 0 or quiet > options.drain) and quiet > 0.5:
            return True
        return quiet > options.drain and (upcoming is None or upcoming > t + options.drain * options.speed)

    async def mark_ends(self) -> None:
        """Publish a ``sync`` marker per partition and wait (up to ``drain``) until each is answered."""
        assert self.bus is not None
        ends = [(p, f.Sync(partition=p, id=m)) for p, m in self.markers.items()]
        await self.bus.publish_many(FEED, ends)
        with anyio.move_on_after(self.options.drain):
            if self.markers:
                await self.all_marked.wait()

    def result(self, wall: float, seconds: float) -> PlayResult:
        unanswered = {p: self.per_partition[p] for p in sorted(self.markers.keys() - self.marked)}
        self.checker.finish(seconds)
        report = self.checker.report(
            seconds=seconds,
            wall=wall,
            tick=self.options.sample,
            lost_work=self.player.rm.lost_work,
            lost_work_by_cause=self.player.rm.lost_work_by_cause,
            running_time_lost=self.player.rm.running_time_lost,
            retries=self.player.rm.retries,
            extra={"published": self.published},
        )
        return PlayResult(report, self.checker, self.published, unanswered)


async def record(settings: KafkaSettings, out: Path, *, duration: float | None, from_beginning: bool = False) -> int:
    """Write the feed as it passes to ``out`` (JSON Lines) for ``duration`` wall seconds; returns the count."""
    reader = dataclasses.replace(settings, auto_offset_reset="earliest" if from_beginning else "latest")
    counted = [0]
    async with KafkaBus(reader) as bus:
        sub = await bus.subscribe_ready(FEED, group=f"{settings.prefix}record-{uuid.uuid4().hex[:8]}")
        handle = await anyio.open_file(out, "wb")
        async with handle:
            with anyio.move_on_after(duration if duration is not None else float("inf")):
                await _copy(sub, handle, counted)
    return counted[0]


async def _copy(sub: KafkaSubscription, handle: Any, counted: list[int]) -> None:
    first: float | None = None
    while True:
        try:
            event = await sub.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return
        sub.ack()
        if first is None:
            first = event.t
        t = round(max(0.0, event.t - first), 6)  # trace seconds, like the durations the events carry
        await handle.write(encode_json_line(msgspec.structs.replace(event, t=t)))
        await handle.flush()
        counted[0] += 1
