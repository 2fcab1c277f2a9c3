"""``sniper simulate --transport kafka``: the simulator's run through the broker gives the memory run's report."""

from __future__ import annotations

import pytest

from sniper.simulator.kafka_run import run_simulation_kafka
from sniper.simulator.run import SimulationSettings, run_simulation
from sniper.simulator.scenarios import scenario

pytestmark = pytest.mark.kafka


def test_the_kafka_run_reports_like_the_memory_run(kafka_bootstrap: str) -> None:
    sc = scenario("large_containers", 0)
    settings = SimulationSettings(until=60.0)
    on_kafka = run_simulation_kafka(sc.events, sc.config, settings, bootstrap=kafka_bootstrap)
    in_memory = run_simulation(sc.events, sc.config, settings)
    assert set(in_memory.report) == set(on_kafka.report)  # one driver, one report
    assert in_memory.report["transport"] == "memory" and in_memory.report["topic_prefix"] is None
    assert on_kafka.report["transport"] == "kafka" and on_kafka.report["topic_prefix"].startswith("sniper-sim.")
    assert on_kafka.report["invariant_violations"] == 0
    assert on_kafka.report["allocations"] > 0
    # Every actor link crossed the broker, yet virtual time and quiescence keep the run deterministic.
    assert on_kafka.report["allocations"] == in_memory.report["allocations"]
    assert on_kafka.report["preemptions"] == in_memory.report["preemptions"]
