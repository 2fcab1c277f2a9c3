"""core.units: amounts for people in human units, for machines in base units, one module for both."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sniper.core.resources import parse_quantity
from sniper.core.units import (
    base_unit,
    each_in_base_units,
    from_base_units,
    human,
    human_resource,
    in_base_units,
    named,
)


@pytest.mark.parametrize(
    ("resource", "text"),
    [
        ({"memory": 320 * 1024, "vcore": 80_000}, "320 GiB, 80 cores"),
        ({"vcore": 1500, "memory": 1536, "gpu": 2}, "1.5 GiB, 1.5 cores, 2 GPUs"),
        ({"memory": 2 * 2**20, "vcore": 250, "gpu": 1}, "2 TiB, 0.25 cores, 1 GPU"),
        ({"memory": 512, "vcore": 1000}, "512 MiB, 1 core"),
        ({"memory": 1048576}, "1 TiB"),  # status printed memory=1048576
        ({"memory": 3 * 2**30}, "3 PiB"),
        ({"vcores": 2, "memory": 1000}, "1000 MiB, vcores 2"),  # a misspelt name stays visible
        ({"memory": 0, "nvidia.com/gpu": 4}, "nvidia.com/gpu 4"),  # zero entries are left out
        ({"memory": 1024, "gpu-milli": 1460}, "1 GiB, 1.46 GPUs"),  # milli-GPUs read as GPUs
        ({"gpu-milli": 8000, "vcore": 2000}, "2 cores, 8 GPUs"),
        ({}, "none"),
    ],
)
def test_human_resource_speaks_units(resource: dict[str, int], text: str) -> None:
    assert human_resource(resource) == text


def test_nothing_reads_as_asked() -> None:
    assert human_resource(None) == "-"
    assert human_resource({}, empty="0") == "0"


def test_memory_keeps_two_decimals_at_most() -> None:
    assert human("memory", 1025) == "1 GiB"  # 1.0009... GiB
    assert human("memory", 15258) == "14.9 GiB"
    assert human("vcore", 1) == "0.001 cores"


@given(st.integers(0, 2**50), st.sampled_from(["memory", "vcore", "gpu"]))
def test_base_units_are_what_a_yunikorn_quantity_in_base_units_parses_to(amount: int, name: str) -> None:
    """Bytes and cores written back as a bare YuniKorn quantity give Sniper's amount again."""
    value = in_base_units(name, amount)
    assert parse_quantity(name, round(value) if name != "vcore" else f"{amount}m") == amount
    assert base_unit(name) == {"memory": "bytes", "vcore": "cores", "gpu": "count"}[name]


def test_milli_gpus_read_as_gpus_and_a_count_of_gpus_stays_a_count() -> None:
    assert [human("gpu-milli", m) for m in (1460, 1000, 460, 1, 0)] == [
        "1.46 GPUs",
        "1 GPU",
        "0.46 GPUs",
        "0.001 GPUs",
        "0 GPUs",
    ]
    assert [human("gpu", n) for n in (1460, 1, 0)] == ["1460 GPUs", "1 GPU", "0 GPUs"]  # whole GPUs, no factor
    assert (base_unit("gpu-milli"), in_base_units("gpu-milli", 1460)) == ("GPUs", 1.46)
    assert (base_unit("gpu"), in_base_units("gpu", 1460)) == ("count", 1460.0)


@given(st.integers(0, 2**50))
def test_milli_gpus_go_to_gpus_and_back_exactly(amount: int) -> None:
    assert from_base_units("gpu-milli", in_base_units("gpu-milli", amount)) == amount
    assert parse_quantity("gpu-milli", amount) == amount  # configs write milli-GPUs as the count they are


def test_each_in_base_units() -> None:
    assert sorted(each_in_base_units({"memory": 2, "vcore": 1500, "gpu": 3})) == [
        ("gpu", "count", 3.0),
        ("memory", "bytes", 2.0 * 2**20),
        ("vcore", "cores", 1.5),
    ]


def test_the_compare_table_shows_preempted_amounts_in_human_units_and_shares_in_percent() -> None:
    from sniper.simulator.compare import PolicyRun, table_rows
    from sniper.simulator.metrics import Preemptions
    from sniper.simulator.report import Report

    def run(memory: int, vcore: int, gpu: int, utilization: float) -> PolicyRun:
        resources = {"memory": memory, "vcore": vcore, "gpu": gpu, "gpu-milli": 1460 * gpu // 4}
        preempted = Preemptions(victims=3, resources=resources)
        report = Report(policy="x", preemptions=preempted, utilization={"memory": utilization})
        return PolicyRun(report, {}, [])

    rows = {row[0]: row[1:] for row in table_rows({"a": run(240 * 1024, 60_000, 4, 0.8125), "b": run(0, 0, 0, 1.0)})}
    assert rows["preempted memory"] == ["240 GiB", "0 MiB"]
    assert rows["preempted vcore"] == ["60 cores", "0 cores"]
    assert rows["preempted gpu"] == ["4 GPUs", "0 GPUs"]
    assert rows["preempted gpu-milli"] == ["1.46 GPUs", "0 GPUs"]
    assert rows["utilization memory"] == ["81.2%", "100%"]


def test_ephemeral_storage_is_bytes_in_binary_units_and_a_named_amount_says_its_resource() -> None:
    assert [human("ephemeral-storage", b) for b in (100 * 2**30, 1536 * 2**20, 512)] == [
        "ephemeral-storage 100 GiB",
        "ephemeral-storage 1.5 GiB",
        "ephemeral-storage 512 bytes",
    ]
    assert [named(n, a) for n, a in (("memory", 4096), ("vcore", 500), ("pods", 3))] == [
        "memory 4 GiB",
        "vcore 0.5 cores",
        "pods 3",
    ]
    assert named("ephemeral-storage", 2**40) == "ephemeral-storage 1 TiB"
