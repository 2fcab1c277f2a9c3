"""User, group and application limits (YuniKorn ``limits`` and ``maxapplications``): config, allocation,
waiting apps, the cache's re-validation, intra-queue preemption for users above their limit, and a
property: random users and limits never take a user over its ``maxresources`` or a queue over its
``maxapplications`` through a new allocation, and the core and the independent model agree on the demand
the limits let run (asks a limit holds back are no demand for the ideal).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sniper.core import resources as res
from sniper.core.cache import state_changes
from sniper.core.config import ConfigError, LimitConfig, parse_partition, partition_to_raw
from sniper.core.limits import Limits, pending_demand, tracked_group
from sniper.core.preemption.policies import make_policy
from sniper.core.preemption.quotas import compute_quotas
from sniper.core.preemption.view import ideal_of, snapshot_from_state
from sniper.core.state import PartitionState
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.simulator.run import SimulationSettings, run_simulation
from sniper.simulator.scenarios import scenario
from tests.core_support import Harness, invariant_problems, partition_raw, queue
from tests.preemption_support import PreemptHarness, preemption_raw


def limited(
    name: str, *children: dict[str, Any], limits: list[dict[str, Any]] | None = None, **kw: Any
) -> dict[str, Any]:
    """A raw queue with ``limits`` and, through ``kw``, ``maxapplications`` or resources."""
    max_apps = kw.pop("maxapplications", None)
    q = queue(name, *children, **kw)
    if limits is not None:
        q["limits"] = limits
    if max_apps is not None:
        q["maxapplications"] = max_apps
    return q


def harness(*leaves: dict[str, Any], nodes: int = 1, memory: int = 100) -> Harness:
    h = Harness(parse_partition(partition_raw(*leaves)))
    h.feed(*(f.NodeAdded(node=f"n{i}", capacity={"memory": memory}) for i in range(nodes)))
    return h


def job(
    h: Harness,
    app: str,
    user: str,
    count: int,
    size: int = 10,
    *,
    queue_path: str = "root.a",
    groups: tuple[str, ...] = (),
) -> None:
    h.feed(
        f.AppAdded(app=app, queue=queue_path, user=user, groups=list(groups)),
        f.AskAdded(app=app, ask="t", resource={"memory": size}, count=count),
    )


def held_by_user(state: PartitionState) -> Counter[str]:
    out: Counter[str] = Counter()
    for alloc in state.allocations.values():
        out[state.apps[alloc.app].user] += alloc.resource.get("memory", 0)
    return out


def running_apps(state: PartitionState) -> set[str]:
    return {a.name for a in state.apps.values() if a.allocations}


# ---------------------------------------------------------------------- config


def test_every_limit_shape_parses_and_round_trips() -> None:
    raw = partition_raw(
        limited(
            "p",
            limited(
                "a",
                limits=[
                    {"limit": "sue", "users": ["sue"], "maxresources": {"memory": "40Mi"}, "maxapplications": 2},
                    {"limit": "devs", "groups": ["dev", "ops"], "maxresources": {"memory": "60Mi"}},
                    {"limit": "both", "users": ["bob"], "groups": ["qa"], "maxapplications": 1},
                    {"users": ["ann"], "maxapplications": 3},
                    {"limit": "each user", "users": ["*"], "maxresources": {"memory": "30Mi", "vcore": 2}},
                ],
                maxapplications=4,
            ),
            maxapplications=5,
        )
    )
    config = parse_partition(raw)
    assert config.warnings == ()  # limits and maxapplications are implemented: no warning
    leaf = config.leaf("root.p.a")
    assert leaf is not None and leaf.max_applications == 4
    assert leaf.limits[0] == LimitConfig("sue", ("sue",), (), {"memory": 40}, 2)
    assert leaf.limits[1] == LimitConfig("devs", (), ("dev", "ops"), {"memory": 60}, None)
    assert leaf.limits[2] == LimitConfig("both", ("bob",), ("qa",), None, 1)
    assert leaf.limits[4] == LimitConfig("each user", ("*",), (), {"memory": 30, "vcore": 2000}, None)
    assert [q.max_applications for q in config.queues()] == [None, 5, 4]
    again = parse_partition(partition_to_raw(config))
    assert again.root == config.root  # the replicas' ConfigSet carries the limits


@pytest.mark.parametrize(
    ("limits", "extra", "message"),
    [
        ([{"maxapplications": 1}], {}, r"queue root\.a\.limits\[0\]: a limit names the users or groups it covers"),
        ([{"users": ["u"]}], {}, r"queue root\.a\.limits\[0\]: a limit sets maxresources, maxapplications or both"),
        (
            [{"users": ["u"], "maxapplications": 0}],
            {},
            r"queue root\.a\.limits\[0\]\.maxapplications: expected `int` >= 1",
        ),
        (
            [{"users": ["u"], "maxapps": 1}],
            {},
            r"queue root\.a\.limits\[0\]: unknown key 'maxapps' \(did you mean 'maxapplications'\?\)",
        ),
        (
            [{"users": [""], "maxapplications": 1}],
            {},
            r"queue root\.a\.limits\[0\]\.users\[0\]: expected `str` of length >= 1",
        ),
        ([{"users": "u", "maxapplications": 1}], {}, r"queue root\.a\.limits\[0\]\.users: expected `array`"),
        ([{"users": ["*", "u"], "maxapplications": 1}], {}, r"limits\[0\]\.users: the wildcard '\*' stands alone"),
        ([{"users": ["u", "u"], "maxapplications": 1}], {}, r"limits\[0\]\.users: a name is listed twice"),
        (
            [{"users": ["u"], "maxapplications": 1}, {"users": ["u"], "maxapplications": 2}],
            {},
            r"queue root\.a\.limits\[1\]\.users: 'u' is already covered by an earlier limit",
        ),
        (
            [{"groups": ["*"], "maxapplications": 1}, {"groups": ["g"], "maxapplications": 1}],
            {},
            r"queue root\.a\.limits\[1\]: the wildcard groups limit must be the last groups limit",
        ),
        (
            [{"users": ["u"], "maxresources": {"memory": "2Gi"}}],
            {"maximum": {"memory": 1024}},
            r"queue root\.a\.limits\[0\]: maxresources memory 2 GiB exceeds the queue's max memory 1 GiB",
        ),
        (
            [{"users": ["u"], "maxresources": {"memory": "lots"}}],
            {},
            r"queue root\.a\.limits\[0\]\.maxresources",
        ),
        (
            [{"users": ["u"], "maxapplications": 5}],
            {"maxapplications": 2},
            r"queue root\.a\.limits\[0\]: maxapplications 5 exceeds the queue's maxapplications 2",
        ),
    ],
)
def test_bad_limits_are_errors_naming_the_path(
    limits: list[dict[str, Any]], extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_partition(partition_raw(limited("a", limits=limits, **extra)))


def test_a_child_may_not_run_more_apps_than_its_parent() -> None:
    raw = partition_raw(limited("p", limited("a", maxapplications=3), maxapplications=2))
    with pytest.raises(
        ConfigError, match=r"queue root\.p\.a: maxapplications 3 exceeds parent root\.p's maxapplications 2"
    ):
        parse_partition(raw)


# ---------------------------------------------------------------------- allocation


def test_a_user_at_its_maxresources_gets_nothing_more_and_other_users_go_on() -> None:
    h = harness(limited("a", limits=[{"users": ["*"], "maxresources": {"memory": "40Mi"}}]), nodes=2)
    job(h, "heavy", "hank", 20)
    job(h, "light", "lou", 3)
    h.settle()
    state = h.cache.state
    assert held_by_user(state) == {"hank": 40, "lou": 30}  # each user separately: hank stops at 40
    assert state.apps["heavy"].asks["t"].pending == 16  # waits, not rejected
    assert not any(isinstance(x, d.Rejected) for x in h.decisions)
    job(h, "heavy2", "hank", 1)  # another app of the same user shares the user's limit
    h.settle()
    assert not state.apps["heavy2"].allocations
    h.feed(f.AllocationReleased(allocation=sorted(state.apps["heavy"].allocations)[0]))
    h.settle()
    assert held_by_user(state)["hank"] == 40  # room under the limit freed: hank's asks go on
    assert h.model.violations == [] and invariant_problems(state) == []


def test_a_named_user_limit_wins_over_the_wildcard() -> None:
    h = harness(
        limited(
            "a",
            limits=[
                {"users": ["vip"], "maxresources": {"memory": "70Mi"}},
                {"users": ["*"], "maxresources": {"memory": "20Mi"}},
            ],
        ),
        nodes=2,
    )
    job(h, "v", "vip", 10)
    job(h, "o", "other", 10)
    h.settle()
    assert held_by_user(h.cache.state) == {"vip": 70, "other": 20}


def test_a_parents_limit_covers_its_whole_subtree() -> None:
    h = harness(
        limited(
            "p",
            queue("a"),
            queue("b"),
            limits=[{"users": ["ann"], "maxresources": {"memory": "50Mi"}}],
        ),
        nodes=2,
    )
    job(h, "a1", "ann", 4, queue_path="root.p.a")
    job(h, "b1", "ann", 4, queue_path="root.p.b")
    job(h, "b2", "bob", 4, queue_path="root.p.b")
    h.settle()
    held = held_by_user(h.cache.state)
    assert held["ann"] == 50 and held["bob"] == 40


def test_group_limits_count_the_group_as_a_whole_against_its_first_limited_group() -> None:
    h = harness(
        limited("a", limits=[{"groups": ["eng"], "maxresources": {"memory": "50Mi"}}]),
        nodes=2,
    )
    job(h, "x", "xia", 4, groups=("staff", "eng"))
    job(h, "y", "yan", 4, groups=("eng",))
    job(h, "z", "zed", 4, groups=("staff",))  # no limited group: not tracked
    h.settle()
    state = h.cache.state
    assert tracked_group(state.apps["x"]) == "eng" and tracked_group(state.apps["z"]) is None
    held = held_by_user(state)
    assert held["xia"] + held["yan"] == 50 and held["zed"] == 40


def test_a_wildcard_group_limit_covers_each_group_separately() -> None:
    h = harness(
        limited(
            "a",
            limits=[
                {"groups": ["ops"], "maxresources": {"memory": "10Mi"}},
                {"groups": ["*"], "maxresources": {"memory": "30Mi"}},
            ],
        ),
        nodes=2,
    )
    job(h, "x", "xia", 5, groups=("g1",))
    job(h, "y", "yan", 5, groups=("g2",))
    job(h, "o", "oz", 5, groups=("ops", "g1"))
    h.settle()
    held = held_by_user(h.cache.state)
    assert held == {"xia": 30, "yan": 30, "oz": 10}


# ---------------------------------------------------------------------- waiting apps


def test_apps_over_maxapplications_wait_and_start_in_submission_order() -> None:
    h = harness(limited("a", maxapplications=2), nodes=2)
    for n in range(5):
        job(h, f"app{n}", f"u{n}", 2)
    h.settle()
    state = h.cache.state
    assert running_apps(state) == {"app0", "app1"}
    assert not any(isinstance(x, d.Rejected) for x in h.decisions)
    started: list[str] = ["app0", "app1"]
    for done in ["app1", "app0", "app2"]:
        h.feed(f.AppRemoved(app=done))
        h.settle()
        new = sorted(running_apps(state) - set(started))
        assert len(new) == 1
        started += new
        assert len(running_apps(state)) <= 2
    assert started == ["app0", "app1", "app2", "app3", "app4"]  # FIFO among waiting apps


def test_a_users_maxapplications_lets_its_next_app_start_when_one_ends() -> None:
    h = harness(limited("a", limits=[{"users": ["*"], "maxapplications": 1}]), nodes=2)
    job(h, "h1", "hank", 1)
    job(h, "h2", "hank", 1)
    job(h, "h3", "hank", 1)
    job(h, "l1", "lou", 1)
    h.settle()
    state = h.cache.state
    assert running_apps(state) == {"h1", "l1"}  # one app per user; lou does not wait behind hank
    h.feed(f.AppRemoved(app="h1"))
    h.settle()
    assert running_apps(state) == {"h2", "l1"}
    assert h.model.violations == []


def test_an_app_that_holds_nothing_waits_again_in_submission_order() -> None:
    """An app runs while it holds something; one that released everything and asks again queues among
    the waiting apps by its submission, like a new app (here it was submitted first, so it goes first)."""
    h = harness(limited("a", maxapplications=1), nodes=1)
    job(h, "first", "u", 1)
    job(h, "second", "u", 1)
    h.settle()
    state = h.cache.state
    assert running_apps(state) == {"first"}
    (only,) = state.apps["first"].allocations
    h.feed(f.AllocationReleased(allocation=only))
    view = Limits(state)
    assert view.refusal(state.apps["second"].asks["t"]) is None  # the slot is free: second may start
    h.feed(f.AskAdded(app="first", ask="again", resource={"memory": 10}))
    view = Limits(state)
    refusal = view.refusal(state.apps["second"].asks["t"])
    assert refusal is not None and "1 app(s) submitted earlier wait before it" in refusal
    h.settle()
    assert running_apps(state) == {"first"}


# ---------------------------------------------------------------------- the cache re-validates


def test_the_cache_rejects_a_stale_proposal_that_would_take_a_user_over_its_limit() -> None:
    h = harness(limited("a", limits=[{"users": ["*"], "maxresources": {"memory": "30Mi"}}]), nodes=2)
    job(h, "x", "ann", 5)
    proposal = h.propose()
    assert proposal is not None and len(proposal.placements) == 3
    # Meanwhile the cache gave ann room elsewhere (another allocator's proposal, say).
    job(h, "y", "ann", 1)
    h.cache.allocate("y", "t", "n1")
    h.pump()
    outcome = h.deliver()
    assert outcome.accepted == 2
    (why,) = outcome.rejected.values()
    assert "user 'ann' in root.a would exceed its maxresources memory 30 MiB" in why
    assert held_by_user(h.cache.state)["ann"] == 30


def test_the_cache_counts_what_one_proposal_already_placed() -> None:
    h = harness(
        limited("a", maxapplications=1, limits=[{"users": ["ann"], "maxresources": {"memory": "20Mi"}}]), nodes=1
    )
    job(h, "x", "ann", 5)
    job(h, "y", "bob", 5)
    proposal = p.AllocationProposal(
        id="t/1",
        view_seq=h.cache.view_seq,
        placements=[p.Placement(app=a, ask="t", node="n0") for a in ["x", "x", "x", "y"]],
    )
    h.cache.handle_proposal(proposal)
    h.pump()
    outcome = h.outcomes["t/1"]
    assert outcome.accepted == 2
    reasons = sorted(outcome.rejected.values())
    assert "maxresources" in reasons[1] and "app waits: queue root.a runs 0 of its maxapplications 1" in reasons[0]


def test_the_view_is_skipped_when_no_limit_is_configured() -> None:
    h = harness(queue("a"))
    assert Limits.of(h.cache.state) is None


# ---------------------------------------------------------------------- intra-queue preemption


def _over_limit(h: PreemptHarness, limit: int = 40, lou: int | None = None) -> list[str]:
    """hank fills n1 before limits exist; then the config gives every user ``limit`` (lou ``lou``)."""
    named = [] if lou is None else [{"users": ["lou"], "maxresources": {"memory": f"{lou}Mi"}}]
    h.feed(f.AppAdded(app="hank-app", queue="root.a", user="hank"))
    hank = h.fill("hank-app", "root.a", "n1", [20, 20, 20, 20, 20])
    raw = preemption_raw(
        limited(
            "a", guaranteed={"memory": 100}, limits=[*named, {"users": ["*"], "maxresources": {"memory": f"{limit}Mi"}}]
        ),
        queue("b", guaranteed={"memory": 100}),
        intra_queue=True,
        policy="none",
    )
    h.feed(f.PartitionConfigEvent(config=raw))
    return hank


def test_intra_queue_takes_from_a_user_above_its_limit_for_a_user_within_it() -> None:
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 100}), queue("b", guaranteed={"memory": 100}), intra_queue=True, policy="none"
    )
    h = PreemptHarness(raw, policy="intra_queue")
    h.nodes("n1")
    hank = _over_limit(h)
    h.feed(
        f.AppAdded(app="lou-app", queue="root.a", user="lou"),
        f.AskAdded(app="lou-app", ask="t", resource={"memory": 20}, count=3),
    )
    h.starve()
    result = h.preempt_round(10.0)
    assert isinstance(result.request, p.PlacementRequest) and result.request.beneficiaries == ["root.a"]
    victims = [v for pl in result.placements for v in pl.victims]
    assert victims and set(victims) <= set(hank)
    # hank holds 100 against a limit of 40: at most 60 (3 containers) may go, and lou takes at most 40.
    assert len(victims) <= 2
    assert all("user 'hank' above its limit" in x.reason for x in result.preempts())
    assert h.model.violations == []


@pytest.mark.parametrize(("limit", "placed"), [(40, True), (70, False)])
def test_a_user_above_its_limit_gives_no_more_than_takes_it_back_to_the_limit(limit: int, placed: bool) -> None:
    """lou needs 60 (three of hank's 20s): hank at 100 against 40 may give them (60, 40, 20 over before
    each); against 70 only two (30, 10 over), which frees too little, so nothing is taken."""
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 100}), queue("b", guaranteed={"memory": 100}), intra_queue=True, policy="none"
    )
    h = PreemptHarness(raw, policy="intra_queue")
    h.nodes("n1")
    _over_limit(h, limit, lou=100)
    h.feed(
        f.AppAdded(app="lou-app", queue="root.a", user="lou"),
        f.AskAdded(app="lou-app", ask="t", resource={"memory": 60}),
    )
    h.starve()
    result = h.preempt_round(10.0)
    assert [len(pl.victims) for pl in result.placements] == ([3] if placed else [])
    assert h.model.violations == []


def test_intra_queue_never_takes_from_a_user_within_its_limit() -> None:
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 100}), queue("b", guaranteed={"memory": 100}), intra_queue=True, policy="none"
    )
    h = PreemptHarness(raw, policy="intra_queue")
    h.nodes("n1")
    _over_limit(h)
    # hank is above its limit and asks for more: lou (within) is never a victim for hank.
    h.feed(f.AppAdded(app="lou-app", queue="root.a", user="lou"))
    h.feed(f.AskAdded(app="hank-app", ask="more", resource={"memory": 20}, count=2))
    h.starve()
    result = h.preempt_round(10.0)
    assert result.placements == [] and h.preempts() == []


def test_the_cache_refuses_an_intra_queue_victim_of_a_user_within_its_limit() -> None:
    raw = preemption_raw(
        limited("a", guaranteed={"memory": 100}, limits=[{"users": ["*"], "maxresources": {"memory": "60Mi"}}]),
        queue("b", guaranteed={"memory": 100}),
        intra_queue=True,
        policy="none",
    )
    h = PreemptHarness(raw, policy="intra_queue")
    h.nodes("n1")
    h.feed(f.AppAdded(app="ann-app", queue="root.a", user="ann"), f.AppAdded(app="bob-app", queue="root.a", user="bob"))
    ann = [h.run("ann-app", 20, "n1", at=float(i)) for i in range(3)]
    h.run("bob-app", 20, "n1", at=4.0)
    h.run("bob-app", 20, "n1", at=5.0)
    h.ask("bob-app", "more", 20)
    proposal = p.PreemptionProposal(
        id="x/1",
        view_seq=h.cache.view_seq,
        policy="intra_queue",
        placements=[p.Victimized(app="bob-app", ask="more", node="n1", victims=[ann[0]], cost=0.0, reason="test")],
    )
    outcome, _ = h.commit(proposal)
    assert outcome.accepted == 0
    (why,) = outcome.rejected.values()
    assert "nor of another user above its limit" in why


# ---------------------------------------------------------------------- property


LIMIT_MEMORY = st.sampled_from([10, 20, 30, 50])
USERS = ["u0", "u1", "u2", "u3"]


@st.composite
def limit_configs(draw: st.DrawFn) -> dict[str, Any]:
    entries: list[dict[str, Any]] = []
    leaf_apps = draw(st.none() | st.integers(1, 3))
    named = draw(st.lists(st.sampled_from(USERS), unique=True, max_size=2))
    for user in named:
        entries.append({"users": [user], "maxresources": {"memory": f"{draw(LIMIT_MEMORY)}Mi"}})
    if draw(st.booleans()):
        entry: dict[str, Any] = {"users": ["*"], "maxresources": {"memory": f"{draw(LIMIT_MEMORY)}Mi"}}
        if draw(st.booleans()):
            entry["maxapplications"] = draw(st.integers(1, min(2, leaf_apps or 2)))
        entries.append(entry)
    if draw(st.booleans()):
        entries.append({"groups": ["g0"], "maxresources": {"memory": f"{draw(LIMIT_MEMORY)}Mi"}})
    parent_limits = [{"users": ["*"], "maxresources": {"memory": f"{draw(st.sampled_from([40, 60, 100]))}Mi"}}]
    return partition_raw(
        limited(
            "p",
            limited("a", limits=entries or None, maxapplications=leaf_apps),
            limited("b"),
            limits=parent_limits if draw(st.booleans()) else None,
            maxapplications=draw(st.none() | st.integers(3, 4)),
        )
    )


op = st.one_of(
    st.tuples(
        st.just("job"),
        st.sampled_from(USERS),
        st.sampled_from(["root.p.a", "root.p.b"]),
        st.integers(1, 4),
        st.sampled_from([5, 10, 20]),
        st.booleans(),
    ),
    st.tuples(st.just("cycle"), st.booleans()),
    st.tuples(st.just("release"), st.integers(0, 50)),
    st.tuples(st.just("end"), st.integers(0, 50)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=limit_configs(), script=st.lists(op, min_size=5, max_size=40))
def test_no_new_allocation_takes_a_user_over_its_limit_or_a_queue_over_maxapplications(
    raw: dict[str, Any], script: list[tuple[Any, ...]]
) -> None:
    config = parse_partition(raw)
    h = Harness(config)
    h.feed(*(f.NodeAdded(node=f"n{i}", capacity={"memory": 80}) for i in range(3)))
    apps = 0
    for step in script:
        kind = step[0]
        if kind == "job":
            _, user, path, count, size, grouped = step
            apps += 1
            job(h, f"j{apps}", user, count, size, queue_path=path, groups=("g0",) if grouped else ())
        elif kind == "cycle":
            h.propose()
            if step[1]:
                while h.in_flight:
                    h.deliver()
        elif kind == "release":
            live = sorted(h.cache.state.allocations)
            if live:
                h.feed(f.AllocationReleased(allocation=live[step[1] % len(live)]))
        else:
            names = sorted(h.cache.state.apps)
            if names:
                h.feed(f.AppRemoved(app=names[step[1] % len(names)]))
        _check_limits(h.cache.state)
    h.settle()
    _check_limits(h.cache.state)
    assert invariant_problems(h.cache.state) == [] and h.model.violations == []
    # The demand the limits let run: the core's rule and the independent model's agree.
    core = {path: r for path, r in pending_demand(h.cache.state).items() if res.any_positive(r)}
    model = {path: r for path, r in h.model.queue_demand().items() if res.any_positive(r)}
    assert core == model


def _check_limits(state: PartitionState) -> None:
    """Every bound of every app holds on the committed state (no config change here, so no user is
    ever above a limit: anything over came from a new allocation)."""
    view = Limits(state)
    for app in state.apps.values():
        for b in view.bounds(app):
            if b.max_resources is not None:
                used = view.used.get(b.scope, {})
                assert all(used.get(k, 0) <= v for k, v in b.max_resources.items()), (b, used)
            if b.max_applications is not None:
                assert view.running.get(b.scope, 0) <= b.max_applications, (b, view.running)


# ---------------------------------------------------------------------- the bundled scenario


def test_the_user_limits_scenario_keeps_every_user_within_its_limits() -> None:
    """Through the real actors: no user above a quarter of root.shared's guarantee, no user with more
    than two apps running, light users started, and no invariant violated."""
    sc = scenario("user_limits")
    result = run_simulation(sc.events, sc.config, SimulationSettings(until=150, policy="sniper"))
    assert result.violations == 0
    users = {e.app: e.user for e in sc.events if isinstance(e, f.AppAdded)}
    (limit,) = sc.config.partition("default").root.children[0].limits
    assert limit.max_resources is not None
    cap = limit.max_resources["memory"]
    held: Counter[str] = Counter()
    live: dict[str, tuple[str, str, int]] = {}
    for x in result.decisions:
        if isinstance(x, d.Allocated):
            live[x.allocation] = (users[x.app], x.app, x.resource["memory"])
            held[users[x.app]] += x.resource["memory"]
            if x.queue == "root.shared":
                assert held[users[x.app]] <= cap, (x.app, held)
                apps = {app for user, app, _ in live.values() if user == users[x.app]}
                assert len(apps) <= 2, apps
        elif isinstance(x, d.Released | d.Kill | d.AllocationLost) and x.allocation in live:
            user, _, memory = live.pop(x.allocation)
            held[user] -= memory
    started = {users[x.app] for x in result.decisions if isinstance(x, d.Allocated)}
    assert {"hank", "lou", "liz", "leo"} <= started


def test_an_apps_groups_survive_a_replica_reset() -> None:
    h = harness(limited("a", limits=[{"groups": ["eng"], "maxapplications": 1}]))
    job(h, "x", "xia", 1, groups=("staff", "eng"))
    copy = PartitionState("default")
    copy.apply_all(state_changes(h.cache.state))
    assert copy.apps["x"].groups == ("staff", "eng") and tracked_group(copy.apps["x"]) == "eng"


# ---------------------------------------------------------------------- demand the limits let run


def _held_back(raw_limit: dict[str, Any]) -> PreemptHarness:
    """root.a (guarantee 50) under ``raw_limit``; root.b (guarantee 50) holds all of n1 (100)."""
    raw = preemption_raw(
        limited("a", guaranteed={"memory": 50}, limits=[raw_limit]), queue("b", guaranteed={"memory": 50})
    )
    h = PreemptHarness(raw)
    h.nodes("n1")
    h.fill("b-app", "root.b", "n1", [10] * 10)
    return h


def test_asks_a_limit_holds_back_are_no_demand_for_the_ideal() -> None:
    """ann may hold 20 and run one app: of x's 50 pending only 20 is demand, y (waiting on the user's
    maxapplications) none. The ideal, the quotas and the independent model all see 20, not 80."""
    h = _held_back({"users": ["*"], "maxresources": {"memory": "20Mi"}, "maxapplications": 1})
    for app, count in (("x", 5), ("y", 3)):
        h.feed(
            f.AppAdded(app=app, queue="root.a", user="ann"),
            f.AskAdded(app=app, ask="t", resource={"memory": 10}, count=count),
        )
    state = h.cache.state
    assert state.queues["root.a"].pending == {"memory": 80}
    demand = pending_demand(state)
    assert demand["root.a"] == demand["root"] == {"memory": 20}
    assert h.model.queue_pending()["root.a"] == {"memory": 80}
    assert h.model.queue_demand()["root.a"] == {"memory": 20}  # the outside observer, on its own
    ideal = {q.path: q.ideal_assigned for q in ideal_of(snapshot_from_state(state))}
    assert ideal["root.a"]["memory"] == 20
    assert state.config is not None
    quotas = compute_quotas(state, state.config.preemption)
    assert quotas.beneficiaries == ("root.a",)
    assert quotas.may_lose["root.b"] == {"memory": 20}  # not the 50 a's guarantee would ask for


def test_a_queue_whose_users_are_at_their_limits_is_no_beneficiary() -> None:
    h = _held_back({"users": ["*"], "maxresources": {"memory": "20Mi"}})
    h.nodes("n2")
    h.feed(f.AppAdded(app="x", queue="root.a", user="ann"))
    h.run("x", 20, "n2")
    h.feed(f.AskAdded(app="x", ask="t", resource={"memory": 10}, count=5))
    state = h.cache.state
    assert state.config is not None
    assert state.queues["root.a"].pending == {"memory": 50}
    assert not res.any_positive(pending_demand(state)["root.a"])
    assert not res.any_positive(h.model.queue_demand().get("root.a", {}))
    assert compute_quotas(state, state.config.preemption).beneficiaries == ()


def test_yarns_baseline_preempts_only_for_the_demand_the_limits_let_run() -> None:
    """YARN's policy reads pending considering the user limit: ann may hold 20 of a's 50 pending, so the
    proportional policy takes 20 from root.b over its rounds, not the 50 a's guarantee would ask for."""
    h = _held_back({"users": ["*"], "maxresources": {"memory": "20Mi"}})
    h.feed(
        f.AppAdded(app="x", queue="root.a", user="ann"), f.AskAdded(app="x", ask="t", resource={"memory": 10}, count=5)
    )
    state = h.cache.state
    assert state.config is not None
    snapshot = snapshot_from_state(state, with_containers=True)
    assert {q.path: q.pending for q in snapshot.queues}["root.a"] == {"memory": 20}
    policy = make_policy("proportional", "default", state.config.preemption)
    taken = 0
    for t in range(1, 7):  # 10 a round at most (total_preemption_per_round 0.1 of 100)
        h.starve(1)
        result = h.preempt_round(float(t), policy=policy)
        taken += sum(x.resource["memory"] for x in result.decisions if isinstance(x, d.Preempt))
    assert taken == 20


def test_the_user_limits_scenario_meets_the_guarantee_under_every_policy() -> None:
    """The heavy user's held-back asks are no demand, so root.shared's guarantee is met: no unmet
    episode under sniper, and no invariant violated under any policy."""
    sc = scenario("user_limits")
    for policy in ("sniper", "proportional", "none"):
        result = run_simulation(sc.events, sc.config, SimulationSettings(until=600, policy=policy))
        assert result.violations == 0, policy
        if policy == "sniper":
            ttg = result.metrics["default"].time_to_guarantee()
            assert ttg and all(t.unmet == 0 for t in ttg.values()), ttg
