"""Event-driven virtual time: jumping over idle and settled time decides exactly what ticking every
second decides; traces stamped in epoch seconds run from 0; the player's clock rules."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sniper.bench.inprocess import gpu_workload
from sniper.core import resources as res
from sniper.messages import feed as f
from sniper.simulator.player import Player, last_round_before, relative, ticks_between
from sniper.simulator.run import SimulationResult, SimulationSettings, run_simulation
from sniper.simulator.scenarios import scenario
from tests.simulation_support import gappy_trace


def _decisions(result: SimulationResult) -> list[bytes]:
    return [msgspec.json.encode(x) for x in result.decisions]


@pytest.mark.parametrize("policy", ["sniper", "proportional", "none"])
def test_skipping_idle_time_decides_exactly_what_ticking_every_second_decides(policy: str) -> None:
    events = gappy_trace(policy)
    ticking = run_simulation(events, settings=SimulationSettings(skip_idle=False))
    skipping = run_simulation(events, settings=SimulationSettings(skip_idle=True))
    assert _decisions(skipping) == _decisions(ticking)
    assert skipping.summary.sim_seconds == ticking.summary.sim_seconds
    assert skipping.summary.utilization == ticking.summary.utilization
    assert skipping.summary.time_to_guarantee == ticking.summary.time_to_guarantee
    assert skipping.summary.lost_work_seconds == ticking.summary.lost_work_seconds
    assert skipping.violations == 0
    assert skipping.steps + 2000 < ticking.steps  # two idle gaps of more than 1,000 s each


def test_the_gappy_trace_has_contention_and_preemption_so_the_comparison_means_something() -> None:
    result = run_simulation(gappy_trace("proportional"))
    assert result.summary.preemptions.victims > 0
    assert result.summary.allocations >= 90


def test_settled_contention_is_skipped_and_still_decides_what_ticking_decides() -> None:
    events = gpu_workload(3, 200, 1500.0, mean_duration=300.0, max_duration=3000.0)
    ticking = run_simulation(events, settings=SimulationSettings(skip_idle=False))
    skipping = run_simulation(events, settings=SimulationSettings(skip_idle=True))
    assert _decisions(skipping) == _decisions(ticking)
    assert skipping.summary.preemptions.victims > 0
    assert skipping.steps < ticking.steps


def test_settled_contention_under_the_proportional_baseline_is_skipped_too() -> None:
    """Pending asks while YARN's baseline chooses no container on the view as it is: ticks change nothing
    (its rounds would choose none), so the driver jumps as for sniper and still decides the same. Node
    reservations are off here: while one lasts the driver steps every tick (its timeout), which would hide
    what this test measures; with them on, skipping deciding what ticking decides is tested above."""
    events = [
        msgspec.structs.replace(
            e, config={**e.config, "preemption": {"policy": "proportional"}, "reservation": {"enabled": False}}
        )
        if isinstance(e, f.PartitionConfigEvent)
        else e
        for e in gpu_workload(3, 200, 1500.0, mean_duration=300.0, max_duration=3000.0)
    ]
    ticking = run_simulation(events, settings=SimulationSettings(skip_idle=False))
    skipping = run_simulation(events, settings=SimulationSettings(skip_idle=True))
    assert _decisions(skipping) == _decisions(ticking)
    assert skipping.summary.preemptions.victims > 0
    # 5,425 ticks; 4,909 steps when only idle time was skipped, 3,141 with settled contention skipped
    assert skipping.steps < 4000 < ticking.steps


def test_a_trace_in_epoch_seconds_keeps_its_time_and_decides_as_one_from_zero() -> None:
    epoch = run_simulation(gappy_trace("proportional", start=1.7e9))
    zero = run_simulation(gappy_trace("proportional"))

    def what(result: SimulationResult) -> list[tuple[str, str, str]]:
        return [(type(x).__name__, getattr(x, "allocation", ""), getattr(x, "node", "")) for x in result.decisions]

    assert what(epoch) == what(zero)  # times differ only by the float rounding of 1.7e9 + t
    assert all(abs(a.t - 1.7e9 - b.t) < 1e-3 for a, b in zip(epoch.decisions, zero.decisions, strict=True))
    assert abs(epoch.summary.sim_seconds - zero.summary.sim_seconds) < 1e-3
    assert zero.summary.sim_seconds < 6000


def test_relative_times_keep_the_order_and_start_at_zero() -> None:
    events = [f.AppRemoved(t=1.7e9 + 5, app="x"), f.AppAdded(t=1.7e9, app="x", queue="root.a")]
    out = relative(events)
    assert [type(e) for e in out] == [f.AppAdded, f.AppRemoved]
    assert [e.t for e in out] == [0.0, 5.0]


def test_the_player_jumps_to_events_when_idle_and_ticks_when_active() -> None:
    trace = [f.AppAdded(t=0.0, app="x", queue="root.a"), f.AppRemoved(t=100.5, app="x")]
    player = Player(trace)
    assert player.next_step(active=False, waiting=False) == 0.0
    assert [type(e) for e in player.advance(0.0)] == [f.AppAdded]
    assert player.next_step(active=True, waiting=False) == 1.0
    assert player.next_step(active=False, waiting=False) == 100.5
    player.advance(100.5)
    assert player.next_tick == 101.0
    assert player.next_step(active=False, waiting=False) is None  # trace done, nothing waits


def test_the_player_stops_at_until_on_the_grid() -> None:
    player = Player([f.AppAdded(t=0.0, app="x", queue="root.a")], until=50.5)
    player.advance(player.next_step(active=False, waiting=False) or 0.0)
    assert player.next_step(active=False, waiting=False) == 50.0
    player.advance(50.0)
    assert player.next_step(active=True, waiting=True) is None


def test_the_player_ends_a_waiting_run_after_the_quiet_time_as_ticking_would() -> None:
    player = Player([f.AppAdded(t=0.0, app="x", queue="root.a")], quiet=60.0)
    player.advance(0.0)
    assert player.next_step(active=False, waiting=True) == 60.0
    player.advance(60.0)
    assert player.next_step(active=False, waiting=True) is None


@given(
    after=st.floats(0, 1000, allow_nan=False),
    gap=st.floats(0.001, 1000, allow_nan=False),
    next_round=st.floats(0, 2000, allow_nan=False),
    interval=st.sampled_from([1.0, 2.0, 3.0, 5.0]),
)
@settings(max_examples=300, deadline=None)
def test_grid_arithmetic_matches_stepping_tick_by_tick(
    after: float, gap: float, next_round: float, interval: float
) -> None:
    before = after + gap
    tick = 1.0
    grid = Player([], tick=tick)
    grid.advance(after)
    first_tick = grid.next_tick
    seen: list[float] = []
    nr, last = next_round, None
    while grid.next_tick < before:
        g = grid.next_tick
        grid.advance(g)
        seen.append(g)
        if g >= nr:
            last, nr = g, g + interval
    assert ticks_between(first_tick, before, tick) == len(seen)
    assert last_round_before(next_round, interval, first_tick, before, tick) == last


# sha256 (first 16 hex digits) of the bundled scenarios' encoded decisions, one per line. A speed-up must
# leave every decision byte-identical; a change of rule that moves one says which and why in its commit.
# Victims are costed at their kill (each victim's grace counted in ``preempt``'s ``cost`` and ``reason``);
# sniper's gang and opportunistic decisions follow the deadzone as a trigger. Kills carry their cause and
# reservation ends their code. Reasons say amounts in human units; the figures they quote are typed fields
# (``preempt``'s ``over_ideal``, ``rejected``'s ``resource`` and ``bound``, ``kill``'s ``missing``,
# ``reservation_rejected``'s ``share``).
DECISION_HASHES = {
    ("demo", "proportional"): "332ff08ab25513a9",
    ("random_mix", "proportional"): "e0b16c025149a73c",
    ("gang", "proportional"): "437766bacc04e310",
    ("opportunistic", "proportional"): "f7a8b4d300d94789",
    ("demo", "sniper"): "fba67174ca5d5fb2",
    ("random_mix", "sniper"): "5b14a929a63bfff3",
    ("gang", "sniper"): "715d46c1212b21fe",
    ("opportunistic", "sniper"): "4da1b5549b8cf6e4",
    ("user_limits", "sniper"): "6b34b6106d0d2125",
    ("priority_queues", "sniper"): "701219957b110690",
    ("budgets", "sniper"): "53713099f0fb75f2",
    ("budgets", "proportional"): "654d84f52bcd6807",
    ("constraints", "sniper"): "785617c59efe935f",
    ("constraints", "proportional"): "979b4d2b70533ad3",
    ("slo", "sniper"): "c773193423f6bfa0",
    ("topology", "sniper"): "b8dc6efcd086aeff",
}


def _digest(result: SimulationResult) -> str:
    return hashlib.sha256(b"".join(x + b"\n" for x in _decisions(result))).hexdigest()[:16]


@pytest.mark.parametrize(("name", "policy"), sorted(DECISION_HASHES))
def test_the_bundled_scenarios_decide_byte_for_byte_what_their_pins_record(name: str, policy: str) -> None:
    sc = scenario(name)
    result = run_simulation(sc.events, sc.config, SimulationSettings(policy=policy))
    assert _digest(result) == DECISION_HASHES[(name, policy)]


_DIGEST = """
import hashlib, sys, msgspec
from sniper.simulator.run import SimulationSettings, run_simulation
from sniper.simulator.scenarios import scenario
from tests.simulation_support import gappy_trace
for name in sys.argv[1:]:
    sc = scenario(name)
    result = run_simulation(sc.events, sc.config, SimulationSettings(policy="sniper"))
    print(name, hashlib.sha256(b"".join(msgspec.json.encode(x) + b"\\n" for x in result.decisions)).hexdigest())
"""


def test_sniper_decides_the_same_whatever_the_string_hash_seed() -> None:
    """Invariant 7 across processes: no set iteration (whose order follows PYTHONHASHSEED) reaches a decision."""
    digests = [
        subprocess.run(
            [sys.executable, "-c", _DIGEST, "demo", "user_limits", "fragmented"],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "3")
    ]
    assert digests[0].count("\n") == 3
    assert digests[0] == digests[1]


def test_resource_vectors_keep_their_names_in_insertion_order() -> None:
    a = {"vcore": 1, "memory": 2}
    b = {"gpu": 3, "memory": 1}
    assert list(res.component_min(a, b)) == ["vcore", "memory", "gpu"]
    assert list(res.component_max(b, a)) == ["gpu", "memory", "vcore"]
