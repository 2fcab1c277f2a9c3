"""Resource-based preemption (YARN-45's preemption contract): an app whose ``app_added`` says
``preemption_contract`` gets one ``preempt_request`` per round instead of notices; its application
master chooses what to release; what is still missing at the deadline is killed, newest first; a
request whose need vanished is withdrawn. Checked on the cache through the sans-IO harness, with the
independent model watching every decision (invariant 9: never killed before the deadline).
"""

from __future__ import annotations

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sniper.core import resources as res
from sniper.core.cache import state_changes
from sniper.core.config import SchedulerConfig, parse_config
from sniper.core.preemption.contract import newest_covering
from sniper.core.recovery import DurableCache, restore, take_snapshot
from sniper.core.state import PartitionState
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.messages.snapshot import snapshot_msgpack
from sniper.simulator.run import SimulationResult, SimulationSettings, run_simulation
from tests.contract_support import asked, assert_clean, ended, kills, mixed_starving, requests
from tests.core_support import consistency_problems, queue
from tests.preemption_support import GRACE, PARTITION, PreemptHarness
from tests.recovery_support import durable_fingerprint, owner_with_a_contract_request, recover


def newest(h: PreemptHarness, app: str, n: int) -> list[str]:
    """The ``n`` newest running containers of ``app`` (by start, then id)."""
    state = h.cache.state
    held = sorted(
        (state.allocations[a] for a in state.apps[app].allocations),
        key=lambda a: (a.start, int(a.id.split("-")[1])),
    )
    return [a.id for a in held[-n:]]


def test_a_contract_app_gets_one_request_instead_of_notices() -> None:
    h = asked()
    result = h.preempt_round(10.0)
    assert result.outcome is not None and result.outcome.accepted == 1
    assert result.preempts() == [], "no container-based notice for a contract app"
    [req] = requests(h)
    assert req.app == "b1" and req.queue == "root.b"
    assert req.resource == {"memory": 50}
    assert req.deadline == 10.0 + GRACE
    assert (req.for_app, req.for_ask, req.for_queue) == ("a1", "big", "root.a")
    assert len(req.containers) == 2 and len({c.node for c in req.containers}) == 1
    assert all(c.reservation for c in req.containers), "the beneficiary's reservation holds the room"
    assert sum(c.resource["memory"] for c in req.containers) == 50
    victims = [h.alloc(c.allocation) for c in req.containers]
    assert all(v.preempting for v in victims), "the named containers' room is handled as a preemption's"
    assert list(h.cache.state.contracts) == [req.request]
    assert_clean(h)


def test_without_a_contract_nothing_changes() -> None:
    h = asked(contract=False)
    result = h.preempt_round(10.0)
    assert len(result.preempts()) == 2
    assert requests(h) == []


def test_am_releases_what_was_named_no_kill_and_the_beneficiary_runs_there() -> None:
    h = asked()
    h.preempt_round(10.0)
    [req] = requests(h)
    h.tick(12.0)
    h.release(*(c.allocation for c in req.containers))
    h.tick(13.0)
    assert kills(h) == []
    [end] = ended(h)
    assert end.outcome == "given_back" and end.released == {"memory": 50}
    big = [x for x in h.allocated() if x.app == "a1"]
    assert len(big) == 1 and big[0].reservation, "the beneficiary got the reserved room"
    h.tick(10.0 + GRACE + 1)
    assert kills(h) == []
    assert h.cache.state.contracts == {}
    assert_clean(h)


def test_am_releases_others_of_the_same_size_no_kill() -> None:
    h = asked()
    h.preempt_round(10.0)
    [req] = requests(h)
    named = {c.allocation for c in req.containers}
    others = [a for a in newest(h, "b1", 8) if a not in named][-2:]
    h.tick(12.0)
    h.release(*others)
    h.tick(13.0)
    assert kills(h) == []
    [end] = ended(h)
    assert end.outcome == "given_back"
    still = [h.alloc(a) for a in named]
    assert not any(a.preempting for a in still), "the named containers keep running"
    cancelled = {x.allocation for x in h.decisions if isinstance(x, d.PreemptCancelled)}
    assert cancelled == named
    h.tick(10.0 + GRACE + 1)
    assert kills(h) == []
    assert_clean(h)


