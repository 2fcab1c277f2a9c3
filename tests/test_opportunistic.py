"""Opportunistic containers (YARN's execution type): idle room only, outside every queue's
accounting, killed first (at once, reason ``opportunistic``) when a guaranteed ask needs their room,
and promoted to guaranteed when the queue's max allows."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from sniper.core import resources as res
from sniper.core.allocator import Allocator
from sniper.core.cache import Cache
from sniper.core.config import parse_partition
from sniper.core.limits import Limits
from sniper.core.opportunistic import minimal_evictions
from sniper.core.state import Node, PartitionState
from sniper.messages import codec
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from tests.core_support import Harness, config_of, fingerprint, invariant_problems, queue
from tests.preemption_support import PreemptHarness, preemption_raw, two_queues

CONFIG = config_of(
    queue("a", guaranteed={"memory": 4096}, maximum={"memory": 8192}),
    queue("b", guaranteed={"memory": 4096}),
)


def opp(app: str, ask: str, memory: int, count: int = 1, **kw: object) -> f.AskAdded:
    return f.AskAdded(app=app, ask=ask, resource={"memory": memory}, count=count, execution_type="opportunistic", **kw)  # type: ignore[arg-type]


def gua(app: str, ask: str, memory: int, count: int = 1) -> f.AskAdded:
    return f.AskAdded(app=app, ask=ask, resource={"memory": memory}, count=count)


def harness(*events: f.Feed, nodes: int = 1, memory: int = 8192) -> Harness:
    h = Harness(CONFIG)
    h.feed(*(f.NodeAdded(node=f"n{i}", capacity={"memory": memory}) for i in range(1, nodes + 1)))
    h.feed(f.AppAdded(app="a1", queue="root.a"), f.AppAdded(app="b1", queue="root.b"))
    h.feed(*events)
    return h


def settle(h: Harness, rounds: int = 20) -> None:
    """Cycles until quiet; killed containers are released at once, as a resource manager does."""
    for _ in range(rounds):
        h.settle()
        killed = [a.id for a in h.cache.state.allocations.values() if a.killed]
        if not killed:
            return
        h.feed(*(f.AllocationReleased(allocation=x) for x in killed))
    raise AssertionError("never settled")


def opportunistic_ids(h: Harness) -> set[str]:
    return {a.id for a in h.cache.state.allocations.values() if a.opportunistic}


def kills(h: Harness) -> list[d.Kill]:
    return [x for x in h.decisions if isinstance(x, d.Kill)]


# ---------------------------------------------------------------------- the feed field


def test_execution_type_defaults_to_guaranteed_and_bad_values_are_bad_input() -> None:
    lines = [
        b'{"type":"ask_added","app":"a","ask":"x","resource":{"memory":1}}',
        b'{"type":"ask_added","app":"a","ask":"x","resource":{"memory":1},"execution_type":"spot"}',
        codec.encode_json_line(opp("a", "x", 1)),
        b'{"type":"allocation_promoted","allocation":"alloc-3"}',
    ]
    default, bad, kept, promoted = codec.decode_feed_lines(lines)
    assert isinstance(default, f.AskAdded) and default.execution_type == "guaranteed"
    assert isinstance(bad, codec.BadInput) and "execution_type" in bad.reason and bad.where == "trace:2"
    assert kept == opp("a", "x", 1)
    assert promoted == f.AllocationPromoted(allocation="alloc-3")


def test_an_opportunistic_application_master_is_rejected() -> None:
    h = harness()
    out = h.feed(opp("a1", "am", 1024, am=True))
    assert [x.reason for x in out if isinstance(x, d.Rejected)] == [
        "ask a1/am: an application master cannot be opportunistic"
    ]
    assert h.cache.state.ask(("a1", "am")) is None


# ---------------------------------------------------------------------- accounting


def test_opportunistic_allocations_count_on_the_node_only() -> None:
    h = harness(opp("a1", "o", 1024, count=3))
    settle(h)
    allocated = h.allocated()
    assert len(allocated) == 3 and all(x.opportunistic for x in allocated)
    state = h.cache.state
    a = state.queues["root.a"]
    assert a.allocated == {} and a.pending == {}
    assert a.opportunistic == {"memory": 3072} and state.queues["root"].opportunistic == {"memory": 3072}
    assert state.nodes["n1"].allocated == {"memory": 3072}
    assert h.model.queue_usage().get("root.a", {}) == {}
    assert h.model.opportunistic_usage() == {"memory": 3072}
    assert invariant_problems(state) == []


def test_opportunistic_asks_are_not_bound_by_queue_max() -> None:
    # root.a's max is 8192; an opportunistic ask larger than that still runs (YARN: outside the queue).
    h = harness(opp("a1", "o", 6144, count=2), nodes=2)
    settle(h)
    assert len(opportunistic_ids(h)) == 2
    assert h.model.violations == []


def test_guaranteed_asks_go_first_and_opportunistic_take_what_is_left() -> None:
    h = harness(opp("a1", "o", 2048, count=4), gua("b1", "g", 2048, count=3))
    settle(h)
    by_kind = [(x.ask, x.opportunistic) for x in h.allocated()]
    assert by_kind[:3] == [("g", False)] * 3  # the same cycle: guaranteed placed before any opportunistic
    assert by_kind[3:] == [("o", True)]
    assert kills(h) == []


def test_opportunistic_never_takes_reserved_room() -> None:
    h = harness(gua("a1", "big", 4096))
    h.cache.commit(  # as a committed preemption holds room for its beneficiary
        p.ReservationSet(
            reservation="resv-x",
            app="a1",
            ask="big",
            node="n1",
            resource={"memory": 4096},
            victims=[],
            deadline=15.0,
            expires=60.0,
        )
    )
    h.pump()
    h.feed(gua("b1", "g", 2048), opp("a1", "o", 2048, count=4))
    settle(h)
    assert len(opportunistic_ids(h)) == 1  # 8192 - 4096 reserved - 2048 for g: room for one
    node = h.cache.state.nodes["n1"]
    assert node.allocated == {"memory": 4096} and node.reserved == {"memory": 4096}


# ---------------------------------------------------------------------- first to go


def test_guaranteed_ask_kills_opportunistic_at_once_newest_first_and_gets_the_room() -> None:
    h = harness(opp("a1", "o", 2048, count=4))
    settle(h)
    oldest_first = [x.allocation for x in h.allocated()]
    h.tick(5.0)
    h.feed(gua("b1", "g", 4096))
    proposal = h.propose()
    assert proposal is not None and len(proposal.evictions) == 1
    h.deliver()
    killed = kills(h)
    assert [k.reason for k in killed] == ["opportunistic", "opportunistic"]
    assert {k.allocation for k in killed} == set(oldest_first[2:])  # the two most recent
    assert all(k.t == 5.0 for k in killed)  # no grace
    notices = [x for x in h.decisions if isinstance(x, d.Preempt)]
    assert all(x.opportunistic and x.policy == "opportunistic" and x.deadline == 5.0 for x in notices)
    settle(h)
    g = [x for x in h.allocated() if x.ask == "g"]
    assert len(g) == 1 and g[0].reservation is not None and g[0].node == "n1"
    assert h.model.violations == []
    assert invariant_problems(h.cache.state) == []


def test_eviction_takes_a_minimal_set() -> None:
    h = harness()
    h.feed(opp("a1", "small", 1024, count=2), opp("a1", "large", 4096))
    settle(h)
    h.tick(1.0)
    h.feed(gua("b1", "g", 4096))  # free is 1024: the 4096 alone is enough
    settle(h)
    victims = {x.allocation for x in kills(h)}
    large = [x.allocation for x in h.allocated() if x.ask == "large"]
    assert victims == set(large)


def test_eviction_goes_where_the_fewest_lose_the_least_work() -> None:
    # n1's opportunistic container started at 0, n2's at 8, n3's two halves at 9: a guaranteed ask that
    # needs one of them gone at 10 evicts n2's (one container that ran 2 s), not n1's (10 s), not n3's two.
    h = harness(gua("b1", "fill1", 4096), opp("a1", "old", 4096), nodes=1, memory=8192)
    settle(h)
    h.tick(8.0)
    h.feed(f.NodeAdded(node="n2", capacity={"memory": 8192}), gua("b1", "fill2", 4096), opp("a1", "young", 4096))
    settle(h)
    h.tick(9.0)
    h.feed(f.NodeAdded(node="n3", capacity={"memory": 8192}), gua("b1", "fill3", 4096))
    h.feed(opp("a1", "halves", 2048, count=2))
    settle(h)
    where = {x.ask: x.node for x in h.allocated() if x.ask in ("old", "young", "halves")}
    assert len(set(where.values())) == 3, where
    h.tick(10.0)
    h.feed(gua("b1", "g", 4096))
    settle(h)
    young = [x.allocation for x in h.allocated() if x.ask == "young"]
    assert [k.allocation for k in kills(h)] == young


def test_no_eviction_when_the_guaranteed_ask_cannot_fit_even_without_them() -> None:
    h = harness(opp("a1", "o", 2048, count=2))
    h.feed(gua("b1", "g", 6144))
    settle(h)
    g_node = [x for x in h.allocated() if x.ask == "g"]
    assert g_node and kills(h) == []  # 6144 fit the free room first: guaranteed before opportunistic
    h.feed(gua("b1", "huge", 16384))
    settle(h)
    assert kills(h) == []  # no node can ever hold it: killing would free nothing useful


def test_no_eviction_for_an_ask_its_queue_max_stops() -> None:
    h = harness(opp("b1", "o", 2048, count=4))
    settle(h)
    h.feed(gua("a1", "g", 8192), gua("a1", "g2", 2048))  # a's max is 8192: g fits it, g2 then does not
    settle(h)
    assert [x.ask for x in h.allocated() if not x.opportunistic] == ["g"]
    assert len(kills(h)) == 4


def test_minimal_evictions_helper() -> None:
    class A:
        def __init__(self, aid: str, memory: int) -> None:
            self.id, self.resource = aid, {"memory": memory}

    x, y, z = A("x", 1024), A("y", 2048), A("z", 1024)
    assert minimal_evictions({"memory": 4096}, {"memory": 1024}, [x]) == []  # type: ignore[list-item]
    assert minimal_evictions({"memory": 0}, {"memory": 2048}, [x, y, z]) == [y]  # type: ignore[list-item]
    assert minimal_evictions({"memory": 0}, {"memory": 9000}, [x, y, z]) is None  # type: ignore[list-item]


# ---------------------------------------------------------------------- promotion


def test_promotion_moves_the_allocation_into_its_queue() -> None:
    h = harness(opp("a1", "o", 4096, count=2))
    settle(h)
    first, second = (x.allocation for x in h.allocated())
    out = h.feed(f.AllocationPromoted(allocation=first))
    assert [type(x) for x in out] == [d.Promoted]
    a = h.cache.state.queues["root.a"]
    assert a.allocated == {"memory": 4096} and a.opportunistic == {"memory": 4096}
    assert h.model.queue_usage()["root.a"] == {"memory": 4096}
    assert invariant_problems(h.cache.state) == []
    assert h.allocator.state.queues["root.a"].allocated == {"memory": 4096}
    # A second promotion stays within a's max of 8192; a third would not, and is rejected.
    h.feed(f.AllocationPromoted(allocation=second))
    h.feed(opp("a1", "o2", 1024))
    settle(h, rounds=3)
    assert h.cache.state.queues["root.a"].allocated == {"memory": 8192}


def test_promotion_over_max_is_rejected_with_the_reason() -> None:
    h = harness(opp("a1", "o", 6144), opp("a1", "p", 2048), nodes=2)
    settle(h)
    o, p_ = (x.allocation for x in h.allocated())
    h.feed(gua("a1", "g", 4096))
    settle(h)
    out = h.feed(f.AllocationPromoted(allocation=o))
    rejected = [x for x in out if isinstance(x, d.Rejected)]
    assert len(rejected) == 1 and "over its max" in rejected[0].reason
    assert h.cache.state.allocations[o].opportunistic
    for bad, why in ((o + "x", "is not running"), (h.allocated()[-1].allocation, "already guaranteed")):
        out = h.feed(f.AllocationPromoted(allocation=bad))
        assert next(x.reason for x in out if isinstance(x, d.Rejected)).endswith(why)
    assert p_


def test_recovery_rebuilds_opportunistic_and_promoted_allocations() -> None:
    from sniper.core.cache import Cache
    from sniper.core.recovery import apply_logged

    h = harness(opp("a1", "o", 2048, count=2))
    settle(h)
    h.feed(f.AllocationPromoted(allocation=h.allocated()[0].allocation))
    fresh = Cache("default", CONFIG)
    fresh.drain()
    events: list[f.Feed] = [f.NodeAdded(node="n1", capacity={"memory": 8192}), f.AppAdded(app="a1", queue="root.a")]
    events += [f.AppAdded(app="b1", queue="root.b"), opp("a1", "o", 2048, count=2)]
    for e in events:
        fresh.handle_event(e)
    log = [x for x in h.decisions if not isinstance(x, d.Rejected)]
    i = 0
    while i < len(log):
        i, problems = apply_logged(fresh, log, i)
        assert problems == []
    a = fresh.state.queues["root.a"]
    assert a.allocated == {"memory": 2048} and a.opportunistic == {"memory": 2048}
    assert invariant_problems(fresh.state) == []


# ---------------------------------------------------------------------- first to go in preemption


def preemption_harness(policy: str) -> tuple[PreemptHarness, str]:
    """n1 full of b's guaranteed containers; n2 half b's, half one opportunistic container of b; a (below
    its ideal) asks for 75, which neither node holds even with the opportunistic container gone."""
    h = PreemptHarness(two_queues(100, 100, policy=policy, natural_termination_factor=1.0))
    h.nodes("n1", "n2")
    h.fill("b1", "root.b", "n1", [25] * 4)
    h.fill("b1", "root.b", "n2", [25] * 2, start=4)
    h.feed(opp("b1", "idle", 50))
    h.cache.allocate("b1", "idle", "n2")
    h.pump()
    oid = h.allocated()[-1].allocation
    h.app("a1", "root.a")
    h.ask("a1", "big", 75)
    h.starve(2)
    assert not h.kills()  # the normal allocator's eviction cannot help: 50 + 0 free < 75
    return h, oid


def test_sniper_takes_the_opportunistic_container_before_any_guaranteed_one() -> None:
    h, oid = preemption_harness("sniper")
    result = h.preempt_round(10.0)
    [placement] = result.placements
    assert placement.node == "n2" and oid in placement.victims and len(placement.victims) == 2
    kills_now = [x for x in result.decisions if isinstance(x, d.Kill)]
    assert [(x.allocation, x.reason, x.t) for x in kills_now] == [(oid, "opportunistic", 10.0)]
    guaranteed = [x for x in result.preempts() if not x.opportunistic]
    assert len(guaranteed) == 1 and guaranteed[0].queue == "root.b" and guaranteed[0].deadline == 25.0
    h.release(oid)
    h.tick(25.0)
    h.release(*h.kills()[1:])
    assert [x.node for x in h.allocated() if x.ask == "big"] == ["n2"]
    assert h.model.violations == []


def test_the_proportional_baseline_takes_opportunistic_victims_first() -> None:
    h, oid = preemption_harness("proportional")
    result = h.preempt_round(10.0)
    assert isinstance(result.request, p.PreemptionProposal)
    # YARN's selection frees 25 of b's (150 used, ideal 125): the opportunistic 50 covers it alone.
    assert result.request.victims == [oid]
    assert [(x.allocation, x.reason) for x in result.decisions if isinstance(x, d.Kill)] == [(oid, "opportunistic")]
    h.release(oid)
    # Next round: nothing opportunistic is left, so YARN's guaranteed victims go.
    again = h.preempt_round(11.0)
    assert isinstance(again.request, p.PreemptionProposal)
    assert again.request.victims and all(not h.cache.state.allocations[v].opportunistic for v in again.request.victims)
    assert h.model.violations == []


def test_the_proportional_baseline_covers_a_chosen_container_with_opportunistic_room_once() -> None:
    """The opportunistic container covers YARN's choice; its work is asked for again and placed on the
    same room. YARN's selection then chooses the same guaranteed container (b is still over its ideal):
    it goes itself, rather than the new opportunistic container being killed round after round."""
    h, oid = preemption_harness("proportional")
    first = h.preempt_round(10.0)
    assert isinstance(first.request, p.PreemptionProposal) and first.request.victims == [oid]
    h.release(oid)
    h.feed(opp("b1", "idle-again", 50))
    h.cache.allocate("b1", "idle-again", "n2")
    h.pump()
    again_oid = h.allocated()[-1].allocation
    second = h.preempt_round(11.0)
    assert isinstance(second.request, p.PreemptionProposal)
    victims = second.request.victims
    assert victims and again_oid not in victims, "the re-placed opportunistic container is not covered again"
    assert all(not h.cache.state.allocations[v].opportunistic for v in victims)
    assert h.model.violations == []


# ---------------------------------------------------------------------- property


OpOp = tuple[object, ...]
sizes = st.sampled_from([1024, 2048, 3072, 4096, 6144])
opportunistic_op = st.tuples(st.just("opportunistic"), st.sampled_from(["a1", "b1"]), sizes, st.integers(2, 8))
prop_ops = st.one_of(
    opportunistic_op,
    opportunistic_op,  # twice as likely: the cluster is mostly full of them when guaranteed asks come
    st.tuples(st.just("guaranteed"), st.sampled_from(["a1", "b1"]), sizes, st.integers(1, 4)),
    st.tuples(st.just("release"), st.integers(0, 30)),
    st.tuples(st.just("promote"), st.integers(0, 30)),
    st.tuples(st.just("withdraw"), st.integers(0, 30)),
    st.tuples(
        st.just("tick"),
    ),
    st.tuples(
        st.just("preempt"),
    ),
)


def needs_opportunistic_room(h: Harness) -> list[str]:
    """Guaranteed asks (within their queue's max) that would fit a node if the opportunistic containers
    there were gone, and do not fit its free room: after a cycle there must be none."""
    state = h.cache.state
    out = []
    for app in state.apps.values():
        for ask in app.asks.values():
            if ask.opportunistic or ask.count - ask.allocated - ask.reserved <= 0:
                continue
            if not state.headroom_allows(app.queue, ask.resource):
                continue
            for node in state.nodes.values():
                free = state.room_once_victims_leave(node)
                if (
                    node.schedulable
                    and any(node.opportunistic.values())
                    and ask.accepts(node)
                    and res.fits(ask.resource, res.add(free, node.opportunistic))
                    and not res.fits(ask.resource, free)
                ):
                    out.append(f"{app.name}/{ask.name}@{node.name}")
    return out


PREEMPTING: list[OpOp] = [("guaranteed", "b1", 2048, 4)] * 3 + [("guaranteed", "a1", 2048, 2), ("preempt",)]


@example(script=[*PREEMPTING, ("tick",), ("tick",), ("tick",), ("preempt",)], policy="sniper")
@example(script=[*PREEMPTING, ("tick",), ("tick",), ("tick",), ("preempt",)], policy="proportional")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(prop_ops, min_size=5, max_size=40), policy=st.sampled_from(["sniper", "proportional"]))
def test_random_opportunistic_and_guaranteed_asks(script: list[OpOp], policy: str) -> None:
    raw = preemption_raw(
        queue("a", guaranteed={"memory": 4096}, maximum={"memory": 8192}),
        queue("b", guaranteed={"memory": 4096}),
        policy=policy,
        grace=2.0,
        natural_termination_factor=1.0,
    )
    h = PreemptHarness(raw)
    h.feed(*(f.NodeAdded(node=f"n{i}", capacity={"memory": 8192}) for i in (1, 2, 3)))
    h.app("a1", "root.a")
    h.app("b1", "root.b")
    asks: list[tuple[str, str]] = []
    for n, op in enumerate([("opportunistic", "b1", 2048, 12), *script]):  # the idle cluster filled first
        kind = op[0]
        state = h.cache.state
        live = sorted(state.allocations)
        if kind in ("guaranteed", "opportunistic"):
            app, memory, count = str(op[1]), int(op[2]), int(op[3])  # type: ignore[call-overload]
            make = gua if kind == "guaranteed" else opp
            h.feed(make(app, f"k{n}", memory, count), allow_rejected=True)
            asks.append((app, f"k{n}"))
        elif kind == "release" and live:
            h.feed(f.AllocationReleased(allocation=live[int(op[1]) % len(live)]), allow_rejected=True)  # type: ignore[call-overload]
        elif kind == "promote" and live:
            h.feed(f.AllocationPromoted(allocation=live[int(op[1]) % len(live)]), allow_rejected=True)  # type: ignore[call-overload]
        elif kind == "withdraw" and asks:
            app, name = asks[int(op[1]) % len(asks)]  # type: ignore[call-overload]
            h.feed(f.AskRemoved(app=app, ask=name), allow_rejected=True)
        elif kind == "tick":
            h.tick(h.now + 1.0)
        elif kind == "preempt":
            h.starve()  # missed opportunities, then one round of the policy, committed
            h.preempt_round(h.now + 1.0)
        # One allocation cycle, delivered; killed containers leave at once (the resource manager).
        if h.propose() is not None:
            h.deliver()
        killed = [a.id for a in h.cache.state.allocations.values() if a.killed]
        h.feed(*(f.AllocationReleased(allocation=x) for x in killed), allow_rejected=True)
        state = h.cache.state
        # Invariant 1 with preemptions in flight: committed allocations fit, and so do the reservations
        # once the victims under notice are gone.
        assert [x for x in invariant_problems(state) if not x.startswith("inv1")] == []
        for node in state.nodes.values():
            staying = res.sub(node.allocated, node.preempting)
            assert res.fits(node.allocated, node.capacity) and res.fits(res.add(staying, node.reserved), node.capacity)
        h.model.check(h.now)
        assert h.model.violations == []
        assert needs_opportunistic_room(h) == []  # no opportunistic container outlives that need a cycle
        # Guarantee accounting never holds opportunistic usage: the cache's and the outside model's.
        usage = h.model.queue_usage()
        for path in ("root.a", "root.b"):
            q = state.queues[path]
            guaranteed = res.total(
                a.resource for a in state.allocations.values() if a.queue is q and not a.opportunistic
            )
            assert res.normalized(q.allocated) == res.normalized(guaranteed)
            assert res.normalized(usage.get(path, {})) == res.normalized(guaranteed)
    h.settle()
    assert fingerprint(h.allocator.state) == fingerprint(h.cache.state)
    event(f"opportunistic kills: {min(len(kills(h)), 3)}+")
    event(f"{policy} guaranteed victims: {min(sum(1 for x in h.preempts() if not x.opportunistic), 3)}+")


# ---------------------------------------------------------------------- outside every queue's figures


def test_ideal_and_the_baseline_snapshot_ignore_opportunistic_usage() -> None:
    from sniper.core.preemption.quotas import compute_quotas
    from sniper.core.preemption.view import snapshot_from_state

    h = PreemptHarness(two_queues(100, 100, policy="sniper"))
    h.nodes("n1", "n2")
    h.app("b1", "root.b")
    h.feed(opp("b1", "idle", 50, count=4))
    h.settle()
    state = h.cache.state
    assert len(opportunistic_ids(h)) == 4
    snapshot = snapshot_from_state(state, with_containers=True)
    assert all(not app.containers for q in snapshot.queues for app in q.apps)
    assert all(not any(q.used.values()) for q in snapshot.queues)
    quotas = compute_quotas(state, state.config.preemption)  # type: ignore[union-attr]
    assert not any(quotas.ideal.get("root.b", {}).values())  # no demand, no usage: no share


def test_a_snapshot_rebuilds_opportunistic_state() -> None:
    from sniper.core.cache import state_changes
    from sniper.core.state import PartitionState

    h = harness(opp("a1", "o", 2048, count=3), gua("b1", "g", 2048))
    settle(h)
    h.feed(f.AllocationPromoted(allocation=next(x.allocation for x in h.allocated() if x.opportunistic)))
    h.feed(opp("b1", "more", 2048, count=5))
    rebuilt = PartitionState("default", indexed=False)
    rebuilt.apply_all(state_changes(h.cache.state))
    assert fingerprint(rebuilt) == fingerprint(h.cache.state)
    assert set(rebuilt.opportunistic_asks) == {("b1", "more")}


def test_the_bundled_scenario_reports_opportunistic_work_apart() -> None:
    from sniper.simulator.run import SimulationSettings, run_simulation
    from sniper.simulator.scenarios import scenario

    sc = scenario("opportunistic")
    report = run_simulation(sc.events, sc.config, SimulationSettings(until=60)).report
    assert report["invariant_violations"] == 0
    o = report["opportunistic"]
    assert o["allocations"] > 0 and o["evictions"] > 0 and o["promoted"] == 0
    assert 0 < o["utilization"]["memory"] <= 1
    assert report["preemptions"]["victims"] == 0  # by 60 s only opportunistic containers were killed


def test_the_intra_queue_policy_takes_opportunistic_victims_first() -> None:
    h = PreemptHarness(two_queues(100, 100, policy="none"), policy="intra_queue")
    h.nodes("n1")
    low = h.fill("a1", "root.a", "n1", [25, 25], start=0)
    h.feed(opp("a1", "idle", 50))
    h.cache.allocate("a1", "idle", "n1")
    h.pump()
    oid = h.allocated()[-1].allocation
    h.app("a2", "root.a", priority=5)
    h.ask("a2", "urgent", 75, priority=5)
    h.starve(2)  # 75 does not fit even without the opportunistic 50: no eviction by the allocator
    result = h.preempt_round(10.0)
    [placement] = result.placements
    assert oid in placement.victims and len(placement.victims) == 2
    assert set(placement.victims) - {oid} <= set(low)
    assert [(x.allocation, x.reason) for x in result.decisions if isinstance(x, d.Kill)] == [(oid, "opportunistic")]


def test_the_models_invariant_5_counts_no_opportunistic_container_as_the_victim_queues() -> None:
    from sniper.core.config import parse_partition
    from sniper.simulator.model import ClusterModel
    from tests.core_support import partition_raw

    model = ClusterModel("default", parse_partition(partition_raw(queue("a", guaranteed={"memory": 4096}), queue("b"))))
    for e in (
        f.NodeAdded(node="n1", capacity={"memory": 16384}),
        f.AppAdded(app="a1", queue="root.a"),
        f.AskAdded(app="a1", ask="g", resource={"memory": 4096}),
        opp("a1", "o", 4096),
        f.AppAdded(app="b1", queue="root.b"),
        f.AskAdded(app="b1", ask="m", resource={"memory": 4096}),
    ):
        model.on_event(e)
    common = {"app": "a1", "queue": "root.a", "node": "n1", "resource": {"memory": 4096}}
    model.on_decision(d.Allocated(allocation="x1", ask="g", seq=1, **common))  # type: ignore[arg-type]
    model.on_decision(d.Allocated(allocation="x2", ask="o", opportunistic=True, seq=2, **common))  # type: ignore[arg-type]
    assert model.queue_usage()["root.a"] == {"memory": 4096} and model.opportunistic_usage() == {"memory": 4096}
    assert model.queue_pending().get("root.a", {}) == {}  # all placed; an opportunistic ask is no demand anyway
    model.on_decision(
        d.Preempt(
            allocation="x1",
            for_ask="m",
            for_app="b1",
            for_queue="root.b",
            deadline=15.0,
            reservation="r1",
            seq=3,
            **common,  # type: ignore[arg-type]
        )
    )
    # Only the guaranteed container counts: without it root.a is below its guarantee (the opportunistic
    # one on the same queue does not hold it up).
    assert [(v.invariant, v.reason) for v in model.violations] == [(5, "victim x1 takes root.a below its guarantee")]


def test_a_gang_that_evictions_cannot_complete_leaves_the_room_to_opportunistic_asks() -> None:
    # n0: b's 40, opportunistic 50, 10 free: one 60 member fits once the 50 goes; n1 is b's alone. The
    # gang of two evicts nothing, and the opportunistic 10 still takes n0's free room.
    h = Harness(config_of(queue("a", guaranteed={"memory": 120}), queue("b", guaranteed={"memory": 140})))
    h.feed(f.NodeAdded(node="n0", capacity={"memory": 100}), f.NodeAdded(node="n1", capacity={"memory": 100}))
    h.feed(f.AppAdded(app="a1", queue="root.a"), f.AppAdded(app="b1", queue="root.b"))
    h.feed(gua("b1", "svc", 40), f.AskAdded(app="b1", ask="full", resource={"memory": 100}))
    h.cache.allocate("b1", "svc", "n0")
    h.cache.allocate("b1", "full", "n1")
    h.feed(opp("b1", "idle", 50))
    h.cache.allocate("b1", "idle", "n0")
    h.pump()
    h.feed(f.AskAdded(app="a1", ask="g", resource={"memory": 60}, count=2, gang_min=2), opp("b1", "small", 10))
    settle(h)
    assert not kills(h)
    small = [x for x in h.allocated() if x.ask == "small"]
    assert [x.node for x in small] == ["n0"]
    assert not h.model.violations and not invariant_problems(h.cache.state)


# ---------------------------------------------------------------------- cost of a cycle


def _starving_beside_opportunistic(gangs: int, per_node: int, nodes: int = 8) -> Allocator:
    """Queue b fills every node with guaranteed work and ``per_node`` opportunistic containers that no
    eviction can turn into room for queue a's ``gangs`` gangs of two (each of its own user, under a user
    limit): every cycle tries them again, none is placed, none evicts."""
    raw = {
        "name": "default",
        "queues": [
            {
                "name": "root",
                "queues": [
                    {
                        "name": "a",
                        "resources": {"guaranteed": {"memory": f"{nodes * 32}Mi"}},
                        "limits": [{"limit": "each", "users": ["*"], "maxresources": {"memory": "100000Mi"}}],
                    },
                    {"name": "b", "resources": {"guaranteed": {"memory": f"{nodes * 32}Mi"}}},
                ],
            }
        ],
    }
    cache = Cache("default", parse_partition(raw))
    names = [f"n{i}" for i in range(nodes)]
    cache.handle_event(f.AppAdded(app="b1", queue="root.b"))
    cache.handle_event(f.AskAdded(app="b1", ask="task", resource={"memory": 40}, count=nodes))
    cache.handle_event(opp("b1", "idle", 24 // per_node, count=per_node * nodes))
    for name in names:
        cache.handle_event(f.NodeAdded(node=name, capacity={"memory": 64}))
        cache.allocate("b1", "task", name)
        for _ in range(per_node):
            cache.allocate("b1", "idle", name)
    for i in range(gangs):
        cache.handle_event(f.AppAdded(app=f"a{i}", queue="root.a", user=f"u{i}"))
        cache.handle_event(f.AskAdded(app=f"a{i}", ask="g", resource={"memory": 32}, count=2, gang_min=2))
    allocator = Allocator("default")
    out = cache.drain()
    assert out.view is not None
    allocator.apply_view(
        p.ViewDelta(**{**{k: getattr(out.view, k) for k in out.view.__struct_fields__}, "reset": False})
    )
    return allocator


def test_a_cycle_builds_one_limits_view_and_looks_at_each_host_once_however_many_gangs_starve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def cycle_work(gangs: int, per_node: int) -> tuple[int, int]:
        allocator = _starving_beside_opportunistic(gangs, per_node)
        state = allocator.state
        counts = {"views": 0, "rooms": 0}
        build, room = Limits.__init__, PartitionState.room_once_victims_leave

        def counted_build(self: Limits, s: PartitionState) -> None:
            counts["views"] += 1
            build(self, s)

        def counted_room(self: PartitionState, node: Node) -> res.Resource:
            counts["rooms"] += 1
            return room(self, node)

        with monkeypatch.context() as m:
            m.setattr(Limits, "__init__", counted_build)
            m.setattr(PartitionState, "room_once_victims_leave", counted_room)
            state.version += 1
            assert allocator.cycle() is None
        assert all(a.app == "b1" for a in state.allocations.values())
        return counts["views"], counts["rooms"]

    assert cycle_work(gangs=1, per_node=1)[1] > 0, "the gangs were tried against the opportunistic hosts"
    few = cycle_work(gangs=2, per_node=1)
    many = cycle_work(gangs=20, per_node=6)
    assert few == many, f"2 gangs beside 8 opportunistic containers cost {few}, 20 beside 48 cost {many}"
    assert many[1] <= 8 * 2, "each host's room looked at a bounded number of times, not once per gang"
