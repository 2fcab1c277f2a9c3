"""A partition that cannot be served says so: ``/healthz`` answers 503 naming it, the
``sniper_partition_failed`` gauge is 1, an ALERT line is logged, and its records are dead-lettered with
the reason instead of dropped; once it is restored all of it clears and the records are replayed."""

from __future__ import annotations

import dataclasses
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

import sniper.cluster.process
from sniper.cluster.obs import CoreMetrics
from sniper.cluster.process import CoreProcess
from sniper.core.recovery import DurableCache, ReplayResult, replay_in_slices
from sniper.core.slicing import Steps
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages.wire import encode
from sniper.transport.bus import DEADLETTER, DECISIONS, FEED
from sniper.transport.kafka import KafkaBus, KafkaSettings
from tests.core_process_support import WAIT, Decisions, options, workload


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return int(response.status), str(response.read().decode())
    except urllib.error.HTTPError as err:
        return int(err.code), str(err.read().decode())


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.alerts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("ALERT"):
            self.alerts.append(record.getMessage())


async def test_a_partition_that_cannot_be_restored_is_loud_and_its_records_are_dead_lettered(
    kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = {"p1"}
    real_replay = replay_in_slices

    def replay(core: DurableCache, feed: Sequence[tuple[int, f.Feed]], log: Sequence[d.DecisionMsg]) -> Any:
        if core.partition in broken:
            raise RuntimeError("replay broke")
        steps: Steps[ReplayResult] = real_replay(core, feed, log)
        return steps

    monkeypatch.setattr(sniper.cluster.process, "replay_in_slices", replay)
    lines = _Lines()
    logging.getLogger("sniper.core").addHandler(lines)
    try:
        with anyio.fail_after(WAIT):
            # JSON records: their dead letters carry them as written, not re-encoded.
            producing = dataclasses.replace(kafka_settings, feed_format="json")
            async with KafkaBus(producing) as bus, anyio.create_task_group() as tg:
                reader = Decisions(await bus.subscribe_ready(DECISIONS, group=bus.settings.prefix + "reader"))
                tg.start_soon(reader.pump)
                process = CoreProcess(kafka_settings, options())
                metrics = CoreMetrics(process)
                port = metrics.serve(0)
                try:
                    await tg.start(process.run)
                    assert await anyio.to_thread.run_sync(_get, port, "/healthz") == (
                        200,
                        json.dumps({"healthy": True, "failing": {}}),
                    )
                    events = workload("p1", 2)
                    await bus.publish_many(FEED, [(e.partition, e) for e in events])
                    await bus.publish_many(FEED, [(e.partition, e) for e in workload("p2", 1)])
                    await reader.until(lambda _: len(reader.of(d.Allocated, "p2")) == 1)  # others go on
                    letters = await bus.subscribe_ready(DEADLETTER, group=bus.settings.prefix + "letters")
                    seen = [await letters.receive() for _ in events]
                    await letters.aclose()
                    status, body = await anyio.to_thread.run_sync(_get, port, "/healthz")
                    metrics_text = await anyio.to_thread.run_sync(_get, port, "/metrics")
                    broken.clear()
                    late = f.AskAdded(partition="p1", id="late", app="app", ask="late", resource={"memory": 4})
                    await bus.publish(FEED, "p1", late)
                    await reader.until(lambda _: len(reader.of(d.Allocated, "p1")) == 3)  # replayed, then late
                    healed = await anyio.to_thread.run_sync(_get, port, "/healthz")
                    healed_metrics = await anyio.to_thread.run_sync(_get, port, "/metrics")
                finally:
                    metrics.close()
                tg.cancel_scope.cancel()
    finally:
        logging.getLogger("sniper.core").removeHandler(lines)
    assert status == 503
    failing = json.loads(body)["failing"]
    assert list(failing) == ["p1"] and "could not be restored: RuntimeError('replay broke')" in failing["p1"]
    assert 'sniper_partition_failed{partition="p1"} 1.0' in metrics_text[1].splitlines()
    assert all(x.key == "p1" and "partition 'p1' cannot be served" in x.reason for x in seen)
    assert len({x.offset for x in seen}) == len(events)  # each record once
    assert sorted(x.payload for x in seen) == sorted(encode(e, "json") for e in events)
    assert any(line.startswith("ALERT partition p1 could not be restored") for line in lines.alerts)
    assert healed == (200, json.dumps({"healthy": True, "failing": {}}))
    assert "sniper_partition_failed{" not in healed_metrics[1]