def test_am_releases_part_the_remaining_named_one_is_killed_at_the_deadline() -> None:
    h = asked()
    h.preempt_round(10.0)
    [req] = requests(h)
    named = [c.allocation for c in req.containers]
    h.tick(12.0)
    h.release(named[0])  # gives back 25 of 50
    h.tick(10.0 + GRACE - 1)
    assert kills(h) == [], "never before the deadline"
    h.tick(10.0 + GRACE)
    killed = kills(h)
    assert [k.allocation for k in killed] == [named[1]], "the named container still running covers the 25 missing"
    assert "preq-" in killed[0].reason and "deadline passed, 25 MiB still missing" in killed[0].reason
    assert killed[0].missing == {"memory": 25} and killed[0].cause == "request_deadline"
    [end] = ended(h)
    assert end.outcome == "enforced" and end.released == {"memory": 25} and end.killed == {"memory": 25}
    assert_clean(h)


def test_am_releases_nothing_kill_exactly_covers_the_missing_part() -> None:
    h = asked()
    h.preempt_round(10.0)
    [req] = requests(h)
    h.tick(10.0 + GRACE)
    assert sorted(k.allocation for k in kills(h)) == sorted(c.allocation for c in req.containers)
    [end] = ended(h)
    assert end.outcome == "enforced" and end.killed == {"memory": 50} and end.released == {}
    h.release(*(k.allocation for k in kills(h)))
    assert [x.reservation for x in h.allocated() if x.app == "a1"] == [req.containers[0].reservation]
    assert_clean(h)


def test_what_the_named_ones_cannot_cover_is_taken_from_the_newest_others() -> None:
    """A request whose named containers cover only part of it (opened by hand: the policies always name
    enough): at the deadline the named one goes first, then the app's newest others (ties by the later
    id), just enough."""
    h = asked()
    oldest = sorted(h.cache.state.apps["b1"].allocations, key=lambda a: int(a.split("-")[1]))[0]
    h.cache.commit(p.VictimsMarked(victims=[oldest], deadline=20.0))
    h.cache.commit(p.ContractSet(contract="preq-9", app="b1", resource={"memory": 75}, deadline=20.0, victims=[oldest]))
    h.pump()
    expected_others = newest(h, "b1", 2)
    h.tick(20.0)
    assert [k.allocation for k in kills(h)] == [oldest, *reversed(expected_others)]
    assert ended(h)[0].killed == {"memory": 75}


def test_newest_covering_orders_by_start_then_id_and_skips_what_frees_nothing_missing() -> None:
    candidates = [
        ("alloc-2", 5.0, {"memory": 10}),
        ("alloc-10", 5.0, {"memory": 10}),
        ("alloc-3", 7.0, {"vcore": 4}),
        ("alloc-1", 1.0, {"memory": 30}),
    ]
    assert newest_covering(candidates, {"memory": 15}) == ["alloc-10", "alloc-2"]
    assert newest_covering(candidates, {"memory": 40, "vcore": 1}) == ["alloc-3", "alloc-10", "alloc-2", "alloc-1"]
    assert newest_covering(candidates, {}) == []


def test_need_vanishes_request_withdrawn() -> None:
    h = asked()
    h.preempt_round(10.0)
    h.tick(12.0)
    h.feed(f.AskRemoved(app="a1", ask="big"))
    h.tick(13.0)
    [end] = ended(h)
    assert end.outcome == "withdrawn"
    h.tick(10.0 + GRACE + 1)
    assert kills(h) == []
    assert not any(a.preempting for a in h.cache.state.allocations.values())
    assert_clean(h)


