"""``sniper k8s``'s rules through the whole path (stand-in, broker, core): gangs all or nothing, foreign
pods' room never handed out, what Sniper cannot express said on the pod, refusals marked on the pod, the
queue ConfigMap watched, one leader among replicas, and the ClusterRole exactly what the shim calls.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from sniper.kubernetes.actions import Actions, Outcome
from sniper.kubernetes.client import connect
from sniper.kubernetes.shim import QueuesSource
from sniper.messages import decisions as d
from sniper.transport.kafka import KafkaSettings
from tests.k8s_shim_support import (
    QUEUES,
    add_app_pods,
    add_etl_budget,
    add_nodes,
    fill_with_batch,
    prod_bound,
    spend_etl_budget,
    whole_path,
)
from tests.kube_apiserver import KubeApiServer, deployed_cluster_role, pod

pytestmark = pytest.mark.kafka


def events_on(api: KubeApiServer, name: str) -> list[dict[str, Any]]:
    return [e for e in api.list_of("events") if e["involvedObject"]["name"] == name]


def task_group_pod(name: str, cpu: str) -> dict[str, Any]:
    groups = json.dumps([{"name": "workers", "minMember": 3, "minResource": {"cpu": cpu}}])
    return pod(
        name,
        "batch",
        cpu=cpu,
        memory="1Gi",
        labels={"applicationId": "mpi"},
        annotations={"yunikorn.apache.org/task-group-name": "workers", "yunikorn.apache.org/task-groups": groups},
    )


async def test_a_gang_is_bound_all_or_nothing(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    api = kube_api
    add_nodes(api, "n1", "n2")
    gang = {"batch/w-0", "batch/w-1", "batch/w-2"}
    async with whole_path(api, kafka_settings, tmp_path) as world:
        await world.start_leading()
        api.create(pod("hog", "batch", cpu="3", memory="1Gi", labels={"applicationId": "hog"}))
        await world.until_bound("batch/hog")
        for i in range(3):  # two cores each: two of them fit now, the third only once the hog is gone
            api.create(task_group_pod(f"w-{i}", "2"))
        api.create(pod("after", "batch", cpu="1", memory="1Gi", labels={"applicationId": "other"}))
        await world.until_bound("batch/after")  # the gang was decided before it: not placed
        assert not gang & set(api.bound())
        api.set_phase("hog", "batch", "Succeeded")
        await world.until(lambda: gang <= set(api.bound()))
        placed = [a for a in world.of(d.Allocated) if a.ask == "batch/task-group:workers"]
        assert len(placed) == 3
        assert not world.of(d.Rejected)


async def test_foreign_pods_room_is_never_handed_out_and_comes_back_when_they_finish(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    api = kube_api
    add_nodes(api, "n1")
    api.create(pod("daemon", "kube-system", cpu="3", memory="1Gi", scheduler="default-scheduler", node_name="n1"))
    async with whole_path(api, kafka_settings, tmp_path) as world:
        await world.start_leading()
        add_app_pods(api, "batch", "a", "a-0", "a-1", "a-2")
        ours = lambda: sorted(v for k, v in api.bound().items() if k.startswith("batch/"))  # noqa: E731
        await world.until(lambda: len(ours()) == 1)
        add_nodes(api, "n2", cpu="1", memory="8Gi")
        await world.until(lambda: len(ours()) == 2)
        assert ours() == ["n1", "n2"]
        api.set_phase("daemon", "kube-system", "Succeeded")
        await world.until(lambda: len(ours()) == 3)
        assert not world.of(d.Preempt), "a foreign pod is never a victim"
        assert sorted(v for k, v in api.bound().items() if k.startswith("batch/")) == ["n1", "n1", "n2"]


async def test_what_sniper_cannot_express_is_said_on_the_pod_and_a_required_rule_keeps_it_unasked(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    api = kube_api
    add_nodes(api, "n1")
    affinity = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    preferred = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}
            ]
        }
    }
    async with whole_path(api, kafka_settings, tmp_path) as world:
        await world.start_leading()
        api.create(pod("strict", "batch", labels={"applicationId": "x"}, spec={"affinity": affinity}))
        api.create(pod("loose", "batch", labels={"applicationId": "x"}, spec={"affinity": preferred}))
        await world.until(lambda: "batch/loose" in api.bound() and events_on(api, "strict"))
        (said,) = events_on(api, "strict")
        assert said["reason"] == "Unexpressed" and "pod affinity" in said["message"]
        assert said["involvedObject"]["uid"] == api.get("pods", "strict", "batch")["metadata"]["uid"]
        assert "preferred node affinity" in events_on(api, "loose")[0]["message"]
        assert "batch/strict" not in api.bound()
        assert not [a for a in world.of(d.Allocated) if a.ask == "batch/strict"]


async def test_a_rejected_pod_is_marked_unschedulable_with_the_reason(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    api = kube_api
    add_nodes(api, "n1", cpu="8", memory="16Gi")
    queues = QUEUES.replace(
        "          - name: batch\n",
        "          - name: small\n            resources: {max: {vcore: 2}}\n          - name: batch\n",
    )
    async with whole_path(api, kafka_settings, tmp_path, queues) as world:
        await world.start_leading()
        api.create(pod("big", "small", cpu="3", memory="1Gi", labels={"applicationId": "big"}))
        marked = await world.until(
            lambda: [
                c
                for c in (api.get("pods", "big", "small") or {}).get("status", {}).get("conditions") or []
                if c.get("type") == "PodScheduled"
            ]
        )
        # The shim and the test read the decisions topic apart: the shim may mark the pod first.
        (rejection,) = await world.until(lambda: [r for r in world.of(d.Rejected) if r.ask == "small/big"])
        assert marked[0]["status"] == "False" and marked[0]["reason"] == "Unschedulable"
        assert marked[0]["message"] == rejection.reason
        await world.until(lambda: events_on(api, "big"))
        assert events_on(api, "big")[0]["reason"] == "FailedScheduling"


async def test_two_replicas_elect_one_leader_and_the_standby_takes_over_when_it_dies(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    api = kube_api
    add_nodes(api, "n1", cpu="8", memory="16Gi")
    async with whole_path(api, kafka_settings, tmp_path) as world:
        a = await world.start_leading("shim-a")
        b = await world.start_shim("shim-b")
        api.create(pod("one", "batch", labels={"applicationId": "x"}))
        await world.until_bound("batch/one")
        assert api.get("leases", "sniper-k8s", "sniper")["spec"]["holderIdentity"] == "shim-a"
        assert not b.shims, "the standby watched or acted"
        a.kill()
        await world.ready(b)
        api.create(pod("two", "batch", labels={"applicationId": "x"}))
        await world.until_bound("batch/two")
        assert api.get("leases", "sniper-k8s", "sniper")["spec"]["holderIdentity"] == "shim-b"
        binds = sorted(s.name for s in api.served(verb="create", resource="pods/binding"))
        assert binds == ["one", "two"]


async def test_the_cluster_role_is_exactly_what_the_shim_calls(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """Nothing the shim calls is refused by the deployed ClusterRole, and nothing it grants goes unused."""
    api = kube_api
    add_nodes(api, "n1", "n2")
    api.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "sniper-queues", "namespace": "sniper"},
            "data": {"queues.yaml": QUEUES},
        }
    )
    add_etl_budget(api)
    async with whole_path(api, kafka_settings, tmp_path) as world:
        running = await world.start_leading(queues=QueuesSource(config_map=("sniper", "sniper-queues")))
        shim = running.shim
        await fill_with_batch(world)
        spend_etl_budget(api)
        api.create(pod("web", "prod", cpu="1", memory="1Gi", labels={"applicationId": "web"}))
        await world.until(lambda: prod_bound(api))
        add_nodes(api, "n3")  # room for what follows
        api.create(
            pod(
                "lone",
                "batch",
                labels={"applicationId": "x"},
                spec={
                    "hostNetwork": True,
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "ports": [{"containerPort": 80, "hostPort": 80}],
                            "resources": {"requests": {"cpu": "1"}},
                        }
                    ],
                },
            )
        )
        await world.until(lambda: events_on(api, "lone") and "batch/lone" in api.bound())
        # A Binding answered 409 (the pod bound meanwhile) asks who holds the pod.
        async with connect(api.kubeconfig) as apis:
            actions = Actions(apis, "sniper", shim.clock)
            (web_node,) = prod_bound(api).values()
            assert await actions.bind("prod", "web", web_node, "again") is Outcome.DONE
        # The ConfigMap is watched: a new queue reaches the core before an app is placed in it.
        api.modify(
            "configmaps", "sniper-queues", {"data": {"queues.yaml": QUEUES + "          - name: extra\n"}}, "sniper"
        )
        await world.until(lambda: shim.view.config.leaf("root.extra"))
        api.create(pod("new", "batch", labels={"applicationId": "y", "queue": "root.extra"}))
        await world.until_bound("batch/new")
        await world.until(lambda: ("coordination.k8s.io", "leases", "update") in api.rbac_used)
        assert not api.rbac_denied
        assert api.rbac_used == deployed_cluster_role().triples()


def micro_time(after_seconds: float = 0.0) -> str:
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=after_seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def test_a_leader_whose_lease_is_taken_stops_acting_until_it_holds_the_lease_again(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    api = kube_api
    add_nodes(api, "n1", cpu="8", memory="16Gi")
    async with whole_path(api, kafka_settings, tmp_path) as world:
        a = await world.start_leading("shim-a")
        first = a.shim
        api.create(pod("one", "batch", labels={"applicationId": "x"}))
        await world.until_bound("batch/one")
        taken = {"spec": {"holderIdentity": "intruder", "renewTime": micro_time(), "leaseDurationSeconds": 3600}}
        api.modify("leases", "sniper-k8s", taken, "sniper")
        await world.until(lambda: first.stopped.is_set())  # it could not renew: it stepped down
        api.create(pod("two", "batch", labels={"applicationId": "x"}))
        api.modify("leases", "sniper-k8s", {"spec": {"renewTime": micro_time(-7200)}}, "sniper")  # it expires
        second = await world.until(lambda: len(a.shims) == 2 and a.shims[1])
        await world.ready(a)
        await world.until_bound("batch/two")
        assert second is not first
        assert api.get("leases", "sniper-k8s", "sniper")["spec"]["holderIdentity"] == "shim-a"
        assert sorted(s.name for s in api.served(verb="create", resource="pods/binding")) == ["one", "two"]


async def test_a_pod_sniper_cannot_read_is_said_on_the_pod_and_the_shim_goes_on(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    api = kube_api
    add_nodes(api, "n1")
    async with whole_path(api, kafka_settings, tmp_path) as world:
        await world.start_leading()
        api.create(pod("odd", "batch", cpu="lots", labels={"applicationId": "x"}))
        api.create(pod("fine", "batch", labels={"applicationId": "x"}))
        await world.until(lambda: "batch/fine" in api.bound() and events_on(api, "odd"))
        (said,) = events_on(api, "odd")
        assert said["reason"] == "FailedScheduling" and "lots" in said["message"]
        assert "batch/odd" not in api.bound()


async def test_a_pod_deleted_and_created_again_under_its_name_is_scheduled_again(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """As a StatefulSet does: ``web-0`` goes and comes back with a new UID; the new pod is a new ask."""
    api = kube_api
    add_nodes(api, "n1")
    async with whole_path(api, kafka_settings, tmp_path) as world:
        await world.start_leading()
        api.create(pod("web-0", "prod", labels={"applicationId": "web"}))
        api.create(pod("web-1", "prod", labels={"applicationId": "web"}))  # the app outlives web-0
        await world.until_bound("prod/web-0", "prod/web-1")
        first = api.get("pods", "web-0", "prod")["metadata"]["uid"]
        api.remove("pods", "web-0", "prod", grace=0)
        api.create(pod("web-0", "prod", labels={"applicationId": "web"}))
        await world.until_bound("prod/web-0")
        assert api.get("pods", "web-0", "prod")["metadata"]["uid"] != first
        await world.until(lambda: len(world.allocations_of("prod/web-0")) >= 2)
        assert len(world.allocations_of("prod/web-0")) == 2
