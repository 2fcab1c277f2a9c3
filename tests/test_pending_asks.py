"""An app's pending asks stay in scheduling order (priority high first, then the oldest) through every change."""

from __future__ import annotations

import random

import pytest

from sniper.core.ask_order import AskOrder
from sniper.core.config import partition_to_raw
from sniper.core.state import PartitionState
from sniper.messages import protocol as p
from tests.core_support import config_of, queue


def _state() -> PartitionState:
    state = PartitionState("default")
    state.apply(p.ConfigSet(config=partition_to_raw(config_of(queue("a")))))
    state.apply(p.AppSet(app="app", queue="root.a", submit_seq=1))
    return state


def test_asks_arriving_out_of_age_order_and_leaving_at_random_keep_priority_then_age_order() -> None:
    rng = random.Random(7)
    state = _state()
    app = state.apps["app"]
    seqs = rng.sample(range(1, 10_000), 400)  # older asks keep arriving after newer ones
    alive: dict[str, tuple[int, int]] = {}
    for n, seq in enumerate(seqs):
        name = f"k{n}"
        priority = rng.choice((-1, 0, 0, 0, 3, 7))
        state.apply(p.AskSet(app="app", ask=name, resource={"memory": 1}, count=1, priority=priority, seq=seq))
        alive[name] = (-priority, seq)
        if alive and rng.random() < 0.4:
            gone = rng.choice(sorted(alive))
            state.apply(p.AskGone(app="app", ask=gone))
            del alive[gone]
        assert [a.name for a in app.pending_asks] == sorted(alive, key=alive.__getitem__)
        assert len(app.pending_asks) == len(alive)
    for name in sorted(alive):
        state.apply(p.AskGone(app="app", ask=name))
    assert not app.pending_asks
    assert list(app.pending_asks) == []


def test_a_filled_ask_leaves_the_list_and_is_no_longer_a_member() -> None:
    state = _state()
    state.apply(p.NodeSet(node="n1", capacity={"memory": 8}))
    state.apply(p.AskSet(app="app", ask="old", resource={"memory": 1}, count=1, seq=1))
    state.apply(p.AskSet(app="app", ask="new", resource={"memory": 1}, count=2, seq=2))
    app = state.apps["app"]
    old = app.asks["old"]
    state.apply(p.AllocationSet(allocation="x1", app="app", ask="old", node="n1", resource={"memory": 1}))
    assert old not in app.pending_asks
    assert app.asks["new"] in app.pending_asks
    assert [a.name for a in app.pending_asks] == ["new"]


class _CountedAsk:
    """Stands for an ask and counts how often its order is read."""

    reads = 0

    def __init__(self, name: str, priority: int, seq: int) -> None:
        self.name = name
        self._key = (-priority, seq)

    @property
    def sort_key(self) -> tuple[int, int]:
        _CountedAsk.reads += 1
        return self._key


@pytest.mark.parametrize("waiting", [10, 20_000])
def test_adding_the_newest_ask_reads_two_keys_and_removing_any_reads_logarithmically_many(waiting: int) -> None:
    pending: AskOrder[_CountedAsk] = AskOrder()
    asks = [_CountedAsk(f"k{i}", i % 3, i) for i in range(waiting)]
    for ask in asks:
        pending.add(ask)
    newest = [_CountedAsk(f"new{i}", 0, waiting + i) for i in range(100)]
    _CountedAsk.reads = 0
    for ask in newest:
        pending.add(ask)
    assert _CountedAsk.reads <= 2 * len(newest)
    removed = asks[waiting // 2 :][:100]
    size = len(pending)
    _CountedAsk.reads = 0
    for ask in removed:
        pending.discard(ask)
    assert _CountedAsk.reads <= len(removed) * (size.bit_length() + 2)
    assert len(pending) == waiting + len(newest) - len(removed)
    gone = {a.name for a in removed}
    remaining = sorted((a for a in asks + newest if a.name not in gone), key=lambda a: a._key)
    assert [a.name for a in pending] == [a.name for a in remaining]
