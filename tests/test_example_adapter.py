"""The example adapter (examples/k8s_csv_adapter.py) drives a core on the embedded broker through librdkafka:
it completes a preemption (victims evicted, deleted at the kill and reported gone, the beneficiaries bound)
and keeps its place across a restart (nothing bound twice, the pods it bound before still known)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from sniper.cluster.process import CoreOptions, CoreProcess
from sniper.transport.kafka import KafkaSettings

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parent.parent
WAIT = 120.0

# prod is guaranteed half the cluster; batch may borrow it and gives it back within a 2 s grace.
QUEUES = """\
partitions:
  - name: default
    preemption: {policy: sniper, interval: 0.2, grace: 2.0, total_preemption_per_round: 1.0}
    queues:
      - name: root
        queues:
          - name: prod
            resources: {guaranteed: {memory: 16Gi, vcore: 8}}
          - name: batch
"""

BATCH = """\
kind,name,namespace,app,cpu,memory,gpu
node,node-1,,,8,16Gi,
node,node-2,,,8,16Gi,
pod,batch-0,batch,etl,4,8Gi,
pod,batch-1,batch,etl,4,8Gi,
pod,batch-2,batch,etl,4,8Gi,
pod,batch-3,batch,etl,4,8Gi,
pod,huge-0,batch,huge,64,1Ti,
"""

PROD = """\
pod,web-0,prod,web,4,8Gi,
pod,web-1,prod,web,4,8Gi,
"""


async def adapter(settings: KafkaSettings, tmp_path: Path, until_bound: int) -> list[dict[str, Any]]:
    """Run the adapter over the CSV until ``until_bound`` pods are bound; its actions."""
    command = [
        sys.executable,
        str(ROOT / "examples" / "k8s_csv_adapter.py"),
        *("--bootstrap", settings.bootstrap, "--prefix", settings.prefix),
        *("--kafka-partitions", str(settings.partitions), "--source", str(tmp_path / "pods.csv")),
        *("--queues", str(tmp_path / "queues.yaml"), "--state", str(tmp_path / "state.json")),
        *("--until-bound", str(until_bound), "--timeout", "60"),
    ]
    result = await anyio.run_process(command, check=False)
    assert result.returncode == 0, result.stderr.decode()
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


def of(actions: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [a for a in actions if a["action"] == kind]


async def test_the_example_adapter_completes_a_preemption_across_its_own_restart(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    (tmp_path / "queues.yaml").write_text(QUEUES)
    (tmp_path / "pods.csv").write_text(BATCH)
    process = CoreProcess(kafka_settings, CoreOptions(group="cores", tick=0.1, stop_timeout=3.0))
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            await tg.start(process.run)
            await process.ready.wait()
            first = await adapter(kafka_settings, tmp_path, until_bound=4)
            with (tmp_path / "pods.csv").open("a") as csv:
                csv.write(PROD)  # prod pods arrive while the adapter is down
            second = await adapter(kafka_settings, tmp_path, until_bound=2)
            tg.cancel_scope.cancel()

    # Batch fills both nodes; the pod that fits nowhere is refused with the reason.
    batch = {a["pod"]: a for a in of(first, "bind")}
    assert sorted(batch) == ["batch-0", "batch-1", "batch-2", "batch-3"]
    assert sorted(a["node"] for a in batch.values()) == ["node-1", "node-1", "node-2", "node-2"]
    assert [a["pod"] for a in of(first, "unschedulable")] == ["huge-0"]

    # Restarted, it acts on no decision twice: the batch pods are not bound again.
    assert sorted(a["pod"] for a in of(second, "bind")) == ["web-0", "web-1"]
    # Exactly two batch pods are evicted with the grace in whole seconds, then deleted at the kill by the
    # names it kept across the restart, and Sniper counts their allocations gone.
    evicted = {a["pod"]: a["grace_seconds"] for a in of(second, "evict")}
    assert len(evicted) == 2 and set(evicted) <= set(batch)
    assert all(isinstance(grace, int) and 1 <= grace <= 2 for grace in evicted.values())
    deleted = {a["pod"]: a["allocation"] for a in of(second, "delete")}
    assert deleted == {pod: batch[pod]["allocation"] for pod in evicted}
    assert {a["allocation"] for a in of(second, "released")} == set(deleted.values())
    # The prod pods take the room the victims left, after it was freed.
    victims_nodes = sorted(batch[pod]["node"] for pod in evicted)
    assert sorted(a["node"] for a in of(second, "bind")) == victims_nodes
    order = [a["action"] for a in second if a["action"] in ("released", "bind")]
    assert order.index("bind") > order.index("released")

    state = json.loads((tmp_path / "state.json").read_text())
    assert set(state["allocations"]) == (set(batch) - set(evicted)) | {"web-0", "web-1"}
