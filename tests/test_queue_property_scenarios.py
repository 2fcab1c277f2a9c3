"""The bundled scenarios of the queue properties, each run beside the same trace without its property
(:meth:`sniper.simulator.scenarios.Scenario.without_property`, what ``sniper compare NAME`` adds): the
property's effect shows, the independent checker finds nothing, and jumping over settled time decides
what ticking every second decides (the baseline's wake-up when a young container comes of age). And
two of the properties as ``sniper check-config`` reads them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sniper.cli import app
from sniper.messages import decisions as d
from sniper.simulator.run import SimulationResult, SimulationSettings, run_simulation
from sniper.simulator.scenarios import Scenario, scenario

MINIMUM = 120.0  # batch's preemption.min.runtime in the min_runtime scenario
STOPPED_AT = 200.0  # when the stopped_queue scenario stops root.legacy
CONTENDED_AT = 3700.0  # when both users of the fair_share scenario ask at once, an hour after hank's night
HALVED_AT = 300.0  # when the quota scenario halves root.services' max
QUOTA_DELAY = 120.0  # services' quota.preemption.delay in the quota scenario


def run(sc: Scenario, policy: str, *, skip_idle: bool = True) -> SimulationResult:
    result = run_simulation(sc.events, sc.config, SimulationSettings(policy=policy, skip_idle=skip_idle))
    assert result.report["invariant_violations"] == 0, result.report["violations"]
    return result


def ages(result: SimulationResult) -> list[float]:
    """Each guaranteed victim's running time at its notice, recounted from the decisions."""
    started = {x.allocation: x.t for x in result.decisions if isinstance(x, d.Allocated)}
    return [x.t - started[x.allocation] for x in result.decisions if isinstance(x, d.Preempt) and not x.opportunistic]


@pytest.mark.parametrize("policy", ["sniper", "proportional"])
def test_the_min_runtime_scenario_takes_no_young_victim_where_without_it_they_go_first(policy: str) -> None:
    sc = scenario("min_runtime")
    assert sc.shows == "preemption.min.runtime"
    with_it, without = run(sc, policy), run(sc.without_property(), policy)
    assert ages(with_it) and min(ages(with_it)) >= MINIMUM
    assert with_it.report["youngest_victim_seconds"] == round(min(ages(with_it)), 3)
    assert min(ages(without)) < 10  # the cheapest victims by running time had just started
    assert with_it.report["pending_at_end"] == 0  # prod was served by victims of age


@pytest.mark.parametrize("policy", ["sniper", "proportional"])
def test_the_min_runtime_scenario_decides_the_same_jumping_over_settled_time_as_ticking(policy: str) -> None:
    sc = scenario("min_runtime")
    jumped, ticked = run(sc, policy), run(sc, policy, skip_idle=False)
    assert jumped.decisions == ticked.decisions


def test_the_stopped_queue_scenario_refuses_legacys_new_apps_and_lets_its_running_ones_finish() -> None:
    sc = scenario("stopped_queue")
    assert sc.shows == "queue.state"
    with_it, without = run(sc, "sniper"), run(sc.without_property(), "sniper")
    refused = [x for x in with_it.decisions if isinstance(x, d.Rejected) and x.code == "queue_stopped"]
    assert refused and all(x.t >= STOPPED_AT and x.app.startswith("legacy-") for x in refused)
    assert not [x for x in without.decisions if isinstance(x, d.Rejected)]
    legacy = [x for x in with_it.decisions if isinstance(x, d.Allocated) and x.queue == "root.legacy"]
    assert [x for x in legacy if x.t > STOPPED_AT]  # the apps it runs are still served once it stopped
    assert with_it.report["pending_at_end"] == 0


def first_allocations(result: SimulationResult) -> dict[str, float]:
    """Each app's first allocation time."""
    first: dict[str, float] = {}
    for x in result.decisions:
        if isinstance(x, d.Allocated):
            first.setdefault(x.app, x.t)
    return first


