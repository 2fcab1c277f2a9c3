"""Snapshots that scale with the state: a body larger than one record is split into chunks, published
before its header on the same Kafka partition, and reassembled byte for byte; a header whose chunks are
not all there gives way to the newest whole snapshot before it."""

from __future__ import annotations

import dataclasses
import random
import string
from typing import Any

import anyio
import msgspec
import pytest

from sniper.cluster.logread import read_partition
from sniper.cluster.process import CoreProcess
from sniper.core.recovery import DurableCache, restore, take_snapshot
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages.codec import decision_msgpack
from sniper.messages.snapshot import Snapshot, SnapshotChunk, chunk_key, is_chunk_key, latest, snapshot_msgpack, split
from sniper.transport.bus import DECISIONS, FEED, SNAPSHOTS
from sniper.transport.kafka import KafkaBus, KafkaSettings
from tests.core_process_support import WAIT, Decisions, options, workload
from tests.core_support import fingerprint, partition_raw, queue

Record = tuple[bytes | None, bytes | None]


def _wide(nodes: int, seed: int = 5) -> list[f.Feed]:
    """Nodes with random labels: their compressed snapshot stays about as large as the labels."""
    rng = random.Random(seed)
    noise = string.ascii_letters + string.digits
    return [
        f.NodeAdded(
            partition="wide",
            id=f"n{i}",
            node=f"n{i}",
            capacity={"memory": 8, "vcore": 8, "gpu": 1},
            labels={f"l{j}": "".join(rng.choices(noise, k=200)) for j in range(8)},
        )
        for i in range(nodes)
    ]


def _core(nodes: int = 40) -> DurableCache:
    core = DurableCache("wide", epoch=1)
    core.handle_event(f.PartitionConfigEvent(partition="wide", config=partition_raw(queue("a"), name="wide")))
    for event in _wide(nodes):
        core.handle_event(event)
    core.handle_event(f.AppAdded(partition="wide", app="app", queue="root.a"))
    core.handle_event(f.AskAdded(partition="wide", app="app", ask="k", resource={"gpu": 1}, count=3))
    for node in ("n0", "n1", "n2"):
        core.allocate("app", "k", node)
    core.drain()
    return core


def _records(snapshot: Snapshot, limit: int) -> list[Record]:
    header, chunks = split(snapshot, limit)
    out: list[Record] = [
        (chunk_key(c.partition, c.serial, c.index).encode(), msgspec.msgpack.encode(c)) for c in chunks
    ]
    return [*out, (snapshot.partition.encode(), msgspec.msgpack.encode(header))]


def test_a_body_over_the_limit_splits_into_chunks_that_restore_the_same_state() -> None:
    core = _core()
    snapshot = msgspec.structs.replace(take_snapshot(core), serial=1)
    limit = len(snapshot.body) // 5 + 1
    header, chunks = split(snapshot, limit)
    assert header.chunks == len(chunks) == 5 and header.body == b""
    assert all(len(c.data) <= limit for c in chunks)
    found, problems = latest(_records(snapshot, limit), "wide")
    assert problems == [] and found == msgspec.structs.replace(snapshot, chunks=5)
    assert found is not None and fingerprint(restore(found).state) == fingerprint(core.state)


def test_a_body_within_the_limit_stays_in_its_header() -> None:
    snapshot = take_snapshot(_core(3))
    header, chunks = split(snapshot, len(snapshot.body))
    assert chunks == [] and header == snapshot


def test_a_header_missing_a_chunk_gives_way_to_the_whole_snapshot_before_it() -> None:
    core = _core()
    older = msgspec.structs.replace(take_snapshot(core), serial=1)
    core.handle_event(f.NodeRemoved(partition="wide", node="n39"))
    newer = msgspec.structs.replace(take_snapshot(core), serial=2)
    limit = len(older.body) // 3 + 1
    newest = _records(newer, limit)
    del newest[1]  # a chunk compaction lost, or never written
    found, problems = latest([*_records(older, limit), *newest], "wide")
    assert found is not None and found.serial == 1 and "n39" in restore(found).state.nodes
    assert len(problems) == 1 and "lacks 1 of its" in problems[0]


def test_chunks_of_an_unfinished_snapshot_leave_the_last_finished_one_whole() -> None:
    core = _core()
    finished = msgspec.structs.replace(take_snapshot(core), serial=4)
    limit = len(finished.body) // 3 + 1
    orphan = msgspec.structs.replace(finished, serial=5)  # its owner died before writing its header
    orphans = [r for r in _records(orphan, limit) if is_chunk_key((r[0] or b"").decode())]
    found, problems = latest([*_records(finished, limit), *orphans], "wide")
    assert found is not None and found.serial == 4 and problems == []


