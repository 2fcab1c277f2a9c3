"""The manifests of deploy/kubernetes/ are what kubectl needs and run what the command line takes: every
object parses with its identity, each container's args parse as ``sniper``'s own command line, the shim
runs as the ServiceAccount the ClusterRole is bound to, and the queues ConfigMap is a config Sniper loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer

from sniper.cli import app
from sniper.core.config import load_config
from tests.kube_apiserver import DEPLOY, deployed_cluster_role, deployed_objects

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "sniper"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}

Obj = dict[str, Any]


def objects(kind: str, folder: Path = DEPLOY) -> list[Obj]:
    return [o for o in deployed_objects(folder) if o["kind"] == kind]


def one(kind: str, name: str, folder: Path = DEPLOY) -> Obj:
    [found] = [o for o in objects(kind, folder) if o["metadata"]["name"] == name]
    return found


def containers(folder: Path = DEPLOY) -> list[tuple[str, Obj]]:
    return [
        (d["metadata"]["name"], c)
        for d in objects("Deployment", folder)
        for c in d["spec"]["template"]["spec"]["containers"]
    ]


def sniper_command(args: list[str]) -> dict[str, Any]:
    """Parse ``sniper ARGS`` as the image's entry point would, without running it (a bad option raises);
    the command's parameters."""
    group: Any = typer.main.get_command(app)
    context = group.commands[args[0]].make_context(f"sniper {args[0]}", list(args[1:]))
    return dict(context.params)


@pytest.mark.parametrize("folder", [DEPLOY, DEPLOY / "trial"], ids=["deployment", "trial"])
def test_every_manifest_object_has_the_identity_kubectl_needs(folder: Path) -> None:
    found = deployed_objects(folder)
    assert found
    for obj in found:
        assert obj.get("apiVersion") and obj.get("kind"), obj
        meta = obj["metadata"]
        assert meta.get("name"), obj
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta, obj
        else:
            assert meta.get("namespace") == NAMESPACE, obj
    names = [(o["kind"], o["metadata"]["name"]) for o in found]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("folder", [DEPLOY, DEPLOY / "trial"], ids=["deployment", "trial"])
def test_each_deployment_selects_its_own_pods_and_runs_the_compose_image(folder: Path) -> None:
    compose_image = "sniper:local"
    assert compose_image in (ROOT / "compose" / "docker-compose.yml").read_text()
    assert 'ENTRYPOINT ["sniper"]' in (ROOT / "compose" / "Dockerfile").read_text()
    for deployment in objects("Deployment", folder):
        spec = deployment["spec"]
        selected = spec["selector"]["matchLabels"]
        labels = spec["template"]["metadata"]["labels"]
        assert selected.items() <= labels.items(), deployment["metadata"]["name"]
        for container in spec["template"]["spec"]["containers"]:
            assert container["image"] == compose_image
            assert container["name"] and container["args"]


@pytest.mark.parametrize("folder", [DEPLOY, DEPLOY / "trial"], ids=["deployment", "trial"])
def test_every_container_runs_a_command_line_sniper_takes(folder: Path) -> None:
    for name, container in containers(folder):
        assert sniper_command(container["args"]), name


def test_the_shim_runs_two_electing_replicas_on_the_users_kafka_and_the_cores_share_one_group() -> None:
    shim = one("Deployment", "sniper-k8s")
    assert shim["spec"]["replicas"] == 2
    [container] = shim["spec"]["template"]["spec"]["containers"]
    params = sniper_command(container["args"])
    assert params["elect"] is True and params["embedded"] is False
    assert params["scheduler_name"] == "sniper"
    kafka = one("ConfigMap", "sniper-kafka")["data"]
    assert kafka["SNIPER_KAFKA_BOOTSTRAP"]
    for _, each in containers():
        assert each["envFrom"] == [{"configMapRef": {"name": "sniper-kafka"}}]
    groups = {sniper_command(c["args"])["group"] for n, c in containers() if n == "sniper-core"}
    assert groups == {"sniper-core"}


def test_the_trial_runs_one_pod_with_the_broker_and_a_core_inside() -> None:
    [trial] = objects("Deployment", DEPLOY / "trial")
    assert trial["spec"]["replicas"] == 1
    [container] = trial["spec"]["template"]["spec"]["containers"]
    params = sniper_command(container["args"])
    assert params["embedded"] is True
    assert trial["spec"]["template"]["spec"]["serviceAccountName"] == "sniper"


def test_the_shim_runs_as_the_service_account_bound_to_the_cluster_role() -> None:
    [account] = objects("ServiceAccount")
    [binding] = objects("ClusterRoleBinding")
    role = deployed_cluster_role()
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role.name}
    subject = {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    assert binding["subjects"] == [subject]
    shim = one("Deployment", "sniper-k8s")["spec"]["template"]["spec"]
    assert shim["serviceAccountName"] == account["metadata"]["name"]
    core = one("Deployment", "sniper-core")["spec"]["template"]["spec"]
    assert core.get("automountServiceAccountToken") is False  # the cores speak to Kafka only


def test_the_cluster_role_grants_no_wildcard_and_nothing_that_writes_specs_or_reads_secrets() -> None:
    role = deployed_cluster_role()
    for group, resource, verb in role.triples():
        assert "*" not in (group, resource, verb)
    for denied in [("", "pods", "update"), ("", "pods", "patch"), ("", "nodes", "update"), ("", "secrets", "get")]:
        assert not role.grants(*denied), denied


def test_the_queues_config_map_is_the_config_the_shims_args_name_and_sniper_loads_it(tmp_path: Path) -> None:
    queues = one("ConfigMap", "sniper-queues")
    [container] = one("Deployment", "sniper-k8s")["spec"]["template"]["spec"]["containers"]
    assert sniper_command(container["args"])["queues"] == f"configmap:{NAMESPACE}/sniper-queues"
    assert set(queues["data"]) == {"queues.yaml"}  # YuniKorn's key
    (tmp_path / "queues.yaml").write_text(queues["data"]["queues.yaml"])
    [partition] = load_config(tmp_path / "queues.yaml").partitions
    assert partition.name == "default"
    assert [rule.name for rule in partition.placement_rules] == ["provided", "tag"]
