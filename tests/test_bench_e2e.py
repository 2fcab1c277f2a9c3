"""``sniper bench e2e`` on the embedded broker, its even spread of partitions, and the per-process CPU limit.

The bench run is small and asserts what it counted, never how fast: speed is the bench's own output.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sniper.bench.cpulimit import CpuLimit, CpuLimitUnavailable
from sniper.bench.e2e import bench_e2e, spread_partition_names
from sniper.transport.kafka import KafkaSettings, kafka_partition


@pytest.mark.parametrize(("count", "kafka_partitions"), [(8, 8), (12, 8), (3, 4), (16, 16)])
def test_partition_names_spread_round_robin_over_the_kafka_partitions(count: int, kafka_partitions: int) -> None:
    names = spread_partition_names(count, kafka_partitions)
    assert len(set(names)) == count
    assert [kafka_partition(name, kafka_partitions) for name in names] == [i % kafka_partitions for i in range(count)]


@pytest.mark.kafka
async def test_bench_e2e_times_every_event_and_runs_the_scale_out_pass(kafka_settings: KafkaSettings) -> None:
    result = await bench_e2e(kafka_settings, events=400, rate=0.0, partitions=4, cores=2, limit=240.0)
    single, multi = result["runs"]
    assert (single["cores"], multi["cores"]) == (1, 2)
    for run in (single, multi):
        assert run["events"] == 400
        assert 0 < run["p50_ms"] <= run["p99_ms"] <= run["max_ms"]
        assert run["events_per_s"] > 0
    assert len(single["core_cpu_s"]) == 1 and len(multi["core_cpu_s"]) == 2
    assert result["scale_out_ratio"] == round(multi["events_per_s"] / single["events_per_s"], 2)


def _cgroup_of(pid: int) -> str:
    return Path(f"/proc/{pid}/cgroup").read_text()


def test_a_cpu_limit_puts_the_process_in_its_own_capped_group_and_removes_it() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        with CpuLimit(0.25) as limit:
            try:
                limit.apply(child.pid)
            except CpuLimitUnavailable as err:
                pytest.skip(str(err))
            (group,) = limit._groups
            assert f"/{group.name}" in _cgroup_of(child.pid)
            quota = group / "cpu.max"
            if quota.exists():
                assert quota.read_text().split() == ["25000", "100000"]
            else:
                assert (group / "cpu.cfs_quota_us").read_text().strip() == "25000"
                assert (group / "cpu.cfs_period_us").read_text().strip() == "100000"
            child.kill()
            child.wait()
        assert not group.exists()
    finally:
        child.kill()
        child.wait()


def test_a_cpu_limit_rejects_a_nonsense_budget() -> None:
    with pytest.raises(ValueError, match=r"at least 0\.01"):
        CpuLimit(0.0)


def test_without_a_cgroup_cpu_controller_a_cpu_limit_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sniper.bench.cpulimit.CGROUP_ROOT", tmp_path)
    with CpuLimit(0.5) as limit, pytest.raises(CpuLimitUnavailable, match="no cgroup cpu controller"):
        limit.apply(1)
