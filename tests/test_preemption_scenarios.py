"""The issue's done-when, on the bundled scenarios through the real actors in virtual time (until 400 s):
sniper gets the large-container loop's containers running with no wasted preemption where YARN's proportional
policy loops; business priority is never inverted; AM containers are not victims; no policy ever breaks
an invariant. Each scenario is simulated once per module (the runs are the slow part).
"""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from sniper.cli import app
from sniper.core.config import parse_config
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.compare import compare
from sniper.simulator.run import SimulationResult, SimulationSettings, run_simulation
from sniper.simulator.scenarios import scenario
from tests.core_support import queue
from tests.preemption_support import preemption_raw

UNTIL = 400.0


def run(name: str, policies: list[str]) -> dict[str, SimulationResult]:
    sc = scenario(name)
    return compare(sc.events, sc.config, policies, SimulationSettings(until=UNTIL))


@pytest.fixture(scope="module")
def large_containers() -> dict[str, SimulationResult]:
    return run("large_containers", ["sniper", "proportional", "none"])


@pytest.fixture(scope="module")
def priority_queues() -> dict[str, SimulationResult]:
    return run("priority_queues", ["sniper", "proportional"])


@pytest.fixture(scope="module")
def am_heavy() -> dict[str, SimulationResult]:
    return run("am_heavy", ["sniper"])


def preempt_decisions(result: SimulationResult) -> list[d.Preempt]:
    return [x for x in result.decisions if isinstance(x, d.Preempt) and not x.observe_only]


# ---------------------------------------------------------------------- large containers


def test_sniper_gets_every_large_container_running_without_waste(large_containers: dict[str, Any]) -> None:
    result = large_containers["sniper"]
    report = result.report
    big = [x for x in result.decisions if isinstance(x, d.Allocated) and x.app == "a-big"]
    assert len(big) == 4, "all four 60 GiB containers started"
    assert all(x.reservation for x in big), "each on the room reserved for it"
    assert len({x.node for x in big}) == 4
    assert report["preemptions"]["victims"] > 0
    assert report["wasted_preemptions"] == 0
    assert report["ping_pong"] == 0
    ttg = report["time_to_guarantee"]["root.a"]
    assert ttg["unmet"] == 0 and ttg["max"] is not None and ttg["max"] < 60
    # every victim was preempted for a-big, from root.b, on the node where a-big then started
    nodes = {x.node for x in big}
    for x in preempt_decisions(result):
        assert (x.for_app, x.for_queue, x.queue) == ("a-big", "root.a", "root.b")
        assert x.node in nodes and x.reservation


def test_proportional_preempts_in_vain_on_large_containers(large_containers: dict[str, Any]) -> None:
    report = large_containers["proportional"].report
    assert report["wasted_preemptions"] > 0
    assert report["ping_pong"] > 0
    assert report["time_to_guarantee"]["root.a"]["unmet"] == 1
    assert report["wasted_preemptions"] > 10 * max(1, large_containers["sniper"].report["preemptions"]["victims"])


def test_no_policy_violates_an_invariant(large_containers: dict[str, Any], priority_queues: dict[str, Any]) -> None:
    for runs in (large_containers, priority_queues):
        for policy, result in runs.items():
            assert result.report["invariant_violations"] == 0, (policy, result.report["violations"])
            assert result.violations == 0
    assert large_containers["none"].report["preemptions"]["victims"] == 0


# ---------------------------------------------------------------------- business priority


def test_no_queue_is_preempted_for_a_lower_priority_one(priority_queues: dict[str, Any]) -> None:
    priority = {"root.high": 10, "root.mid": 5, "root.low": 0}
    result = priority_queues["sniper"]
    log = result.report["preemption_log"]
    assert log, "sniper preempted for high and mid"
    for entry in log:
        assert priority[entry["victim_queue"]] <= priority[entry["beneficiary_queue"]], entry
        assert entry["victim_queue"] != entry["beneficiary_queue"]
    assert {e["beneficiary_queue"] for e in log} <= {"root.high", "root.mid"}
    assert "root.low" not in {e["beneficiary_queue"] for e in log}
    # low's late demand takes nothing back from high or mid
    assert all(e["victim_queue"] == "root.low" for e in log)
    for path in ("root.high", "root.mid"):
        assert result.report["time_to_guarantee"][path]["unmet"] == 0
    assert result.report["wasted_preemptions"] == 0


