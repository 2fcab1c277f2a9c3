"""Observability of a core process: the Prometheus endpoint of an in-process core, and structured logs."""

from __future__ import annotations

import json
import logging
import urllib.request

import anyio
import pytest

from sniper.cluster.core import CoreOptions, CoreProcess
from sniper.cluster.obs import CoreMetrics, StructuredFormatter
from sniper.messages import decisions as d
from sniper.transport.bus import DECISIONS, FEED
from sniper.transport.kafka import KafkaBus, KafkaSettings
from tests.test_core_process import Decisions, workload


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


@pytest.mark.kafka
async def test_the_metrics_endpoint_of_a_core(kafka_settings: KafkaSettings) -> None:
    with anyio.fail_after(60):
        async with KafkaBus(kafka_settings) as bus:
            reader = Decisions(await bus.subscribe_ready(DECISIONS, group=bus.settings.prefix + "reader"))
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader.pump)
                process = CoreProcess(kafka_settings, CoreOptions(group="obs", tick=0.1))
                metrics = CoreMetrics(process)
                port = metrics.serve(0, addr="127.0.0.1")
                try:
                    await tg.start(process.run)
                    for event in workload("p1", 3):
                        await bus.publish(FEED, "p1", event)
                    await reader.until(lambda _: len(reader.of(d.Allocated)) == 3)
                    text = await anyio.to_thread.run_sync(scrape, port)
                finally:
                    metrics.close()
                tg.cancel_scope.cancel()
    lines = set(text.splitlines())
    assert 'sniper_allocations_total{partition="p1"} 3.0' in lines
    assert 'sniper_queue_usage{partition="p1",queue="root.a",resource="memory"} 12.0' in lines
    assert 'sniper_queue_guaranteed{partition="p1",queue="root.a",resource="memory"} 64.0' in lines
    assert "sniper_partitions_hosted 1.0" in lines
    for name in (
        "sniper_queue_pending",
        "sniper_preemptions_total",
        "sniper_proposals_rejected_total",
        "sniper_consumer_lag",
        'sniper_inbox_depth{actor="cache",partition="p1"}',
        "sniper_dead_letters_total",
    ):
        assert name in text, name


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord("sniper.actors", logging.WARNING, __file__, 1, "view gap after seq %d", (7,), None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_structured_logs_carry_partition_and_actor() -> None:
    line = StructuredFormatter("kv").format(_record(partition="p1", actor="allocator"))
    assert "partition=p1" in line and "actor=allocator" in line and 'msg="view gap after seq 7"' in line
    parsed = json.loads(StructuredFormatter("json").format(_record(partition="p 2", actor="cache")))
    assert parsed["partition"] == "p 2" and parsed["actor"] == "cache" and parsed["level"] == "warning"
