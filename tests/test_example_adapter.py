"""The example adapter (examples/k8s_csv_adapter.py) drives a core on the embedded broker through librdkafka."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

from sniper.cluster.process import CoreOptions, CoreProcess
from sniper.transport.kafka import KafkaSettings

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parent.parent
WAIT = 90.0

QUEUES = """\
partitions:
  - name: default
    queues:
      - name: root
        queues:
          - name: prod
            resources: {guaranteed: {memory: 16Gi, vcore: 8}}
          - name: dev
"""

PODS = """\
kind,name,namespace,app,cpu,memory,gpu
node,node-1,,,8,16Gi,
node,node-2,,,8,16Gi,
pod,web-0,prod,web,2,4Gi,
pod,web-1,prod,web,2,4Gi,
pod,nb-0,dev,notebook,500m,1Gi,
pod,huge-0,dev,huge,64,1Ti,
"""


async def test_the_example_adapter_publishes_json_and_binds_the_pods_a_core_places(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    (tmp_path / "queues.yaml").write_text(QUEUES)
    (tmp_path / "pods.csv").write_text(PODS)
    command = [
        sys.executable,
        str(ROOT / "examples" / "k8s_csv_adapter.py"),
        *("--bootstrap", kafka_settings.bootstrap, "--prefix", kafka_settings.prefix),
        *("--kafka-partitions", str(kafka_settings.partitions), "--source", str(tmp_path / "pods.csv")),
        *("--queues", str(tmp_path / "queues.yaml"), "--until-bound", "3", "--timeout", "60"),
    ]
    process = CoreProcess(kafka_settings, CoreOptions(group="cores", tick=0.1, stop_timeout=3.0))
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            await tg.start(process.run)
            await process.ready.wait()
            result = await anyio.run_process(command, check=False)
            tg.cancel_scope.cancel()
    assert result.returncode == 0, result.stderr.decode()
    actions = [json.loads(line) for line in result.stdout.decode().splitlines()]
    binds = {a["pod"]: a["node"] for a in actions if a["action"] == "bind"}
    assert sorted(binds) == ["nb-0", "web-0", "web-1"]
    assert set(binds.values()) <= {"node-1", "node-2"}