@pytest.mark.parametrize("policy", ["sniper", "none"])
def test_the_fair_share_scenario_serves_the_light_user_first_and_by_submission_without_the_half_life(
    policy: str,
) -> None:
    sc = scenario("fair_share")
    assert sc.shows == "fairshare.halflife"
    with_it, without = first_allocations(run(sc, policy)), first_allocations(run(sc.without_property(), policy))
    assert with_it["lou-day"] == CONTENDED_AT < with_it["hank-day"]  # hank waits for lou's containers
    assert without["hank-day"] == CONTENDED_AT < without["lou-day"]  # submitted first, hank is served first
    assert with_it["hank-day"] - CONTENDED_AT > 300 and without["lou-day"] - CONTENDED_AT > 300


def test_the_fair_share_scenarios_report_shows_whom_each_configuration_kept_waiting() -> None:
    sc = scenario("fair_share")
    with_it = run(sc, "sniper").report["first_allocation_wait"]
    without = run(sc.without_property(), "sniper").report["first_allocation_wait"]
    assert with_it["lou"]["max"] == 0 and with_it["hank"]["max"] > 300
    assert without["hank"]["max"] == 0 and without["lou"]["max"] > 300
    assert with_it["lou"]["apps"] == with_it["hank"]["apps"] == 2


def test_the_fair_share_scenario_decides_the_same_jumping_over_its_quiet_hour_as_ticking() -> None:
    sc = scenario("fair_share")
    jumped, ticked = run(sc, "sniper"), run(sc, "sniper", skip_idle=False)
    assert jumped.decisions == ticked.decisions


def test_the_quota_scenario_preempts_services_only_with_its_quota_delay() -> None:
    sc = scenario("quota")
    assert sc.shows == "quota.preemption.delay"
    with_it, without = run(sc, "sniper"), run(sc.without_property(), "sniper")
    victims = [x for x in with_it.decisions if isinstance(x, d.Preempt)]
    assert victims and all(x.policy == "quota" and x.t >= HALVED_AT + QUOTA_DELAY for x in victims)
    assert with_it.report["lost_work_by_cause"].get("quota", 0) > 0
    assert not [x for x in without.decisions if isinstance(x, d.Preempt)]
    assert "quota" not in without.report["lost_work_by_cause"]


def test_compare_of_a_scenario_that_shows_a_property_adds_each_policy_without_it(tmp_path: Path) -> None:
    report = tmp_path / "compare.json"
    args = ["compare", "stopped_queue", "--policies", "sniper", "--until", "300", "--markdown", "--report", str(report)]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "| metric | sniper | sniper without queue.state |" in result.output
    rejected = next(line for line in result.output.splitlines() if line.startswith("| rejected |"))
    assert rejected.split("|")[2].strip() != "0" and rejected.split("|")[3].strip() == "0"
    assert report.exists()


def test_check_config_names_the_minimum_runtime_and_the_stopped_queues_and_refuses_a_bad_state(
    tmp_path: Path,
) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text(
        "partitions:\n  - queues:\n"
        "      - {name: batch, properties: {preemption.min.runtime: 10m}}\n"
        "      - {name: legacy, properties: {queue.state: stopped}}\n"
    )
    result = CliRunner().invoke(app, ["check-config", str(path)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "batch: guaranteed none; no max; sort fifo; priority 0; preemption default, victims after 600 s of run" in (
        result.output
    )
    assert "legacy: guaranteed none; no max; sort fifo; priority 0; preemption default; stopped (no new app)" in (
        result.output
    )
    path.write_text("partitions:\n  - queues:\n      - {name: legacy, properties: {queue.state: STOPPED}}\n")
    refused = CliRunner().invoke(app, ["check-config", str(path)])
    assert refused.exit_code == 2
    assert "queue.state: 'STOPPED' is not one of running, stopped" in refused.output
