"""Resource-based preemption (YARN-45's preemption contract): an app whose ``app_added`` says
``preemption_contract`` gets one ``preempt_request`` per round instead of notices; its application
master chooses what to release; what is still missing at the deadline is killed, newest first; a
request whose need vanished is withdrawn. Checked on the cache through the sans-IO harness, with the
independent model watching every decision (invariant 9: never killed before the deadline).
"""

from __future__ import annotations

import msgspec

from sniper.core import resources as res
from sniper.core.cache import state_changes
from sniper.core.recovery import DurableCacheCore, restore, take_snapshot
from sniper.core.state import PartitionState
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.messages.snapshot import snapshot_msgpack
from tests.core_support import consistency_problems
from tests.preemption_support import PARTITION, PreemptHarness, two_queues
from tests.test_recovery import Owner, _fp, _recover

GRACE = 15.0


def contract_harness(policy: str = "sniper", *, contract: bool = True, sizes: int = 25) -> PreemptHarness:
    """a (guarantee 150) and b (50) on n1, n2 (100 each); b's app b1 holds everything in containers of
    ``sizes`` started one second apart (n1's first); then a1 asks for one 50 container."""
    h = PreemptHarness(two_queues(150, 50, policy=policy))
    h.nodes("n1", "n2")
    h.feed(f.AppAdded(app="b1", queue="root.b", preemption_contract=contract))
    per_node = 100 // sizes
    h.fill("b1", "root.b", "n1", [sizes] * per_node)
    h.fill("b1", "root.b", "n2", [sizes] * per_node, start=per_node)
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    h.starve()
    return h


def requests(h: PreemptHarness) -> list[d.PreemptRequest]:
    return [x for x in h.decisions if isinstance(x, d.PreemptRequest)]


def ended(h: PreemptHarness) -> list[d.PreemptRequestEnded]:
    return [x for x in h.decisions if isinstance(x, d.PreemptRequestEnded)]


def kills(h: PreemptHarness) -> list[d.Kill]:
    return [x for x in h.decisions if isinstance(x, d.Kill)]


def newest(h: PreemptHarness, app: str, n: int) -> list[str]:
    """The ``n`` newest running containers of ``app`` (by start, then id)."""
    state = h.cache.state
    held = sorted(
        (state.allocations[a] for a in state.apps[app].allocations),
        key=lambda a: (a.start, int(a.id.split("-")[1])),
    )
    return [a.id for a in held[-n:]]


def assert_clean(h: PreemptHarness) -> None:
    assert h.model.violations == []
    assert consistency_problems(h.cache.state) == []


def test_a_contract_app_gets_one_request_instead_of_notices() -> None:
    h = contract_harness()
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
    h = contract_harness(contract=False)
    result = h.preempt_round(10.0)
    assert len(result.preempts()) == 2
    assert requests(h) == []


def test_am_releases_what_was_named_no_kill_and_the_beneficiary_runs_there() -> None:
    h = contract_harness()
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
    h = contract_harness()
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


def test_am_releases_part_newest_remaining_killed_at_the_deadline() -> None:
    h = contract_harness()
    h.preempt_round(10.0)
    [req] = requests(h)
    named = [c.allocation for c in req.containers]
    h.tick(12.0)
    h.release(named[0])  # gives back 25 of 50
    h.tick(10.0 + GRACE - 1)
    assert kills(h) == [], "never before the deadline"
    expected = newest(h, "b1", 1)
    h.tick(10.0 + GRACE)
    killed = kills(h)
    assert [k.allocation for k in killed] == expected, "the newest remaining container covers the 25 missing"
    assert "preq-" in killed[0].reason and "still missing" in killed[0].reason
    [end] = ended(h)
    assert end.outcome == "enforced" and end.released == {"memory": 25} and end.killed == {"memory": 25}
    assert_clean(h)


def test_am_releases_nothing_kill_exactly_covers_the_missing_part() -> None:
    h = contract_harness()
    h.preempt_round(10.0)
    expected = newest(h, "b1", 2)
    h.tick(10.0 + GRACE)
    assert sorted(k.allocation for k in kills(h)) == sorted(expected)
    [end] = ended(h)
    assert end.outcome == "enforced" and end.killed == {"memory": 50} and end.released == {}
    assert_clean(h)


def test_need_vanishes_request_withdrawn() -> None:
    h = contract_harness()
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
    h = contract_harness("proportional")
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
    h = contract_harness()
    h.preempt_round(10.0)
    h.tick(12.0)
    [req] = requests(h)
    h.release(req.containers[0].allocation)
    durable = DurableCacheCore(PARTITION)
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
    o = Owner()
    o.feed_event(
        f.NodeAdded(partition=PARTITION, id="n1", node="n1", capacity={"memory": 8}),
        f.NodeAdded(partition=PARTITION, id="n2", node="n2", capacity={"memory": 8}),
        f.AppAdded(partition=PARTITION, id="b1", app="b1", queue="root.b", preemption_contract=True),
        f.AskAdded(partition=PARTITION, id="b1k", app="b1", ask="k", resource={"memory": 4}, count=4),
    )
    o.settle()
    snap = take_snapshot(o.core)
    o.feed_event(
        f.AppAdded(partition=PARTITION, id="a1", app="a1", queue="root.a"),
        f.AskAdded(partition=PARTITION, id="a1k", app="a1", ask="k", resource={"memory": 8}, count=1),
    )
    o.settle()
    on_n1 = sorted(a.id for a in o.core.state.allocations.values() if a.node == "n1")
    o.propose(
        p.PreemptionProposal(
            partition=PARTITION,
            id="pp/1",
            view_seq=o.allocator.view_seq,
            policy="sniper",
            placements=[p.Victimized(app="a1", ask="k", node="n1", victims=on_n1)],
        )
    )
    assert [type(x) for x in o.log[-1:]] == [d.PreemptRequest]
    o.feed_event(f.AllocationReleased(partition=PARTITION, id="rel", allocation=on_n1[0]))
    # Recovered while the request is open: the same state, the request included.
    core, result = _recover(o, snap)
    assert result.divergences == [] and result.fresh == []
    assert _fp(core) == _fp(o.core)
    assert list(core.state.contracts) == list(o.core.state.contracts)
    assert core.state.contracts["preq-1"].released == {"memory": 4}
    # The deadline: the app's newest container covers what is missing, the request ends; a replay agrees.
    held = [o.core.state.allocations[a] for a in o.core.state.apps["b1"].allocations]
    newest_one = max(held, key=lambda a: (a.start, int(a.id.split("-")[1]))).id
    o.tick(100.0)
    assert [type(x) for x in o.log if isinstance(x, d.Kill | d.PreemptRequestEnded)] == [
        d.Kill,
        d.PreemptRequestEnded,
    ]
    core, result = _recover(o, snap)
    assert result.divergences == [] and result.fresh == []
    assert _fp(core) == _fp(o.core) and core.state.contracts == {}
    assert {a.id for a in core.state.allocations.values() if a.killed} == {newest_one}