def test_proportional_sends_requests_too() -> None:
    h = asked(policy="proportional")
    result = h.preempt_round(10.0)
    assert result.preempts() == []
    [req] = requests(h)
    assert req.policy == "proportional" and req.for_queue == ""
    assert all(not c.reservation for c in req.containers)
    assert res.any_positive(req.resource)
    h.tick(10.0 + GRACE)
    assert sum(h.cache.state.allocations.get(k.allocation) is not None for k in kills(h)) == len(kills(h))
    assert ended(h)[0].outcome == "enforced"
    assert_clean(h)


def test_snapshot_keeps_open_requests() -> None:
    h = asked()
    h.preempt_round(10.0)
    h.tick(12.0)
    [req] = requests(h)
    h.release(req.containers[0].allocation)
    durable = DurableCache(PARTITION)
    durable.state.apply_all(state_changes(h.cache.state))
    durable.counters = dict(h.cache.counters)
    core = restore(snapshot_msgpack.decode(msgspec.msgpack.encode(take_snapshot(durable))))
    [c] = core.state.contracts.values()
    assert c.id == req.request and c.released == {"memory": 25} and c.deadline == req.deadline

    def notices(state: PartitionState) -> dict[str, tuple[float | None, str | None]]:
        return {a.id: (a.preempt_deadline, a.reservation) for a in state.allocations.values() if a.preempting}

    assert notices(core.state) == notices(h.cache.state) != {}
    core.tick(10.0 + GRACE)
    out = core.drain().decisions
    assert [x.outcome for x in out if isinstance(x, d.PreemptRequestEnded)] == ["enforced"]
    assert len([x for x in out if isinstance(x, d.Kill)]) == 1
    assert core.state.contracts == {}


def test_replay_of_the_log_keeps_open_requests_and_their_end() -> None:
    o, snap, on = owner_with_a_contract_request()
    o.feed_event(f.AllocationReleased(partition=PARTITION, id="rel", allocation=on["n1"][0]))
    # Recovered while the request is open: the same state, the request included.
    core, result = recover(o, snap)
    assert result.divergences == [] and result.fresh == []
    assert durable_fingerprint(core) == durable_fingerprint(o.core)
    assert list(core.state.contracts) == list(o.core.state.contracts)
    assert core.state.contracts["preq-1"].released == {"memory": 4}
    # The deadline: the named container still running covers what is missing, the request ends; a
    # replay agrees.
    o.tick(100.0)
    assert [type(x) for x in o.log if isinstance(x, d.Kill | d.PreemptRequestEnded)] == [
        d.Kill,
        d.PreemptRequestEnded,
    ]
    core, result = recover(o, snap)
    assert result.divergences == [] and result.fresh == []
    assert durable_fingerprint(core) == durable_fingerprint(o.core) and core.state.contracts == {}
    assert {a.id for a in core.state.allocations.values() if a.killed} == {on["n1"][1]}


def test_mixed_apps_in_one_round_request_for_one_notices_for_the_other() -> None:
    """b1 (contract) and b2 (none) share n1 and n2; a1's 100 needs a whole node: one reservation, b2's
    victims get notices, b1 one request; b1's AM gives back in time, b2's are killed at the grace."""
    h = mixed_starving()
    result = h.preempt_round(10.0)
    assert result.outcome is not None and result.outcome.accepted == 1
    notices = result.preempts()
    [req] = requests(h)
    assert {x.app for x in notices} == {"b2"} and len(notices) == 2
    assert req.app == "b1" and len(req.containers) == 2 and req.resource == {"memory": 50}
    rid = notices[0].reservation
    assert all(x.reservation == rid for x in notices) and all(c.reservation == rid for c in req.containers)
    h.tick(14.0)
    h.release(*(c.allocation for c in req.containers))
    h.tick(10.0 + GRACE)
    assert sorted(k.allocation for k in kills(h)) == sorted(x.allocation for x in notices)
    assert all(k.reason == "grace period expired" for k in kills(h))
    h.release(*(x.allocation for x in notices))
    assert [x.reservation for x in h.allocated() if x.app == "a1"] == [rid]
    assert [x.outcome for x in ended(h)] == ["given_back"]
    assert_clean(h)


