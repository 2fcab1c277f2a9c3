"""A settled partition's ideal read off its figures (core.preemption.settled_ideal) and the composed
guarantees kept per config and capacity (core.preemption.view).

Whenever :func:`settled_ideal` answers, its answer is what Sniper's full computation gives on the snapshot
the report builds, key for key and in order: random trees (one to three levels, two or three resource
types, guarantees missing, zero or naming some resources only, maxes, priorities, fences on the root and
on parents, a capacity without some resource), usage mostly within the guarantees, nothing pending or
some. Nothing pending is not enough: a queue above its guarantee on one resource gets another ideal.
"""

from __future__ import annotations

from typing import Any

from hypothesis import event, given, reject, settings
from hypothesis import strategies as st

from sniper.core.config import ConfigError, PartitionConfig, parse_partition
from sniper.core.preemption.settled_ideal import settled_ideal
from sniper.core.preemption.view import composed_guarantees, computed_ideal, snapshot_from_figures
from sniper.core.resources import Resource
from tests.core_support import queue
from tests.preemption_support import preemption_raw

NAMES = ("memory", "vcore", "nvidia.com/gpu")


def computed(
    config: PartitionConfig,
    capacity: Resource,
    used: dict[str, Resource],
    pending: dict[str, Resource],
    *,
    avoid_ineffective: bool = False,
) -> dict[str, Resource]:
    snapshot = snapshot_from_figures(config, capacity, used, pending)
    return {q.path: q.ideal_assigned for q in computed_ideal(snapshot, avoid_ineffective=avoid_ineffective)}


