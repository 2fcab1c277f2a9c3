"""``sniper feed`` reports success only when a core answered every event (an end marker per partition)."""

from __future__ import annotations

import functools
import itertools

import anyio
import pytest

from sniper.cluster.process import CoreOptions, CoreProcess
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.resource_manager.feed import PlayOptions, play
from sniper.transport.bus import DECISIONS, FEED
from sniper.transport.kafka import KafkaBus, KafkaSettings
from tests.core_process_support import Decisions
from tests.core_support import partition_raw, queue

pytestmark = pytest.mark.kafka


def trace(name: str) -> list[f.Feed]:
    raw = partition_raw(queue("a", guaranteed={"memory": 64}), queue("b", guaranteed={"memory": 64}), name=name)
    return [
        f.PartitionConfigEvent(partition=name, config=raw),
        f.NodeAdded(partition=name, node="n1", capacity={"memory": 100}),
        f.AppAdded(partition=name, app="app", queue="root.a"),
        f.AskAdded(t=0.1, partition=name, app="app", ask="k", resource={"memory": 2}, count=3),
    ]


async def test_a_feed_names_the_partitions_no_core_answered(kafka_settings: KafkaSettings) -> None:
    # A core that hosts one partition at most answers one and dead-letters the other's records.
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            await tg.start(CoreProcess(kafka_settings, CoreOptions(group="one", tick=0.1, max_partitions=1)).run)
            both = trace("one") + trace("other")
            result = await play(kafka_settings, both, PlayOptions(speed=10.0, drain=3.0))
            tg.cancel_scope.cancel()
    [(refused, count)] = result.unanswered.items()  # whichever partition's records came second
    assert refused in ("one", "other") and count == 4  # the events published to it


async def test_a_feed_a_core_answers_has_nothing_unanswered_and_leaves_no_rejection(
    kafka_settings: KafkaSettings,
) -> None:
    process = CoreProcess(kafka_settings, CoreOptions(group="answers", tick=0.1))
    with anyio.fail_after(60):
        async with KafkaBus(kafka_settings) as bus, anyio.create_task_group() as tg:
            reader = Decisions(await bus.subscribe_ready(DECISIONS, group=bus.settings.prefix + "reader"))
            tg.start_soon(reader.pump)
            await tg.start(process.run)
            result = await play(kafka_settings, trace("served"), PlayOptions(speed=10.0, drain=5.0))
            await reader.until(lambda items: any(isinstance(x, d.Synced) for x in items))
            tg.cancel_scope.cancel()
    assert result.unanswered == {}
    assert result.violations == 0
    assert [x.event.split(":", 1)[1] for x in reader.of(d.Synced)] == ["end:served"]  # the end marker's answer
    assert reader.of(d.Rejected) == [] and process.counters_for("served").rejected == 0  # the marker is no rejection
    assert not any(isinstance(x, d.Synced) for x in result.checker.decisions())  # nor part of the report


async def test_a_feed_reports_on_the_partitions_it_drives_only(kafka_settings: KafkaSettings) -> None:
    # Another resource manager's partition keeps deciding (rejections among them) while the feed plays.
    with anyio.fail_after(90):
        async with KafkaBus(kafka_settings) as bus, anyio.create_task_group() as tg:
            reader = Decisions(await bus.subscribe_ready(DECISIONS, group=bus.settings.prefix + "reader"))
            tg.start_soon(reader.pump)
            await tg.start(CoreProcess(kafka_settings, CoreOptions(group="mine", tick=0.1)).run)
            await bus.publish_many(FEED, [("other", e) for e in trace("other")])
            played = anyio.Event()

            def answered(event: str, items: list[d.DecisionMsg]) -> bool:
                return any(isinstance(x, d.Rejected) and x.event == event for x in items)

            async def other_partition_keeps_deciding() -> None:
                for i in itertools.count():
                    if played.is_set():
                        return
                    ghost = f.AskAdded(partition="other", id=f"x{i}", app="ghost", ask=f"x{i}", resource={"memory": 1})
                    await bus.publish(FEED, "other", ghost)
                    await reader.until(functools.partial(answered, ghost.id))

            tg.start_soon(other_partition_keeps_deciding)
            result = await play(kafka_settings, trace("served"), PlayOptions(speed=10.0, drain=5.0))
            played.set()
            tg.cancel_scope.cancel()
    assert any(isinstance(x, d.Rejected) and x.partition == "other" for x in reader.items)  # it did decide
    assert set(result.checker.parts) == {"served"}
    assert result.summary.rejected == 0 and result.violations == 0 and result.unanswered == {}