def test_node_removed_mid_grace_no_kill_and_the_request_ends() -> None:
    h = asked()
    h.preempt_round(10.0)
    [req] = requests(h)
    node = req.containers[0].node
    h.tick(12.0)
    h.feed(f.NodeRemoved(node=node))
    h.tick(13.0)
    assert len(ended(h)) == 1 and ended(h)[0].outcome != "enforced"
    h.tick(10.0 + GRACE + 1)
    assert kills(h) == []
    assert h.cache.state.contracts == {}
    assert_clean(h)


def test_a_second_round_request_is_not_covered_by_the_first_rounds_kills() -> None:
    """Two open requests of one app: containers killed at the first deadline never count as given back
    to the second (only what the AM releases of its own accord, or what that request named)."""
    h = asked()
    h.ask("a1", "big2", 50)
    h.preempt_round(10.0)
    h.starve()
    h.preempt_round(12.0)
    first, second = requests(h)
    h.tick(10.0 + GRACE)
    killed = [k.allocation for k in kills(h)]
    assert len(killed) == 2
    h.release(*killed)
    h.tick(12.0 + GRACE - 1)
    assert h.cache.state.contracts[second.request].released == {}
    assert [x.request for x in ended(h)] == [first.request]
    h.tick(12.0 + GRACE)
    assert [x.outcome for x in ended(h)] == ["enforced", "enforced"]
    assert_clean(h)


def test_observe_only_publishes_the_request_and_opens_nothing() -> None:
    h = asked(observe_only=True)
    h.preempt_round(10.0)
    [req] = requests(h)
    assert req.observe_only
    assert h.cache.state.contracts == {}
    assert not any(a.preempting for a in h.cache.state.allocations.values())
    h.tick(10.0 + GRACE)
    assert kills(h) == [] and ended(h) == []


# ---------------------------------------------------------------------- the simulator's application masters

GiB = 1024


def small_trace(contract: bool = True) -> tuple[SchedulerConfig, list[f.Feed]]:
    """Two 64 GiB nodes; b borrows all with 4 GiB containers (b1 with a contract if asked, b2 not),
    then a asks for four 16 GiB containers."""
    raw = {
        "partitions": [
            {
                "name": "default",
                "preemption": {"policy": "sniper", "interval": 1.0, "grace": 10.0, "total_preemption_per_round": 1.0},
                "queues": [
                    {
                        "name": "root",
                        "queues": [
                            queue("a", guaranteed={"memory": 64 * GiB, "vcore": 16_000}),
                            queue("b", guaranteed={"memory": 64 * GiB, "vcore": 16_000}),
                        ],
                    }
                ],
            }
        ]
    }
    events: list[f.Feed] = [f.NodeAdded(node=f"n{i}", capacity={"memory": 64 * GiB, "vcore": 16_000}) for i in (1, 2)]
    for k, app in enumerate(["b2", "b1"]):  # b1 starts last: its containers are the cheapest victims
        events.append(f.AppAdded(t=1 + k, app=app, queue="root.b", preemption_contract=contract and app == "b1"))
        events.append(
            f.AskAdded(t=1 + k, app=app, ask="t", resource={"memory": 4 * GiB, "vcore": 1000}, count=16, duration=300)
        )
    events.append(f.AppAdded(t=20, app="a1", queue="root.a"))
    events.append(
        f.AskAdded(t=20, app="a1", ask="t", resource={"memory": 16 * GiB, "vcore": 1000}, count=4, duration=100)
    )
    return parse_config(raw), events


def simulate(contract: bool = True, am_response: float | None = None) -> SimulationResult:
    config, events = small_trace(contract)
    return run_simulation(events, config, SimulationSettings(until=120, am_response=am_response))


