"""SLO reservations (YARN's ReservationSystem): the greedy planner of core.slo_plan, the cache's answers to
``reservation_submitted``, apps that name a reservation, the dynamic reservation queues and their
guarantees, and a restart that keeps the accepted plans."""

from __future__ import annotations

from typing import Any

import pytest

from sniper.core import slo_plan
from sniper.core.cache import Cache
from sniper.core.config import ConfigError, parse_partition
from sniper.core.recovery import DurableCache, replay, restore, take_snapshot
from sniper.core.slo_plan import Interval, Request, SloReservation, Stage, place
from sniper.core.units import human_resource
from sniper.messages import decisions as d
from sniper.messages import feed as f
from tests.core_support import Harness, fingerprint

GiB = 1024
C = {"memory": GiB, "vcore": 1000}  # one container
SHARE = {"memory": 60 * GiB, "vcore": 60_000}


def _partition(prod: dict[str, Any] | None = None) -> dict[str, Any]:
    prod = prod or {"name": "prod", "reservable": True, "resources": {"guaranteed": {"memory": "60Gi", "vcore": "60"}}}
    batch = {"name": "batch", "resources": {"guaranteed": {"memory": "40Gi", "vcore": "40"}}}
    return {"name": "default", "queues": [{"name": "root", "queues": [prod, batch]}]}


def _cache() -> Cache:
    cache = Cache("default")
    cache.handle_event(f.PartitionConfigEvent(config=_partition()))
    cache.handle_event(f.NodeAdded(node="n1", capacity={"memory": 100 * GiB, "vcore": 100_000}))
    cache.drain()
    return cache


def _submit(name: str, *, queue: str = "root.prod", arrival: float = 0, deadline: float = 100, **stage: Any) -> f.Feed:
    recurrence = stage.pop("recurrence", None)
    stage.setdefault("resource", C)
    stage.setdefault("duration", 50)
    return f.ReservationSubmitted(
        reservation=name,
        queue=queue,
        arrival=arrival,
        deadline=deadline,
        stages=[f.ReservationStage(**stage)],
        recurrence=recurrence,
    )


def _answer(cache: Cache, event: f.Feed) -> d.DecisionMsg:
    cache.handle_event(event)
    decisions = cache.drain().decisions
    assert len(decisions) == 1, decisions
    return decisions[0]


# ---------------------------------------------------------------------------------------------- the planner


def _request(name: str, *stages: Stage, arrival: float = 0, deadline: float = 100, period: float = 0) -> Request:
    return Request(name, "root.prod", arrival, deadline, stages, period)


def test_a_stage_is_placed_as_late_as_its_deadline_allows() -> None:
    plan = place(_request("r", Stage(C, 10, 0, 30)), SHARE, [], now=0)
    assert isinstance(plan, SloReservation)
    assert plan.intervals == (Interval(70, 100, {"memory": 10 * GiB, "vcore": 10_000}),)


def test_stages_run_in_order_each_ending_before_the_next_starts() -> None:
    plan = place(_request("r", Stage(C, 4, 0, 20), Stage(C, 2, 0, 30)), SHARE, [], now=0)
    assert isinstance(plan, SloReservation)
    assert [(iv.start, iv.end) for iv in plan.intervals] == [(50, 70), (70, 100)]


def test_a_stage_too_big_for_one_slot_spreads_back_over_earlier_slots() -> None:
    plan = place(_request("r", Stage(C, 100, 0, 50)), SHARE, [], now=0)
    assert isinstance(plan, SloReservation)
    assert [(iv.start, iv.end, iv.resource["vcore"]) for iv in plan.intervals] == [(0, 50, 40_000), (50, 100, 60_000)]


def test_a_constraint_inside_a_slot_moves_the_next_slot_back_only_to_it() -> None:
    # 50 of the 60 are taken over [80, 100): the last slot holds 10; the next one ends at 80, not at 50,
    # so the rest runs as late as the share allows (YARN's greedy right-to-left rule).
    taken = SloReservation("x", "root.prod", 0, 100, (Interval(80, 100, {"memory": 50 * GiB, "vcore": 50_000}),))
    plan = place(_request("r", Stage(C, 30, 0, 50)), SHARE, [taken], now=0)
    assert isinstance(plan, SloReservation)
    assert [(iv.start, iv.end, iv.resource["vcore"]) for iv in plan.intervals] == [(30, 80, 20_000), (50, 100, 10_000)]
    assert slo_plan._peak([taken, plan], 0, 100)["vcore"] <= SHARE["vcore"]