def test_records_of_other_partitions_and_garbage_are_told_apart() -> None:
    snapshot = take_snapshot(_core(3))
    other = msgspec.structs.replace(snapshot, partition="wide\x000")  # a name that looks like a chunk key
    stray = SnapshotChunk(partition="elsewhere", epoch=1, serial=0, index=0, data=b"x")
    records: list[Record] = [
        *_records(snapshot, 1 << 20),
        (b"wide\x000", msgspec.msgpack.encode(other)),
        (b"wide\x000\x000", msgspec.msgpack.encode(stray)),
        (b"wide", b"\xc1"),
    ]
    found, problems = latest(records, "wide")
    assert found == snapshot and len(problems) == 2  # the look-alike's header and the garbage


async def test_a_state_over_one_record_snapshots_in_chunks_and_a_successor_restores_it_identically(
    kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = dataclasses.replace(kafka_settings, max_message_bytes=8 << 10)
    events = [workload("wide", 0)[0], *_wide(60), *workload("wide", 2)[3:]]
    events = [msgspec.structs.replace(e, partition="wide") for e in events]
    with anyio.fail_after(WAIT):
        async with KafkaBus(settings) as bus, anyio.create_task_group() as tg:
            reader = Decisions(await bus.subscribe_ready(DECISIONS, group=bus.settings.prefix + "reader"))
            tg.start_soon(reader.pump)
            first = CoreProcess(settings, options(snapshot_interval=0.2))
            async with anyio.create_task_group() as first_group:
                first_group.start_soon(first.run)
                await first.ready.wait()
                await bus.publish_many(FEED, [(e.partition, e) for e in events])
                await reader.until(lambda _: len(reader.of(d.Allocated, "wide")) == 2)
                host = first.hosts["wide"]
                owner, dispose = host.core, host.runtime.dispose
                at_stop: list[dict[str, Any]] = []

                def fingerprint_then_dispose() -> None:  # the state as the final snapshot saw it
                    at_stop.append(fingerprint(owner.state))
                    dispose()

                monkeypatch.setattr(host.runtime, "dispose", fingerprint_then_dispose)
                first_group.cancel_scope.cancel()  # a clean stop publishes a final snapshot
            [expected] = at_stop
            second = CoreProcess(settings, options())
            await tg.start(second.run)
            restored = (await second.wait_hosting("wide")).core
            got = fingerprint(restored.state)  # before the stop empties it
            tg.cancel_scope.cancel()
    assert got == expected and sorted(restored.seen) == sorted(owner.seen)
    records = await read_partition(settings, SNAPSHOTS, bus.partition_for("wide"))
    headers = [snapshot_msgpack.decode(r.value or b"") for r in records if r.key == b"wide"]
    assert headers and all(h.chunks > 1 and h.body == b"" for h in headers)
    assert all(len(r.value or b"") <= settings.max_message_bytes for r in records)
    assert first.counters["wide"].snapshots_failed == 0


async def test_a_snapshot_says_where_the_decisions_after_it_start_so_a_restore_reads_only_those(
    kafka_settings: KafkaSettings,
) -> None:
    with anyio.fail_after(WAIT):
        async with KafkaBus(kafka_settings) as bus, anyio.create_task_group() as tg:
            reader = Decisions(await bus.subscribe_ready(DECISIONS, group=bus.settings.prefix + "reader"))
            tg.start_soon(reader.pump)
            first = CoreProcess(kafka_settings, options())
            async with anyio.create_task_group() as first_group:
                first_group.start_soon(first.run)
                await first.ready.wait()
                await bus.publish_many(FEED, [(e.partition, e) for e in workload("p1", 6)])
                await reader.until(lambda _: len(reader.of(d.Allocated)) == 6)
                first_group.cancel_scope.cancel()  # the final snapshot covers all six
            second = CoreProcess(kafka_settings, options())
            await tg.start(second.run)
            restored = await second.wait_hosting("p1")
            await bus.publish_many(FEED, [(e.partition, e) for e in workload("p1", 2, tag="b")[-2:]])
            await reader.until(lambda _: len(reader.of(d.Allocated)) == 8)
            tg.cancel_scope.cancel()
    kp = bus.partition_for("p1")
    logged = [
        (r.offset, decision_msgpack.decode(r.value or b""))
        for r in await read_partition(kafka_settings, DECISIONS, kp, key="p1")
    ]
    snapshots = [
        snapshot_msgpack.decode(r.value or b"") for r in await read_partition(kafka_settings, SNAPSHOTS, kp, key="p1")
    ]
    first_final = next(s for s in snapshots if s.epoch == 1 and s.decision_seq >= 6)
    assert first_final.decisions_offset > logged[0][0] and first_final.decisions_epoch == 1
    for snapshot in snapshots:  # no decision after a snapshot lies before the offset it names
        assert all(o >= snapshot.decisions_offset for o, x in logged if x.seq > snapshot.decision_seq)
    assert restored.core.epoch == 2 and restored.log_epoch == 2  # it published at its own epoch since
    assert [x.epoch for _, x in logged][-2:] == [2, 2]