def test_the_stand_in_am_gives_back_its_newest_containers_at_half_the_grace() -> None:
    result = simulate()
    assert result.violations == 0, result.report["violations"]
    reqs = [x for x in result.decisions if isinstance(x, d.PreemptRequest)]
    assert reqs and all(x.app == "b1" for x in reqs)
    first = reqs[0]
    allocated = {x.allocation: x.t for x in result.decisions if isinstance(x, d.Allocated) and x.app == "b1"}
    released = [x for x in result.decisions if isinstance(x, d.Released) and x.app == "b1" and x.t < 300]
    at = first.t + (first.deadline - first.t) / 2
    given = [x.allocation for x in released if x.t == at]
    assert given, "the AM answered half way to the deadline"
    assert res.fits(first.resource, res.total(x.resource for x in released if x.t == at))
    running_then = sorted((t, int(a.split("-")[1]), a) for a, t in allocated.items() if t <= first.t)
    assert set(given) <= {a for _, _, a in running_then[-len(given) - 4 :]}, "the newest ones"
    ends = [x for x in result.decisions if isinstance(x, d.PreemptRequestEnded)]
    assert ends and all(x.outcome != "enforced" for x in ends)
    assert not any(isinstance(x, d.Kill) and x.app == "b1" for x in result.decisions)
    assert result.summary.retries > 0, "the given-back work is asked for again"
    assert result.summary.lost_work_seconds > 0
    by_cause = result.summary.lost_work_by_cause
    assert by_cause.get("preempt_request_given_back", 0) > 0 and "preempt_request_killed" not in by_cause
    assert abs(sum(by_cause.values()) - result.summary.lost_work_seconds) < 0.01
    log = result.summary.preemption_log
    assert {e.action for e in log} >= {"preempt_request"}
    actions = result.summary.actions
    assert actions["preempt_request"] == len(reqs) and actions["dereservation"] == 0
    assert actions["preempt"] == sum(1 for x in result.decisions if isinstance(x, d.Preempt))


def test_a_slow_am_is_killed_at_the_deadline_never_before() -> None:
    result = simulate(am_response=1000.0)
    assert result.violations == 0, result.report["violations"]
    reqs = {x.request: x for x in result.decisions if isinstance(x, d.PreemptRequest)}
    kills = [x for x in result.decisions if isinstance(x, d.Kill) and x.app == "b1"]
    assert kills and all(x.reason.startswith("preemption request") for x in kills)
    deadlines = sorted(x.deadline for x in reqs.values())
    assert all(k.t >= deadlines[0] for k in kills)
    assert any(e.action == "kill" for e in result.summary.preemption_log)
    assert result.summary.actions["kill"] >= len(kills)
    assert result.summary.lost_work_by_cause.get("preempt_request_killed", 0) > 0
    big = [x for x in result.decisions if isinstance(x, d.Allocated) and x.app == "a1"]
    assert len(big) == 4


def test_without_contracts_the_run_has_no_request() -> None:
    result = simulate(contract=False)
    assert not any(isinstance(x, d.PreemptRequest) for x in result.decisions)
    assert result.summary.actions["preempt_request"] == 0
    assert {e.action for e in result.summary.preemption_log} == {"preempt"}


# ---------------------------------------------------------------------- property

SHAPES = {
    "memory-heavy": {"memory": 16 * GiB, "vcore": 500},
    "vcore-heavy": {"memory": 2 * GiB, "vcore": 4000},
    "gpu": {"memory": 8 * GiB, "vcore": 1000, "gpu": 1},
    "small": {"memory": 4 * GiB, "vcore": 1000},
}
NODE = {"memory": 64 * GiB, "vcore": 16_000, "gpu": 4}