def test_overlapping_reservations_over_the_queue_share_are_rejected_with_what_would_fit() -> None:
    first = place(_request("a", Stage(C, 40, 0, 50)), SHARE, [], now=0)
    assert isinstance(first, SloReservation)
    why = place(_request("b", Stage(C, 100, 0, 50)), SHARE, [first], now=0)
    assert isinstance(why, str)
    assert "80 of its containers could be placed" in why
    # What fits beside it is placed around it: the share is never exceeded at any instant.
    second = place(_request("b", Stage(C, 80, 0, 50)), SHARE, [first], now=0)
    assert isinstance(second, SloReservation)
    for t in (0, 25, 49.9, 50, 75, 99.9):
        total = slo_plan._peak([first, second], t, t + 1e-6)
        assert total.get("vcore", 0) <= SHARE["vcore"], t


def test_a_gang_is_placed_whole_in_one_slot_and_a_gang_larger_than_the_share_is_rejected() -> None:
    # Slot [50, 100) has room for 25 containers beside an accepted 35: gangs of 10 take 20 there, the rest
    # (two gangs of 10 and the last, smaller gang of 5) earlier.
    taken = SloReservation("x", "root.prod", 0, 100, (Interval(50, 100, {"memory": 35 * GiB, "vcore": 35_000}),))
    plan = place(_request("g", Stage(C, 45, 10, 50)), SHARE, [taken], now=0)
    assert isinstance(plan, SloReservation)
    counts = sorted((iv.start, iv.resource["vcore"] // 1000) for iv in plan.intervals)
    assert counts == [(0, 25), (50, 20)]
    why = place(_request("big", Stage(C, 70, 61, 50)), SHARE, [], now=0)
    assert isinstance(why, str) and "a gang of 61" in why


def test_a_recurring_reservation_holds_its_plan_in_every_period() -> None:
    daily = place(_request("daily", Stage(C, 60, 0, 600), arrival=3600, deadline=7200, period=86_400), SHARE, [], 0)
    assert isinstance(daily, SloReservation)
    assert daily.load_at(6700)["vcore"] == 60_000
    assert daily.load_at(86_400 * 3 + 6700)["vcore"] == 60_000
    assert daily.load_at(86_400 * 3 + 5000) == {}
    # A one-off reservation on the third day's occurrence no longer fits; on a free hour it does.
    clash = place(
        _request("once", Stage(C, 1, 0, 600), arrival=3 * 86_400 + 6600, deadline=3 * 86_400 + 7200), SHARE, [daily], 0
    )
    assert isinstance(clash, str)
    free = place(
        _request("once", Stage(C, 1, 0, 600), arrival=3 * 86_400, deadline=3 * 86_400 + 3600), SHARE, [daily], 0
    )
    assert isinstance(free, SloReservation)
    # A recurring one is planned around a one-off far in the future: on day 10 it leaves that one its room.
    late = SloReservation(
        "late", "root.prod", 0, 10**6, (Interval(10 * 86_400 + 6600, 10 * 86_400 + 7200, {"vcore": 1000}),)
    )
    d2 = place(_request("d2", Stage(C, 60, 0, 600), arrival=3600, deadline=7200, period=86_400), SHARE, [late], 0)
    assert isinstance(d2, SloReservation)
    assert d2.load_at(10 * 86_400 + 6700)["vcore"] == 59_000
    assert d2.load_at(11 * 86_400 + 6700)["vcore"] == 59_000  # the plan is the same in every period


@pytest.mark.parametrize(
    ("request_", "now", "words"),
    [
        (_request("r", Stage(C, 1, 0, 10), deadline=50), 60, "not after the current time"),
        (_request("r", Stage(C, 1, 0, 10), arrival=80, deadline=50), 0, "not after arrival"),
        (_request("r", Stage(C, 1, 0, 10), arrival=0, deadline=7200, period=3600), 0, "longer than its recurrence"),
        (_request("r", Stage(C, 1, 0, 10), arrival=0, deadline=60, period=7000), 0, "does not divide"),
        (_request("r", Stage(C, 1, 0, 200)), 0, "does not fit"),
        (_request("r", Stage({"gpu": 1}, 1, 0, 10)), 0, "larger than the queue's share"),
    ],
)
def test_requests_that_cannot_be_planned_are_rejected_with_the_reason(
    request_: Request, now: float, words: str
) -> None:
    why = place(request_, SHARE, [], now)
    assert isinstance(why, str) and words in why


def test_the_cost_of_planning_one_request_is_bounded() -> None:
    why = place(_request("r", Stage(C, 10**7, 0, 1.0), deadline=10**6), SHARE, [], now=0)
    assert isinstance(why, str) and f"more than {slo_plan.MAX_SLOTS} slots" in why


def test_a_partition_holds_a_bounded_number_of_reservations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slo_plan, "MAX_RESERVATIONS", 2)
    cache = _cache()
    for name in ("a", "b"):
        assert isinstance(_answer(cache, _submit(name)), d.ReservationAccepted)
    third = _answer(cache, _submit("c"))
    assert isinstance(third, d.ReservationRejected) and "the most it takes" in third.reason


def test_the_planner_is_deterministic() -> None:
    accepted = [SloReservation("x", "root.prod", 0, 100, (Interval(20, 60, {"memory": 30 * GiB, "vcore": 30_000}),))]
    req = _request("r", Stage(C, 50, 5, 20), Stage({"memory": 2 * GiB, "vcore": 1000}, 7, 0, 10))
    assert place(req, SHARE, accepted, 0) == place(req, SHARE, accepted, 0)


# ---------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "raw",
    [
        {"name": "root", "reservable": True, "queues": [{"name": "a"}]},
        {"name": "root", "queues": [{"name": "p", "reservable": True, "queues": [{"name": "a"}]}]},
        {"name": "root", "queues": [{"name": "p", "reservable": True}]},
    ],
    ids=["root", "parent", "no guarantee"],
)
def test_only_a_leaf_with_a_guarantee_may_be_reservable(raw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="reservable"):
        parse_partition({"name": "default", "queues": [raw]})


