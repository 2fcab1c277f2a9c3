"""Preemption requests to apps under a contract that also opted out, beside intra-queue preemption: a
request may close "given back" only once every beneficiary it named was served or still holds its room
(architecture: invariant 9). Here a request closes while a later request to the same app names some of
its containers again: those containers stay under the later request's notice and its reservations keep
their room, whatever changes mid-grace (the asker leaves, the node is lost, another resource shape, a
higher-priority ask of the giver, a gang asker), under sniper and the proportional baseline."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sniper.core.config import SchedulerConfig, parse_config
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.run import SimulationResult, SimulationSettings, run_simulation
from tests.contract_support import assert_clean, ended, mixed_starving, requests
from tests.preemption_support import GRACE

GUARANTEE = {"memory": "96Gi", "vcore": "24"}
SMALL = {"memory": 4096, "vcore": 500}
JOB = {"memory": 8192, "vcore": 1000}
POLICIES = ["sniper", "proportional"]


def trace(
    *, job: dict[str, int] | None = None, gang_min: int = 0, extra: tuple[f.Feed, ...] = ()
) -> tuple[SchedulerConfig, list[f.Feed]]:
    """batch's contract apps b0 and b1 (opted out of preemption) fill three nodes; j2 (priority 5, in
    batch: intra-queue preemption) and then prod's j0 and j1 ask for room. ``job``: j2's container,
    ``gang_min``: its gang, ``extra``: events played beside."""
    raw = {
        "partitions": [
            {
                "name": "default",
                "preemption": {
                    "policy": "sniper",
                    "interval": 1.0,
                    "total_preemption_per_round": 0.1,
                    "grace": 10.0,
                    "mask_ttl": 30.0,
                    "min_missed_opportunities": 1,
                    "intra_queue": True,
                    "reservation_timeout": 30.0,
                },
                "queues": [
                    {
                        "name": "root",
                        "queues": [
                            {"name": "batch", "resources": {"guaranteed": GUARANTEE}},
                            {"name": "prod", "resources": {"guaranteed": GUARANTEE}},
                        ],
                    }
                ],
            }
        ]
    }
    node = {"memory": 65536, "vcore": 16000}
    events: list[f.Feed] = [f.NodeAdded(node=f"n{i}", capacity=node, t=0.0) for i in range(3)]
    for app, count in (("b0", 15), ("b1", 21)):
        events.append(f.AppAdded(app=app, queue="root.batch", preemption_contract=True, allow_preemption=False))
        events.append(f.AskAdded(app=app, ask="task", resource=SMALL, count=count, duration=60.0))
    events.append(f.AppAdded(app="j2", queue="root.batch", t=6.0))
    events.append(
        f.AskAdded(
            app="j2",
            ask="task",
            resource=job or JOB,
            count=5,
            priority=5,
            duration=26.0,
            gang_min=gang_min,
            t=6.0,
        )
    )
    for app, t in (("j0", 21.0), ("j1", 27.0)):
        events.append(f.AppAdded(app=app, queue="root.prod", t=t))
        events.append(
            f.AskAdded(app=app, ask="task", resource={"memory": 16384, "vcore": 1000}, count=2, duration=20.0, t=t)
        )
    events.extend(extra)
    events.sort(key=lambda e: e.t)
    return parse_config(raw), events


def simulate(policy: str, **changes: object) -> SimulationResult:
    config, events = trace(**changes)  # type: ignore[arg-type]
    return run_simulation(events, config, SimulationSettings(until=150.0, policy=policy))


def closed_under_a_later_request(decisions: list[d.DecisionMsg]) -> list[tuple[str, str, set[str]]]:
    """``(request, later request, containers both name)`` for each request that closed while a later
    open request to the same app named some of its containers again."""
    open_requests: dict[str, d.PreemptRequest] = {}
    found = []
    for x in decisions:
        if isinstance(x, d.PreemptRequest) and not x.observe_only:
            open_requests[x.request] = x
        elif isinstance(x, d.PreemptRequestEnded):
            ending = open_requests.pop(x.request, None)
            if ending is None:
                continue
            mine = {c.allocation for c in ending.containers}
            for later in open_requests.values():
                both = mine & {c.allocation for c in later.containers}
                if later.app == ending.app and later.seq > ending.seq and both:
                    found.append((ending.request, later.request, both))
    return found


def reservations_of(result: SimulationResult, request: str) -> set[str]:
    return {
        c.reservation
        for x in result.decisions
        if isinstance(x, d.PreemptRequest) and x.request == request
        for c in x.containers
        if c.reservation
    }


def test_a_request_closes_given_back_only_once_the_beneficiaries_it_named_are_served() -> None:
    result = simulate("sniper")
    assert [v["reason"] for v in result.report["violations"]] == []


def test_a_closing_request_leaves_the_containers_a_later_request_named_again_under_that_notice() -> None:
    result = simulate("sniper")
    overlaps = closed_under_a_later_request(result.decisions)
    assert overlaps, "the scenario must close a request while a later one names its containers again"
    placed = {x.reservation for x in result.decisions if isinstance(x, d.Allocated) and x.reservation}
    kept = {x.reservation for x in result.decisions if isinstance(x, d.ReservationEnded) and x.code == "victims_kept"}
    for first, later, both in overlaps:
        cancelled_by_first = {
            x.allocation
            for x in result.decisions
            if isinstance(x, d.PreemptCancelled) and x.reason.startswith(f"preemption request {first}:")
        }
        assert not cancelled_by_first & both, (first, later)
        # the later request's reservations were placed, none ended for victims the first one kept
        assert reservations_of(result, later) <= placed
        assert not reservations_of(result, later) & kept


def test_the_room_the_giver_gives_back_goes_to_the_beneficiaries_before_its_own_asks() -> None:
    """Each reservation a request to b0 named is placed (none ends), before b0's own asks take room on
    its node."""
    result = simulate("sniper")
    requested = {
        c.reservation: c.node
        for x in result.decisions
        if isinstance(x, d.PreemptRequest) and x.app == "b0"
        for c in x.containers
        if c.reservation
    }
    placed_at = {
        x.reservation: x.seq for x in result.decisions if isinstance(x, d.Allocated) and x.reservation in requested
    }
    assert requested and set(requested) <= set(placed_at)
    for rid, node in requested.items():
        first_own = [
            x.seq
            for x in result.decisions
            if isinstance(x, d.Allocated) and x.app == "b0" and x.node == node and x.t > 30.0
        ]
        assert not first_own or min(first_own) > placed_at[rid], rid


MID_GRACE: dict[str, Callable[[], dict[str, object]]] = {
    "the asker leaves": lambda: {"extra": (f.AppRemoved(app="j2", t=36.0),)},
    "the node is lost": lambda: {"extra": (f.NodeRemoved(node="n0", t=36.0),)},
    "a core-heavy shape": lambda: {"job": {"memory": 4096, "vcore": 3000}},
    "a memory-heavy shape": lambda: {"job": {"memory": 12288, "vcore": 500}},
    "the giver asks higher": lambda: {
        "extra": (f.AskAdded(app="b0", ask="urgent", resource=SMALL, count=6, priority=9, duration=30.0, t=34.0),)
    },
    "a gang asker": lambda: {"gang_min": 3},
}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("case", sorted(MID_GRACE))
def test_no_request_closes_given_back_with_a_named_beneficiary_left_waiting(case: str, policy: str) -> None:
    result = simulate(policy, **MID_GRACE[case]())
    assert [v["reason"] for v in result.report["violations"]] == []
    asked = [x for x in result.decisions if isinstance(x, d.PreemptRequest) and x.app in ("b0", "b1")]
    ends = {x.request for x in result.decisions if isinstance(x, d.PreemptRequestEnded)}
    assert asked, "the contract apps must be asked to give back"
    assert {x.request for x in asked if x.deadline <= 140.0} <= ends


def test_the_room_given_back_stays_the_reservations_after_the_request_closes_while_it_waits_for_others() -> None:
    """b1 (contract) and b2 (none) share n1 and n2; a1's 100 needs a whole node. b1's AM gives back
    what it was asked for and asks for it again at once, at a higher priority than a1's: the request
    closes given back while the reservation still waits for b2's victims, and the room b1 gave back
    stays the reservation's until a1 is placed there; b1's asks wait."""
    h = mixed_starving()
    h.preempt_round(10.0)
    [req] = requests(h)
    [node] = {c.node for c in req.containers}
    rid = req.containers[0].reservation
    h.tick(14.0)
    h.release(*(c.allocation for c in req.containers))
    h.ask("b1", "again", 25, count=2, priority=9)
    h.tick(15.0)
    h.starve(3)
    assert [x.outcome for x in ended(h)] == ["given_back"]
    assert rid in h.cache.state.reservations
    assert not [x for x in h.allocated() if x.app == "b1" and x.ask == "again"]
    h.tick(10.0 + GRACE)
    h.release(*h.kills())
    assert [(x.app, x.node, x.reservation) for x in h.allocated() if x.ask in ("whole", "again")] == [("a1", node, rid)]
    assert_clean(h)