@st.composite
def contract_traces(draw: st.DrawFn) -> tuple[SchedulerConfig, list[f.Feed], tuple[float | None, float], str]:
    n_nodes = draw(st.integers(2, 3))
    half = {k: v * n_nodes // 2 for k, v in NODE.items()}
    raw = {
        "partitions": [
            {
                "name": "default",
                "preemption": {
                    "policy": "sniper",
                    "interval": 1.0,
                    "grace": 10.0,
                    "total_preemption_per_round": draw(st.sampled_from([0.2, 1.0])),
                    "reservation_timeout": 30.0,
                },
                "queues": [{"name": "root", "queues": [queue("a", guaranteed=half), queue("b", guaranteed=half)]}],
            }
        ]
    }
    events: list[f.Feed] = [f.NodeAdded(node=f"n{i}", capacity=NODE) for i in range(n_nodes)]
    for k in range(draw(st.integers(1, 3))):
        app = f"b{k}"
        events.append(f.AppAdded(t=k, app=app, queue="root.b", preemption_contract=draw(st.booleans())))
        events.append(
            f.AskAdded(
                t=k,
                app=app,
                ask="t",
                resource=SHAPES[draw(st.sampled_from(sorted(SHAPES)))],
                count=draw(st.integers(4, 16 * n_nodes)),
                duration=float(draw(st.integers(60, 200))),
            )
        )
    for j in range(draw(st.integers(1, 3))):
        t = float(draw(st.integers(5, 40)))
        app = f"a{j}"
        events.append(f.AppAdded(t=t, app=app, queue="root.a", preemption_contract=draw(st.booleans())))
        events.append(
            f.AskAdded(
                t=t,
                app=app,
                ask="t",
                resource=SHAPES[draw(st.sampled_from(sorted(SHAPES)))],
                count=draw(st.integers(1, 8)),
                duration=float(draw(st.integers(20, 100))),
            )
        )
        if draw(st.integers(0, 3)) == 0:
            events.append(f.AskRemoved(t=t + draw(st.integers(1, 15)), app=app, ask="t"))
    if draw(st.booleans()):
        events.append(f.NodeRemoved(t=float(draw(st.integers(10, 60))), node="n0"))
    events.sort(key=lambda e: e.t)
    am_response = draw(st.sampled_from([None, 0.0, 3.0, 100.0]))
    am_release_gap = draw(st.sampled_from([0.0, 1.0, 2.5]))  # an answer at once, or one container at a time
    policy = draw(st.sampled_from(["sniper", "proportional"]))
    return parse_config(raw), events, (am_response, am_release_gap), policy


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(trace=contract_traces())
def test_random_contract_apps_break_no_invariant_and_are_never_killed_early(
    trace: tuple[SchedulerConfig, list[f.Feed], tuple[float | None, float], str],
) -> None:
    config, events, (am_response, am_release_gap), policy = trace
    settings = SimulationSettings(until=100, am_response=am_response, am_release_gap=am_release_gap, policy=policy)
    result = run_simulation(events, config, settings)
    assert result.violations == 0, result.report["violations"]  # invariant 9 included
    assert consistency_problems(result.runtimes["default"].cache_core.state) == []  # room held in pieces included
    contract_apps = {e.app for e in events if isinstance(e, f.AppAdded) and e.preemption_contract}
    for x in result.decisions:
        if isinstance(x, d.Preempt) and not x.observe_only:
            assert x.app not in contract_apps or x.opportunistic, "a contract app gets requests, not notices"
        if isinstance(x, d.Kill) and x.app in contract_apps:
            assert x.reason.startswith("preemption request"), x.reason
    requests = {x.request: x for x in result.decisions if isinstance(x, d.PreemptRequest)}
    for end in (x for x in result.decisions if isinstance(x, d.PreemptRequestEnded)):
        req = requests[end.request]
        if end.outcome == "enforced":
            assert end.t >= req.deadline


def test_skipping_idle_time_decides_what_ticking_every_second_decides_with_contracts() -> None:
    config, events = small_trace()
    runs = [
        run_simulation(events, config, SimulationSettings(until=120, skip_idle=skip, am_response=5.0))
        for skip in (False, True)
    ]
    ticking, skipping = ([msgspec.json.encode(x) for x in r.decisions] for r in runs)
    assert skipping == ticking
    assert any(isinstance(x, d.PreemptRequestEnded) for x in runs[1].decisions)