@st.composite
def partitions(draw: st.DrawFn) -> tuple[PartitionConfig, Resource, dict[str, Resource], dict[str, Resource]]:
    names = NAMES[: draw(st.integers(2, 3))]
    # Mostly room for every guarantee; the last resource may be missing from the nodes.
    capacity = {n: draw(st.one_of(st.integers(0 if n == names[-1] else 1, 400), st.just(1000))) for n in names}
    used: dict[str, Resource] = {}
    pending: dict[str, Resource] = {}
    quiet = draw(st.booleans())  # nothing pending anywhere

    def resources(top: int, allowed: tuple[str, ...] = names) -> Resource:
        chosen = draw(st.lists(st.sampled_from(allowed), unique=True))
        return {n: draw(st.integers(0, top)) for n in chosen}

    def figures(path: str, guaranteed: Resource, children: list[str]) -> None:
        if draw(st.integers(0, 3)) and children:
            held: Resource = {}
            for c in children:
                for n, v in used.get(c, {}).items():
                    held[n] = held.get(n, 0) + v
        elif draw(st.integers(0, 3)):
            # Mostly within the guarantee (the settled case), on some of its resources.
            held = {n: draw(st.integers(0, v)) for n, v in guaranteed.items() if draw(st.integers(0, 3))}
        else:
            held = resources(250)
        if held:
            used[path] = held
        if not children and not quiet and not draw(st.integers(0, 3)):
            pending[path] = resources(60)

    def tree(path: str, depth: int, share: Resource) -> dict[str, Any]:
        # Guarantees within the parent's share mostly (the settled case), beyond it sometimes.
        kind = draw(st.sampled_from(["none", "empty", "named", "named", "named"]))
        top = {n: draw(st.sampled_from([share.get(n, 200), 200])) for n in names}
        guaranteed = (
            None
            if kind == "none"
            else {}
            if kind == "empty"
            else {
                n: draw(st.integers(0, top[n])) for n in draw(st.lists(st.sampled_from(names), unique=True, min_size=1))
            }
        )
        width = draw(st.integers(0, 3)) if depth < 2 else 0
        below = guaranteed or share
        kids = [tree(f"{path}.q{i}", depth + 1, {n: v // width for n, v in below.items()}) for i in range(width)]
        maximum = (
            {n: (guaranteed or {}).get(n, 0) + v for n, v in resources(300).items()} if draw(st.booleans()) else None
        )
        props: dict[str, Any] = {}
        if draw(st.booleans()):
            props["priority_offset"] = str(draw(st.integers(-1, 2)))
        if draw(st.booleans()) and kids:
            props["preemption_policy"] = "fence"
        figures(path, guaranteed or {}, [f"{path}.q{i}" for i in range(width)])
        return queue(path.rsplit(".", 1)[-1], *kids, guaranteed=guaranteed, maximum=maximum, **props)

    width = draw(st.integers(1, 3))
    tops = [tree(f"root.t{i}", 1, {n: v // width for n, v in capacity.items()}) for i in range(width)]
    raw = preemption_raw(*tops)
    if draw(st.booleans()):
        raw["queues"][0]["properties"] = {"preemption.policy": "fence"}
    root_used: Resource = {}
    for top in tops:
        for n, v in used.get(f"root.{top['name']}", {}).items():
            root_used[n] = root_used.get(n, 0) + v
    used["root"] = root_used
    try:
        config = parse_partition(raw)
    except ConfigError:
        reject()  # a max above the parent's or guarantees beyond the parent's: not a partition
    return config, capacity, used, pending


@settings(max_examples=400)
@given(partition=partitions(), avoid_ineffective=st.booleans())
def test_a_settled_ideal_is_the_computed_one_key_for_key(
    partition: tuple[PartitionConfig, Resource, dict[str, Resource], dict[str, Resource]], avoid_ineffective: bool
) -> None:
    config, capacity, used, pending = partition
    settled = settled_ideal(config, capacity, used, pending)
    event("settled" if settled is not None else "computed")
    if settled is not None:
        full = computed(config, capacity, used, pending, avoid_ineffective=avoid_ineffective)
        assert settled == full
        assert [list(r.items()) for r in settled.values()] == [list(r.items()) for r in full.values()]
        assert list(settled) == list(full)


GPU = "nvidia.com/gpu"
CAP = {"memory": 100, "vcore": 100, GPU: 8}


def two_leaves(a: Resource, b: Resource, **props: Any) -> PartitionConfig:
    return parse_partition(preemption_raw(queue("a", guaranteed=a, **props), queue("b", guaranteed=b)))


def test_queues_within_their_guarantees_with_nothing_pending_hold_their_ideal() -> None:
    config = two_leaves({"memory": 40, "vcore": 40, GPU: 4}, {"memory": 40, "vcore": 40, GPU: 4})
    used = {"root": {"memory": 50, "vcore": 30, GPU: 5}, "root.a": {"memory": 40, "vcore": 10, GPU: 4}}
    used["root.b"] = {"memory": 10, "vcore": 20, GPU: 1}
    settled = settled_ideal(config, CAP, used, {"root.a": {"memory": 0}})
    assert settled == {"root": CAP, "root.a": used["root.a"], "root.b": used["root.b"]}
    assert settled == computed(config, CAP, used, {})


def test_nothing_pending_is_not_settled_when_a_queue_holds_a_resource_beyond_its_guarantee() -> None:
    """root.a holds 2 GPUs its guarantee does not name, root.b one GPU above its 2: the full computation
    gives root.a no GPU at all, so the usage is not the ideal and the shortcut must not answer."""
    config = two_leaves({"memory": 10, "vcore": 10}, {"memory": 10, "vcore": 10, GPU: 2})
    used = {"root.a": {"memory": 5, "vcore": 5, GPU: 2}, "root.b": {"memory": 5, "vcore": 5, GPU: 3}}
    assert settled_ideal(config, CAP, used, {}) is None
    assert computed(config, CAP, used, {})["root.a"].get(GPU, 0) == 0


def test_pending_demand_on_a_resource_of_the_capacity_is_never_settled() -> None:
    config = two_leaves({"memory": 40, "vcore": 40}, {"memory": 40, "vcore": 40})
    used = {"root.a": {"memory": 10, "vcore": 10}}
    assert settled_ideal(config, CAP, used, {"root.b": {"vcore": 1}}) is None
    # Demand only for a resource no node has is left out of the snapshot: still settled.
    assert settled_ideal(config, CAP, used, {"root.b": {"pods": 3}}) == computed(
        config, CAP, used, {"root.b": {"pods": 3}}
    )


def test_a_fenced_parent_settles_its_children_within_what_it_holds() -> None:
    team = queue(
        "team",
        queue("x", guaranteed={"memory": 30, "vcore": 30}),
        queue("y", guaranteed={"memory": 30, "vcore": 30}),
        guaranteed={"memory": 60, "vcore": 60},
        preemption_policy="fence",
    )
    config = parse_partition(preemption_raw(team, queue("other", guaranteed={"memory": 40, "vcore": 40})))
    within = {"root.team": {"memory": 20, "vcore": 20}, "root.team.x": {"memory": 20, "vcore": 20}}
    assert settled_ideal(config, CAP, within, {}) == computed(config, CAP, within, {})
    # A child holding more than its fenced parent is not settled (its level's total is the parent's usage).
    beyond = {"root.team": {"memory": 10, "vcore": 10}, "root.team.x": {"memory": 20, "vcore": 20}}
    assert settled_ideal(config, CAP, beyond, {}) is None


def test_negative_usage_is_never_settled() -> None:
    config = two_leaves({"memory": 40, "vcore": 40}, {"memory": 40, "vcore": 40})
    assert settled_ideal(config, CAP, {"root.a": {"memory": -1}}, {}) is None


# --- composed guarantees kept per config and capacity -------------------------------------------------------


def test_guarantees_every_queue_names_are_kept_per_config_and_capacity() -> None:
    config = two_leaves({"memory": 40, "vcore": 40}, {"memory": 40, "vcore": 40})
    first = composed_guarantees(config, CAP, {"root.a": {"memory": 5}}, {})
    assert composed_guarantees(config, CAP, {"root.b": {"memory": 9}}, {"root.a": {"vcore": 3}}) is first
    larger = {**CAP, "memory": 200}
    assert composed_guarantees(config, larger, {}, {})["root"] == larger
    assert composed_guarantees(config, CAP, {}, {}) == first
    # An equal config parsed again composes the same figures.
    twin = two_leaves({"memory": 40, "vcore": 40}, {"memory": 40, "vcore": 40})
    assert composed_guarantees(twin, CAP, {}, {}) == first


def test_a_queue_naming_no_guarantee_keeps_sharing_by_demand() -> None:
    config = parse_partition(preemption_raw(queue("a", guaranteed={"memory": 40, "vcore": 40}), queue("free")))
    one = composed_guarantees(config, CAP, {"root.free": {"memory": 10}}, {})
    other = composed_guarantees(config, CAP, {"root.free": {"memory": 30}}, {"root.free": {"vcore": 5}})
    assert one["root.free"] == {"memory": 10}
    assert other["root.free"] == {"memory": 30, "vcore": 5}