def test_a_config_change_may_not_take_reservable_away_from_a_queue_holding_reservations() -> None:
    cache = _cache()
    assert isinstance(_answer(cache, _submit("r1", count=10)), d.ReservationAccepted)
    plain = _partition({"name": "prod", "resources": {"guaranteed": {"memory": "60Gi", "vcore": "60"}}})
    rejected = _answer(cache, f.PartitionConfigEvent(config=plain))
    assert isinstance(rejected, d.Rejected) and "must stay reservable" in rejected.reason


def test_a_config_change_may_not_shrink_a_reservable_queue_below_its_accepted_plans() -> None:
    cache = _cache()
    assert isinstance(_answer(cache, _submit("r1", count=40)), d.ReservationAccepted)
    smaller = {"name": "prod", "reservable": True, "resources": {"guaranteed": {"memory": "30Gi", "vcore": "30"}}}
    rejected = _answer(cache, f.PartitionConfigEvent(config=_partition(smaller)))
    assert isinstance(rejected, d.Rejected) and "cannot shrink below its plans" in rejected.reason
    enough = {"name": "prod", "reservable": True, "resources": {"guaranteed": {"memory": "40Gi", "vcore": "40"}}}
    cache.handle_event(f.PartitionConfigEvent(config=_partition(enough)))
    assert cache.drain().decisions == []
    assert cache.state.queues["root.prod"].guaranteed == {"memory": 40 * GiB, "vcore": 40_000}


# ---------------------------------------------------------------------------------------------- the cache


def test_an_accepted_reservation_names_its_plan_and_its_queue() -> None:
    cache = _cache()
    accepted = _answer(cache, _submit("r1", count=10, duration=30))
    assert isinstance(accepted, d.ReservationAccepted)
    assert accepted.reservation_queue == "root.prod.r1"
    assert [(i.start, i.end, i.resource) for i in accepted.intervals] == [
        (70, 100, {"memory": 10 * GiB, "vcore": 10_000})
    ]
    assert "root.prod.r1" in cache.state.queues and "root.prod.default" in cache.state.queues


@pytest.mark.parametrize(
    ("event", "words"),
    [
        (_submit("r", queue="root.batch"), "queue root.batch is not reservable"),
        (_submit("r", queue="root.nope"), "root.nope is an unknown queue"),
        (_submit("default"), "names the queue"),
        (_submit("a.b"), "letters, digits"),
        (_submit("r", count=200), "does not fit"),
    ],
    ids=["not reservable", "unknown queue", "name default", "dotted name", "over the share"],
)
def test_a_reservation_that_cannot_be_accepted_is_rejected_with_the_reason(event: f.Feed, words: str) -> None:
    cache = _cache()
    answer = _answer(cache, event)
    assert isinstance(answer, d.ReservationRejected)
    assert words in answer.reason
    assert not cache.state.slo_reservations


