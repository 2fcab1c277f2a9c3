"""Spare room in Sniper's ideal assignment is counted resource by resource and is never negative: a queue
holding more memory and fewer cores than its guarantee offers its extra memory to its siblings and takes
nothing away from their room on cores (architecture: Vocabulary, "Ideal assignment"). The property tests
draw trees whose usage is above the guarantee on some resources and below it on others, at every level.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sniper.core.config import parse_partition
from sniper.core.preemption.view import ideal_of, snapshot_from_figures
from sniper.core.resources import Resource, add, clamp_min_zero, fits, sub, total
from tests.core_support import queue
from tests.preemption_support import preemption_raw

NAMES = ("memory", "vcore", "gpu")
CLUSTER: Resource = {"memory": 1000, "vcore": 100, "gpu": 16}


def r(memory: int, vcore: int, gpu: int = 0) -> Resource:
    return {"memory": memory, "vcore": vcore} | ({"gpu": gpu} if gpu else {})


def nonzero(resource: Resource) -> Resource:
    return {k: v for k, v in resource.items() if v}


def serving_tree() -> dict[str, Any]:
    """root.prod (capped at its guarantee) holds web (lowest priority), infer (highest), train and ops;
    root.batch holds the rest of the cluster above its guarantee."""
    return preemption_raw(
        queue(
            "prod",
            queue("web", guaranteed=r(200, 30), priority_offset="0"),
            queue("infer", guaranteed=r(150, 10, 4), priority_offset="10"),
            queue("train", guaranteed=r(150, 10, 8), priority_offset="5"),
            queue("ops", guaranteed=r(100, 20), priority_offset="0"),
            guaranteed=r(600, 70, 12),
            maximum=r(600, 70, 12),
        ),
        queue("batch", guaranteed=r(400, 30, 4)),
    )


def test_a_sibling_holding_more_memory_and_fewer_cores_than_guaranteed_keeps_its_parents_demand() -> None:
    """web holds 100 memory above and 20 cores below its guarantee; prod's increment has 20 cores, all its
    children ask for. web's shortfall on cores is no spare room but no negative room either: prod is not
    ineffective, and infer and train are owed their guarantees (web's extra memory goes to them)."""
    used = {
        "root.prod": r(300, 30),
        "root.prod.web": r(300, 10),
        "root.prod.ops": r(0, 20),
        "root.batch": r(700, 70, 16),
    }
    pending = {"root.prod.infer": r(200, 10, 4), "root.prod.train": r(200, 10, 8), "root.batch": r(100, 10)}
    smallest = {"root.prod.infer": r(20, 2, 1), "root.prod.train": r(50, 5, 4), "root.batch": r(10, 1)}
    snapshot = snapshot_from_figures(parse_partition(serving_tree()), CLUSTER, used, pending, smallest_ask=smallest)
    result = ideal_of(snapshot)
    assert not any(q.ineffective for q in result)
    assert nonzero(result["root.prod.infer"].ideal_assigned) == r(150, 10, 4)
    assert nonzero(result["root.prod.train"].ideal_assigned) == r(150, 10, 8)
    assert result["root.prod.web"].ideal_assigned["memory"] < 300  # its extra memory is spare
    assert result["root.prod.web"].ideal_assigned["vcore"] == 10  # its cores stay its own


@st.composite
def mixed_trees(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Resource], str, Resource, Resource]:
    """root -> prod (capped) -> {a, b, mid (capped) -> {c, d}}, root -> batch. Each leaf of prod holds its
    guarantee plus a drawn difference on every resource, negative or positive; one leaf (``needy``) asks
    for more; batch holds what is left of the cluster and asks for nothing."""
    leaves = ["a", "b", "c", "d"]
    shares = {leaf: draw(st.integers(1, 4)) for leaf in leaves}
    whole = sum(shares.values())
    prod_g = {n: CLUSTER[n] * 6 // 10 for n in NAMES}
    guarantee = {leaf: {n: prod_g[n] * shares[leaf] // whole for n in NAMES} for leaf in leaves}
    used: dict[str, Resource] = {}
    for leaf in leaves:
        used[leaf] = {
            n: max(0, g + draw(st.integers(-g, g // 2), label=f"{leaf}.{n}")) for n, g in guarantee[leaf].items()
        }
    needy = draw(st.sampled_from(leaves))
    ask = {n: draw(st.integers(1 if n != "gpu" else 0, max(1, guarantee[needy][n] // 3))) for n in NAMES}
    pending = {n: v * draw(st.integers(1, 4)) for n, v in ask.items()}
    mid_g = add(guarantee["c"], guarantee["d"])
    mid_max = {n: draw(st.integers(mid_g[n], prod_g[n])) for n in NAMES}
    prod_max = {n: draw(st.integers(prod_g[n], CLUSTER[n])) for n in NAMES}
    priorities = {leaf: str(draw(st.integers(0, 2))) for leaf in leaves}

    def leaf_queue(leaf: str) -> dict[str, Any]:
        return queue(leaf, guaranteed=guarantee[leaf], priority_offset=priorities[leaf])

    raw = preemption_raw(
        queue(
            "prod",
            leaf_queue("a"),
            leaf_queue("b"),
            queue("mid", leaf_queue("c"), leaf_queue("d"), guaranteed=mid_g, maximum=mid_max),
            guaranteed=prod_g,
            maximum=prod_max,
        ),
        queue("batch", guaranteed={n: CLUSTER[n] - prod_g[n] for n in NAMES}),
    )
    paths = {"a": "root.prod.a", "b": "root.prod.b", "c": "root.prod.mid.c", "d": "root.prod.mid.d"}
    by_path = {paths[leaf]: used[leaf] for leaf in leaves}
    by_path["root.prod.mid"] = add(used["c"], used["d"])
    by_path["root.prod"] = total(used.values())
    by_path["root.batch"] = clamp_min_zero(sub(CLUSTER, by_path["root.prod"]))
    return raw, by_path, paths[needy], ask, pending


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mixed_trees())
def test_a_queue_whose_increment_starts_an_ask_is_never_ineffective_whatever_its_siblings_lack(
    case: tuple[dict[str, Any], dict[str, Resource], str, Resource, Resource],
) -> None:
    """Along the path to the one leaf that asks, a queue whose increment over its usage (in the assignment
    that drops nothing) already starts the ask is never dropped as ineffective: what its siblings hold
    below their guarantees on some resource never counts against it."""
    raw, used, needy, ask, pending = case
    snapshot = snapshot_from_figures(parse_partition(raw), CLUSTER, used, {needy: pending}, smallest_ask={needy: ask})
    plain = ideal_of(snapshot, avoid_ineffective=False)
    avoiding = ideal_of(snapshot)
    parts = needy.split(".")
    for depth in range(2, len(parts) + 1):
        path = ".".join(parts[:depth])
        increment = clamp_min_zero(sub(plain[path].ideal_assigned, used.get(path, {})))
        if not fits(ask, increment):
            break  # from here on the assignments may differ: the property holds down to this queue
        assert not avoiding[path].ineffective, path
        assert avoiding[path].ideal_assigned == plain[path].ideal_assigned, path


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mixed_trees())
def test_mixed_sign_usage_keeps_every_ideal_within_demand_and_within_its_parent(
    case: tuple[dict[str, Any], dict[str, Resource], str, Resource, Resource],
) -> None:
    """Whatever the signs of usage minus guarantee: no ideal exceeds used + pending on any resource, and the
    children of a queue are never owed more than it is, resource by resource."""
    raw, used, needy, ask, pending = case
    snapshot = snapshot_from_figures(parse_partition(raw), CLUSTER, used, {needy: pending}, smallest_ask={needy: ask})
    result = ideal_of(snapshot)
    for q in snapshot.queues:
        ideal = result[q.path].ideal_assigned
        if q.parent is not None:
            assert fits(ideal, add(q.used, result[q.path].pending)), q.path
        if q.children:
            assert fits(total(result[c].ideal_assigned for c in q.children), ideal), q.path
