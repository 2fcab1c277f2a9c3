"""The whole-path benchmark of ``sniper k8s`` (``python -m tests.k8s_bench``) run small, so it keeps working:
every pod it creates is bound through the real processes, and its figures come out."""

from __future__ import annotations

import math

import pytest

from tests.k8s_bench import TimedApiServer, measure

pytestmark = pytest.mark.kafka


async def test_the_k8s_benchmark_binds_every_pod_through_the_shim_and_the_core(kafka_bootstrap: str) -> None:
    api = TimedApiServer()
    result = await measure(600, 60, bootstrap=kafka_bootstrap, limit=120, api=api)
    assert result["pods"] == 60
    assert result["pods_per_s"] > 0
    assert 0 < result["p50_ms"] <= result["p99_ms"]
    assert all(not math.isnan(v) and v >= 0 for v in result["cpu_seconds"].values())
    pages = [s for s in api.served(verb="list", resource="nodes") if s.code == 200]
    assert [s.query.get("continue") for s in pages] == [None, "500"], "600 nodes listed in pages of 500"
