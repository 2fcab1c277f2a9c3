"""``sniper k8s`` as a command: one line and the documented exit code for every bad start, and
``--embedded`` (broker, core and shim in one process) binding a pod against the API-server stand-in."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.kube_apiserver import KubeApiServer, kubeconfig_text, node, pod


def sniper_k8s(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "SNIPER_KAFKA_BOOTSTRAP"} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "sniper", "k8s", *args], capture_output=True, text=True, timeout=120, env=environ
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and "Traceback" not in result.stderr
    return lines[0]


def test_sniper_k8s_without_kafka_exits_2_and_says_how_to_give_it() -> None:
    result = sniper_k8s()
    assert result.returncode == 2
    assert "--bootstrap" in one_error_line(result) and "--embedded" in one_error_line(result)


def test_a_missing_kubeconfig_a_bad_queues_source_or_file_exit_2_in_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "queues.yaml"
    broken.write_text("partitions: [\n")
    config = tmp_path / "kubeconfig"
    config.write_text(kubeconfig_text("http://127.0.0.1:9"))
    cases = [
        (["--kubeconfig", str(tmp_path / "none")], "no kubeconfig at"),
        (["--kubeconfig", str(config), "--queues", "configmap:only-a-namespace"], "configmap:NAMESPACE/NAME"),
        (["--kubeconfig", str(config), "--queues", str(broken)], "not valid YAML"),
        (["--kubeconfig", str(broken)], "kubeconfig"),
    ]
    for args, said in cases:
        result = sniper_k8s("--bootstrap", "127.0.0.1:9", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert said in one_error_line(result), (args, result.stderr)


def test_an_api_server_that_cannot_be_reached_exits_3_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(kubeconfig_text("http://127.0.0.1:9"))
    result = sniper_k8s("--bootstrap", "127.0.0.1:9", "--kubeconfig", str(config))
    assert result.returncode == 3
    assert "cannot reach the Kubernetes API server at http://127.0.0.1:9" in one_error_line(result)


@pytest.mark.kafka
async def test_sniper_k8s_embedded_without_queues_binds_a_pod_in_its_namespaces_queue_and_stops_on_sigterm(
    kube_api: KubeApiServer,
) -> None:
    """The trial's default: no queues file, so the namespace's queue ``root.prod`` is created for the pod."""
    assert kube_api.kubeconfig is not None
    kube_api.create(node("n1", cpu="4", memory="8Gi"))
    kube_api.create(pod("web", "prod", labels={"applicationId": "web"}))
    environ = {k: v for k, v in os.environ.items() if k != "SNIPER_KAFKA_BOOTSTRAP"}
    command = [sys.executable, "-m", "sniper", "k8s", "--embedded", "--kubeconfig", str(kube_api.kubeconfig)]
    async with await anyio.open_process(
        [*command, "--identity", "solo"], env=environ, stdout=subprocess.DEVNULL
    ) as process:
        try:
            await kube_api.wait_for(lambda api: api.bound().get("prod/web") == "n1", timeout=90)
        finally:
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(60):
                code = await process.wait()
    assert code == 0
    assert kube_api.get("leases", "sniper-k8s", "sniper")["spec"]["holderIdentity"] == ""  # released on exit