def test_the_baseline_never_preempts_the_top_queue(priority_queues: dict[str, Any]) -> None:
    log = priority_queues["proportional"].report["preemption_log"]
    assert log and all(e["beneficiary_queue"] == "" for e in log)
    assert "root.high" not in {e["victim_queue"] for e in log}


# ---------------------------------------------------------------------- application masters


def test_sniper_preempts_no_am_container(am_heavy: dict[str, Any]) -> None:
    result = am_heavy["sniper"]
    ams = {x.allocation for x in result.decisions if isinstance(x, d.Allocated) and x.am}
    victims = {x.allocation for x in preempt_decisions(result)}
    assert ams and victims, "the scenario has AMs and sniper preempted"
    assert not ams & victims
    report = result.report
    assert report["invariant_violations"] == 0 and report["wasted_preemptions"] == 0
    assert report["time_to_guarantee"]["root.a"]["unmet"] == 0


# ---------------------------------------------------------------------- the command line


def test_sniper_compare_prints_a_table() -> None:
    result = CliRunner().invoke(app, ["compare", "fence", "--until", "60", "--policies", "sniper,none", "--markdown"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if line.startswith("|")]
    assert lines[0] == "| metric | sniper | none |"
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in lines[2:]}
    for metric in ("allocations", "preempted containers", "wasted preemptions", "invariant violations"):
        assert metric in rows and len(rows[metric]) == 2
    assert rows["invariant violations"] == ["0", "0"]
    assert rows["preempted containers"][1] == "0"
    assert int(rows["preempted containers"][0]) > 0  # team.y preempts team.x inside the fence by 60 s


# ---------------------------------------------------------------------- a capped middle parent


def test_under_a_capped_parent_every_victims_room_reaches_its_beneficiary_without_waiting_for_a_timeout() -> None:
    # root.p (max 500) over leaves x (guarantee 200) and y (300); root.q.z beside it. y borrows p's
    # whole max, z the rest of the 8 nodes; x then asks for its guarantee. The round's budget (80)
    # spreads the 20 victims over three rounds: the first rounds' reservations are fulfilled as their
    # victims leave, not held back under p's max by the later rounds' victims.
    raw = preemption_raw(
        queue(
            "p",
            queue("x", guaranteed={"memory": 200}),
            queue("y", guaranteed={"memory": 300}),
            maximum={"memory": 500},
        ),
        queue("q", queue("z", guaranteed={"memory": 200})),
        total_preemption_per_round=0.1,
    )
    events: list[f.Feed] = [f.NodeAdded(t=0, node=f"n{i}", capacity={"memory": 100}) for i in range(8)]
    for t, name, leaf, count in ((0, "y1", "root.p.y", 50), (1, "z1", "root.q.z", 30), (30, "x1", "root.p.x", 30)):
        events.append(f.AppAdded(t=t, app=name, queue=leaf))
        events.append(f.AskAdded(t=t, app=name, ask="w", resource={"memory": 10}, count=count, duration=2000))
    result = run_simulation(events, parse_config({"partitions": [raw]}), SimulationSettings(until=400, policy="sniper"))
    report = result.report
    assert report["invariant_violations"] == 0, report["violations"]
    assert report["preemptions"]["victims"] == 20
    assert report["wasted_preemptions"] == 0
    ended = [x.reason for x in result.decisions if isinstance(x, d.ReservationEnded)]
    assert not [r for r in ended if "timed out" in r], ended
    ttg = report["time_to_guarantee"]["root.p.x"]
    assert ttg["unmet"] == 0 and ttg["max"] is not None and ttg["max"] <= 20  # the last round's victims' grace
