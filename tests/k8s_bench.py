"""The whole path's figures: pods bound per second and creation-to-Binding latency through ``sniper k8s``.

``python -m tests.k8s_bench --nodes 1000 --pods 2000`` starts the embedded broker, a ``sniper core``
subprocess, the API-server stand-in (this process, the deployed ClusterRole enforced) with ``--nodes``
nodes of 8 cores and 16 GiB, and a ``sniper k8s`` subprocess pointed at both; once a first pod is bound
(start-up is not measured) it creates ``--pods`` one-core pods at once, as a Job or a ReplicaSet of that
many replicas would, and waits until every one is bound. A pod's latency is from its creation in the
stand-in to the stand-in accepting its Binding; throughput is the pods over the time from the first
creation to the last Binding. It lives beside the stand-in it drives, in tests/ (the wheel ships no test
code). Figures only: :func:`measure` asserts nothing; ``tests/test_k8s_bench.py`` runs it small.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process

from sniper.bench.e2e import _cpu_seconds, start_core, stop_core
from sniper.transport.broker import EmbeddedBroker
from sniper.transport.kafka import KafkaSettings
from tests.kube_apiserver import KubeApiServer, Obj, node, pod

QUEUES = """
partitions:
  - name: default
    queues:
      - name: root
        queues:
          - name: bench
"""


class TimedApiServer(KubeApiServer):
    """The stand-in, noting when each pod was created and when its Binding was accepted."""

    def __init__(self) -> None:
        super().__init__()
        self.created_at: dict[str, float] = {}
        self.bound_at: dict[str, float] = {}

    def create(self, obj: Obj) -> Obj:
        stored = super().create(obj)
        if obj["kind"] == "Pod":
            self.created_at[f"{stored['metadata']['namespace']}/{stored['metadata']['name']}"] = time.monotonic()
        return stored

    def _bind(self, namespace: str, name: str, binding: Obj) -> Obj:
        answer = super()._bind(namespace, name, binding)
        self.bound_at.setdefault(f"{namespace}/{name}", time.monotonic())
        return answer


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))] if ordered else math.nan


@contextlib.asynccontextmanager
async def shim_process(bootstrap: str, prefix: str, kubeconfig: Path, queues: Path) -> AsyncIterator[Process]:
    command = [sys.executable, "-m", "sniper", "k8s", "--bootstrap", bootstrap, "--prefix", prefix]
    command += ["--kubeconfig", str(kubeconfig), "--queues", str(queues), "--no-elect", "--log-level", "warning"]
    env = {**os.environ, "SNIPER_KAFKA_SESSION_TIMEOUT_MS": "2000"}
    process = await anyio.open_process(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        yield process
    finally:
        await stop_core(process)  # SIGTERM, then SIGKILL after 15 s


async def measure(
    nodes: int, pods: int, *, bootstrap: str | None = None, limit: float = 600.0, api: TimedApiServer | None = None
) -> dict[str, Any]:
    """One run; ``bootstrap``: a running broker (default: an embedded one for the run); ``api``: the
    stand-in to use (default: a new one)."""
    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as stack:
        if bootstrap is None:
            bootstrap = stack.enter_context(EmbeddedBroker()).bootstrap
        settings = KafkaSettings(bootstrap=bootstrap, prefix=f"sniper-bench-k8s.{uuid.uuid4().hex[:8]}.")
        queues = Path(folder) / "queues.yaml"
        queues.write_text(QUEUES)
        api = api or TimedApiServer()
        for i in range(nodes):
            api.create(node(f"node-{i:05d}"))
        async with api.serving(Path(folder) / "kubeconfig") as served:
            assert served.kubeconfig is not None
            core = await start_core(settings, f"{settings.prefix}core")
            try:
                async with shim_process(bootstrap, settings.prefix, served.kubeconfig, queues) as shim:
                    api.create(pod("warm-up", "bench", labels={"applicationId": "warm-up"}))
                    await api.wait_for(lambda a: "bench/warm-up" in a.bound(), timeout=120)
                    names = [f"bench/p-{i:05d}" for i in range(pods)]
                    cpu = {"core": _cpu_seconds(core.pid), "shim": _cpu_seconds(shim.pid), "api": time.process_time()}
                    for key in names:
                        api.create(pod(key.split("/")[1], "bench", labels={"applicationId": "job"}))
                    await api.wait_for(lambda a: len(a.bound_at) == pods + 1, timeout=limit)
                    cpu = {
                        "core": _cpu_seconds(core.pid) - cpu["core"],
                        "shim": _cpu_seconds(shim.pid) - cpu["shim"],
                        "api": time.process_time() - cpu["api"],
                    }
            finally:
                await stop_core(core)
    latencies = [api.bound_at[k] - api.created_at[k] for k in names]
    first = min(api.created_at[k] for k in names)
    last = max(api.bound_at[k] for k in names)
    return {
        "nodes": nodes,
        "pods": pods,
        "pods_per_s": round(pods / (last - first), 1),
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 1),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "seconds": round(last - first, 2),
        "cpu_seconds": {k: round(v, 2) for k, v in cpu.items()},  # the stand-in's is this process's
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.k8s_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000], help="cluster sizes to run")
    parser.add_argument("--pods", type=int, default=2000, help="pods created at once per run")
    parser.add_argument("--bootstrap", help="a running Kafka broker (default: an embedded one)")
    args = parser.parse_args()
    for nodes in args.nodes:
        run = functools.partial(measure, nodes, args.pods, bootstrap=args.bootstrap)
        result = anyio.run(run, backend="asyncio", backend_options={"use_uvloop": True})
        sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
