"""Long work in slices: a large partition's snapshot, restore, replay and replica reset give the event
loop back between slices, and what they build is what the work in one go builds."""

from __future__ import annotations

import anyio
import anyio.lowlevel

from sniper.actors.base import in_slices
from sniper.core.cache import state_changes
from sniper.core.recovery import (
    DurableCache,
    replay,
    replay_in_slices,
    restore,
    restore_in_slices,
    snapshot_in_slices,
    take_snapshot,
)
from sniper.core.replica import ViewReplica
from sniper.core.slicing import RECORDS, SLICE, Steps, run_whole
from sniper.messages import feed as f
from tests.core_support import fingerprint, partition_raw, queue

P = "big"
APPS = 3 * SLICE  # each app and its ask are two changes: several slices


def _feed() -> list[tuple[int, f.Feed]]:
    events: list[f.Feed] = [
        f.PartitionConfigEvent(partition=P, config=partition_raw(queue("a"), name=P)),
        f.NodeAdded(partition=P, node="n1", capacity={"memory": 2 * APPS}),
    ]
    for i in range(APPS):
        events.append(f.AppAdded(partition=P, id=f"app{i}", app=f"app{i}", queue="root.a", t=i))
        events.append(f.AskAdded(partition=P, id=f"ask{i}", app=f"app{i}", ask="k", resource={"memory": 1}, t=i))
    return list(enumerate(events))


def _owner() -> DurableCache:
    core = DurableCache(P)
    for offset, event in _feed():
        core.feed_offset = offset
        core.handle_event(event)
    core.drain()
    return core


def _slices(steps: Steps[object]) -> tuple[int, object]:
    """How many times ``steps`` gave the loop back, and what it returned."""
    count = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return count, done.value
        count += 1


def test_a_large_partition_is_snapshotted_restored_and_replayed_in_slices_alike() -> None:
    owner = _owner()
    slices, snapshot = _slices(snapshot_in_slices(owner, kafka_partition=3, wall_time=1.0))
    assert slices >= 2 * APPS // SLICE
    assert snapshot == take_snapshot(owner, kafka_partition=3, wall_time=1.0)

    slices, restored = _slices(restore_in_slices(take_snapshot(owner)))
    assert slices >= 2 * APPS // SLICE
    assert isinstance(restored, DurableCache)
    assert fingerprint(restored.state) == fingerprint(restore(take_snapshot(owner)).state) == fingerprint(owner.state)

    sliced, whole = DurableCache(P), DurableCache(P)
    slices, result = _slices(replay_in_slices(sliced, _feed(), []))
    assert slices >= len(_feed()) // RECORDS - 1
    assert result == replay(whole, _feed(), [])
    assert state_changes(sliced.state) == state_changes(whole.state) == state_changes(owner.state)


async def test_a_replica_reset_of_a_large_partition_lets_other_tasks_run_between_slices() -> None:
    owner = _owner()
    reset = owner.full_view()
    turns = 0
    applying = True

    async def another_task() -> None:
        nonlocal turns
        while applying:
            turns += 1
            await anyio.lowlevel.checkpoint()

    sliced = ViewReplica(P)
    async with anyio.create_task_group() as tg:
        tg.start_soon(another_task)
        await in_slices(sliced.reset_in_slices(reset))
        applying = False
    whole = ViewReplica(P)
    run_whole(whole.reset_in_slices(reset))
    assert turns >= len(reset.changes) // SLICE - 1  # a turn between every two slices
    assert sliced.view_seq == whole.view_seq == reset.seq and sliced.resets == 1
    assert state_changes(sliced.state) == state_changes(whole.state) == state_changes(owner.state)