def test_a_reservation_over_the_share_says_the_share_in_human_units_and_gives_it_as_numbers() -> None:
    cache = _cache()
    answer = _answer(cache, _submit("r", count=200))
    assert isinstance(answer, d.ReservationRejected)
    share = answer.share
    assert share and all(isinstance(v, int) for v in share.values())
    assert f"the share of the queue ({human_resource(share)})" in answer.reason and "=" not in answer.reason
    refused_early = _answer(cache, _submit("s", queue="root.nope"))
    assert isinstance(refused_early, d.ReservationRejected) and refused_early.share == {}


def test_a_deadline_in_the_past_is_rejected() -> None:
    cache = _cache()
    cache.tick(500)
    cache.drain()
    answer = _answer(cache, _submit("late", arrival=0, deadline=400))
    assert isinstance(answer, d.ReservationRejected) and "not after the current time" in answer.reason


def test_a_name_already_accepted_is_rejected_and_a_redelivered_event_changes_nothing() -> None:
    cache = _cache()
    event = f.ReservationSubmitted(
        id="e1",
        reservation="r1",
        queue="root.prod",
        arrival=0,
        deadline=100,
        stages=[f.ReservationStage(resource=C, duration=10)],
    )
    assert isinstance(_answer(cache, event), d.ReservationAccepted)
    cache.handle_event(event)
    assert cache.drain().decisions == []
    again = _answer(cache, _submit("r1"))
    assert isinstance(again, d.ReservationRejected) and "already accepted" in again.reason


def test_apps_run_in_their_reservation_queue_or_in_default_and_a_bad_reservation_is_rejected() -> None:
    cache = _cache()
    _answer(cache, _submit("r1", count=10))
    for app, reservation in (("a1", "r1"), ("a2", None)):
        cache.handle_event(f.AppAdded(app=app, queue="root.prod", reservation=reservation))
    assert cache.state.apps["a1"].queue.path == "root.prod.r1"
    assert cache.state.apps["a2"].queue.path == "root.prod.default"
    unknown = _answer(cache, f.AppAdded(app="a3", queue="root.prod", reservation="zz"))
    assert isinstance(unknown, d.Rejected) and "reservation zz is unknown" in unknown.reason
    other = _answer(cache, f.AppAdded(app="a4", queue="root.batch", reservation="r1"))
    assert isinstance(other, d.Rejected) and "is in queue root.prod, not root.batch" in other.reason
    assert unknown.code == other.code == "unknown_reservation"
    assert "a3" not in cache.state.apps and "a4" not in cache.state.apps
    # An app added again under its submitted queue is the same app, not a conflict.
    cache.drain()
    cache.handle_event(f.AppAdded(app="a1", queue="root.prod", reservation="r1"))
    assert cache.drain().decisions == []


def test_the_reservation_queue_is_guaranteed_its_plan_only_during_its_intervals() -> None:
    cache = _cache()
    _answer(cache, _submit("r1", count=10, duration=30))
    _answer(cache, _submit("r2", count=5, duration=20, arrival=0, deadline=50))
    queues = cache.state.queues
    assert queues["root.prod.r1"].guaranteed == {}
    cache.tick(35)
    assert cache.state.queues["root.prod.r2"].guaranteed == {"memory": 5 * GiB, "vcore": 5000}
    assert cache.state.queues["root.prod.r1"].guaranteed == {}
    cache.tick(75)
    assert cache.state.queues["root.prod.r1"].guaranteed == {"memory": 10 * GiB, "vcore": 10_000}
    assert "root.prod.r2" not in cache.state.queues  # over, and no app ran against it: retired
    assert cache.state.queues["root.prod"].guaranteed == SHARE  # the queue's own guarantee is unchanged


def test_a_reservation_that_is_over_is_dropped_once_no_app_runs_against_it() -> None:
    cache = _cache()
    _answer(cache, _submit("r1", count=1))
    _answer(cache, _submit("r2", count=1))
    cache.handle_event(f.AppAdded(app="a1", queue="root.prod", reservation="r1"))
    cache.tick(150)
    assert set(cache.state.slo_reservations) == {"r1"}  # r2 had no app: gone with its queue
    assert "root.prod.r2" not in cache.state.queues
    cache.handle_event(f.AppRemoved(app="a1"))
    cache.tick(151)
    assert not cache.state.slo_reservations and "root.prod.r1" not in cache.state.queues


def test_a_recurring_reservation_stays() -> None:
    cache = _cache()
    _answer(cache, _submit("daily", count=10, recurrence=3600))
    cache.tick(3 * 3600 + 75)
    assert "daily" in cache.state.slo_reservations
    assert cache.state.queues["root.prod.daily"].guaranteed == {"memory": 10 * GiB, "vcore": 10_000}


