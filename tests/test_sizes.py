"""Sizes are data: a pending count of millions costs no more than the room its containers could take."""

from __future__ import annotations

from sniper.core.allocation import find_ask_candidates, try_allocate
from tests.core_support import Build, queue, state_of


def test_a_huge_count_lists_only_what_fits_in_the_free_room() -> None:
    build = (
        Build(node_capacity={"memory": 8192, "vcore": 8000}).app("a1", "root.a").ask("a1", "k", 2048, count=10_000_000)
    )
    state = state_of([queue("a", guaranteed={"memory": 4096})], build.changes)
    candidates = find_ask_candidates(state, 4096)
    assert len(candidates) == 4  # 8192 MiB of free room holds four 2048 MiB containers
    assert len(try_allocate(state, candidates).placed) == 4


def test_an_ask_that_fits_nowhere_is_still_tried_once() -> None:
    build = (
        Build(node_capacity={"memory": 1024, "vcore": 8000}).app("a1", "root.a").ask("a1", "k", 2048, count=10_000_000)
    )
    state = state_of([queue("a")], build.changes)
    candidates = find_ask_candidates(state, 4096)
    assert [c.key for c in candidates] == [("a1", "k")]
    assert try_allocate(state, candidates).failed == {("a1", "k")}


def test_other_asks_follow_a_capped_one_in_the_same_call() -> None:
    build = (
        Build(node_capacity={"memory": 8192, "vcore": 8000})
        .app("a1", "root.a")
        .ask("a1", "big", 4096, count=10_000_000)
        .ask("a1", "small", 1024, count=2)
    )
    state = state_of([queue("a")], build.changes)
    keys = [c.key[1] for c in find_ask_candidates(state, 4096)]
    assert keys.count("big") == 2 and keys.count("small") == 2
