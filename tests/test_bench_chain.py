"""``sniper bench chain``: the chain's decisions are the feed's (every ask allocated once on the node) and
every figure is there and not negative; the check it makes of itself finds what is wrong."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sniper.bench.chain import NODE, PARTITION, PHASES, Chain, bench_chain, problems, setup_events
from sniper.cli import app
from sniper.messages import decisions as d
from sniper.messages import feed as f


def _allocated(ask: str, node: str = NODE) -> d.Allocated:
    return d.Allocated(allocation=f"a-{ask}", app="app", ask=ask, queue="root.a", node=node, resource={"memory": 1})


@pytest.mark.parametrize("batch", [1, 5, 64])
def test_the_chain_allocates_every_ask_once_whatever_the_batch(batch: int) -> None:
    result = bench_chain(300, batch)
    assert result["problems"] == []
    assert result["allocated"] == result["decisions"] == 300
    assert result["cycles"] >= -(-300 // batch)
    for phase in PHASES:
        assert result[f"{phase}_us"] >= 0
    assert result["chain_us"] >= 0
    assert result["chain_us"] == pytest.approx(sum(result[f"{phase}_us"] for phase in PHASES), abs=0.05)


def test_the_command_prints_one_json_object_with_every_figure() -> None:
    out = CliRunner().invoke(app, ["bench", "chain", "--events", "200", "--batch", "5", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["bench"] == "chain" and data["events"] == 200 and data["batch"] == 5
    assert data["allocated"] == 200 and data["problems"] == []
    figures = [f"{phase}_us" for phase in PHASES] + ["chain_us", "cycles", "decisions"]
    assert all(isinstance(data[key], int | float) and data[key] >= 0 for key in figures)


def test_the_command_refuses_a_batch_of_nothing() -> None:
    out = CliRunner().invoke(app, ["bench", "chain", "--events", "10", "--batch", "0"])
    assert out.exit_code == 2


def test_the_check_finds_a_missing_a_doubled_a_stray_and_a_misplaced_allocation() -> None:
    decisions: list[d.DecisionMsg] = [
        _allocated("k0"),
        _allocated("k0"),
        _allocated("k9"),
        _allocated("k1", node="elsewhere"),
        d.Rejected(reason="no", ask="k2"),
    ]
    found = problems(decisions, 3)
    assert any("unexpected Allocated decision for ask 'k1'" in line for line in found)
    assert any("unexpected Rejected decision for ask 'k2'" in line for line in found)
    assert any(line.startswith("2 asks never allocated (e.g. k1)") for line in found)
    assert any(line.startswith("1 asks allocated more than once (e.g. k0)") for line in found)
    assert any(line.startswith("1 allocations of asks the feed never sent (e.g. k9)") for line in found)


def test_the_check_passes_every_ask_allocated_once_on_the_node() -> None:
    assert problems([_allocated(f"k{i}") for i in range(4)], 4) == []


def test_a_view_the_replica_cannot_apply_is_a_problem_of_the_chain() -> None:
    chain = Chain()
    chain.take(setup_events())
    chain.cache.view_seq += 1  # the next view skips one: the replica sees a gap
    chain.take([f.AskAdded(partition=PARTITION, app="app", ask="k0", resource={"memory": 1, "vcore": 1})])
    assert chain.gaps == ["the replica found a gap at view 3"]