# ---------------------------------------------------------------------------------------------- recovery


def test_replaying_the_feed_and_the_log_rebuilds_the_plans_without_deciding_anything() -> None:
    old = DurableCache("default")
    feed: list[tuple[int, f.Feed]] = [
        (0, f.PartitionConfigEvent(config=_partition())),
        (1, f.NodeAdded(node="n1", capacity={"memory": 100 * GiB, "vcore": 100_000})),
        (2, _submit("r1", count=40)),
        (3, _submit("r2", count=100)),
        (4, f.AppAdded(app="a1", queue="root.prod", reservation="r1")),
    ]
    log: list[d.DecisionMsg] = []
    for offset, event in feed:
        old.feed_offset = offset
        old.handle_event(event)
        log.extend(old.drain().decisions)
    assert [type(x) for x in log] == [d.ReservationAccepted, d.ReservationRejected]
    new = restore(take_snapshot(DurableCache("default")))
    result = replay(new, feed, log)
    assert result.fresh == [] and result.divergences == []
    assert new.state.slo_reservations == old.state.slo_reservations
    assert new.state.apps["a1"].queue.path == "root.prod.r1"


def test_a_restored_core_keeps_the_plans_and_decides_as_the_old_one() -> None:
    old = DurableCache("default")
    old.handle_event(f.PartitionConfigEvent(config=_partition()))
    old.handle_event(f.NodeAdded(node="n1", capacity={"memory": 100 * GiB, "vcore": 100_000}))
    old.handle_event(_submit("r1", count=40))
    old.handle_event(f.AppAdded(app="a1", queue="root.prod", reservation="r1"))
    old.tick(60)
    old.drain()
    new = restore(take_snapshot(old))
    assert new.state.slo_reservations == old.state.slo_reservations
    assert {q: x.guaranteed for q, x in new.state.queues.items()} == {
        q: x.guaranteed for q, x in old.state.queues.items()
    }
    assert new.state.apps["a1"].queue.path == "root.prod.r1"
    for event in (
        _submit("r2", count=100),
        _submit("r3", count=20),
        f.AppAdded(app="a2", queue="root.prod", reservation="r3"),
    ):
        old.handle_event(event)
        new.handle_event(event)
        mine, theirs = old.drain().decisions, new.drain().decisions
        assert [type(x) for x in mine] == [type(x) for x in theirs]
        assert [getattr(x, "reason", getattr(x, "intervals", None)) for x in mine] == [
            getattr(x, "reason", getattr(x, "intervals", None)) for x in theirs
        ]


def test_room_in_flight_stays_counted_when_a_plan_boundary_rebuilds_the_queues() -> None:
    h = Harness(parse_partition(_partition()))
    h.feed(f.NodeAdded(node="n1", capacity={"memory": 100 * GiB, "vcore": 100_000}))
    h.feed(_submit("r1", count=10, duration=30))  # planned [70, 100)
    h.feed(f.AppAdded(app="a1", queue="root.prod", reservation="r1"))
    h.feed(f.AskAdded(app="a1", ask="k", resource=C, count=2))
    assert h.propose() is not None
    held = {"memory": 2 * GiB, "vcore": 2000}
    assert h.allocator.state.queues["root.prod.r1"].allocating == held
    h.tick(75)  # the boundary: the replica builds its queues anew, r1 now guaranteed its plan
    queues = h.allocator.state.queues
    assert queues["root.prod.r1"].guaranteed == {"memory": 10 * GiB, "vcore": 10_000}
    assert queues["root.prod.r1"].allocating == held and queues["root"].allocating == held
    assert h.deliver().accepted == 2
    h.settle()
    assert not any(h.allocator.state.queues["root"].allocating.values())
    assert fingerprint(h.allocator.state) == fingerprint(h.cache.state)


def test_retiring_the_partition_drops_its_reservations_and_their_queues() -> None:
    cache = _cache()
    _answer(cache, _submit("r1", count=10))
    cache.handle_event(f.AppAdded(app="a1", queue="root.prod", reservation="r1"))
    cache.handle_event(f.PartitionRemoved(reason="new trace"))
    cache.drain()
    assert not cache.state.slo_reservations and cache.state.config is None
    cache.handle_event(f.PartitionConfigEvent(config=_partition()))
    assert isinstance(_answer(cache, _submit("r1", count=10)), d.ReservationAccepted)
