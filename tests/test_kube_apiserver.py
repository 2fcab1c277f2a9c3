"""The API-server stand-in keeps the real kube-apiserver's semantics and traps, met here through a plain
HTTP client (and the shim's client library), so the shim meets them in its tests and not in a cluster."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import anyio
import pytest
from kubernetes_asyncio import client, config

from tests.kube_apiserver import KubeApiServer, deployed_cluster_role, node, pod

WAIT = 10.0
Obj = dict[str, Any]


@asynccontextmanager
async def http(api: KubeApiServer) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(api.url) as session:
        yield session


async def call(session: aiohttp.ClientSession, method: str, path: str, **kwargs: Any) -> tuple[int, Obj]:
    async with session.request(method, path, **kwargs) as response:
        return response.status, await response.json()


class WatchStream:
    """One open watch: its events, read one line at a time."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response

    async def next(self) -> Obj | None:
        """The next event, or None when the server ended the stream."""
        with anyio.fail_after(WAIT):
            line = await self.response.content.readline()
        return json.loads(line) if line else None

    async def events(self, count: int) -> list[Obj]:
        out: list[Obj] = []
        for _ in range(count):
            event = await self.next()
            assert event is not None, f"the stream ended after {out}"
            out.append(event)
        return out


@asynccontextmanager
async def watching(session: aiohttp.ClientSession, path: str, **params: str) -> AsyncIterator[WatchStream]:
    async with session.get(path, params={"watch": "true", **params}) as response:
        assert response.status == 200
        yield WatchStream(response)


def everything() -> KubeApiServer:
    """A stand-in without RBAC, for the traps of verbs the shim's role does not grant."""
    return KubeApiServer(role=None)


def bind_body(name: str, node_name: str, allocation: str = "a-1") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "annotations": {"sniper.apache.org/allocation": allocation}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
    }


def eviction_body(name: str, grace: Any = None, **options: Any) -> Obj:
    delete_options = {**options, **({"gracePeriodSeconds": grace} if grace is not None else {})}
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}, "deleteOptions": delete_options}


# ---------------------------------------------------------------------------------------------- list
async def test_list_items_carry_no_kind_and_the_list_carries_the_newest_resource_version(
    kube_api: KubeApiServer,
) -> None:
    kube_api.create(node("n-1"))
    kube_api.create(pod("p-1"))
    async with http(kube_api) as session:
        code, listed = await call(session, "GET", "/api/v1/pods")
    assert code == 200
    assert listed["kind"] == "PodList" and listed["apiVersion"] == "v1"
    assert listed["metadata"]["resourceVersion"] == str(kube_api.rv) == "2"
    [item] = listed["items"]
    assert "kind" not in item and "apiVersion" not in item
    assert item["metadata"]["resourceVersion"] == "2" and item["metadata"]["uid"]


async def test_field_selectors_pick_unbound_pods_of_a_scheduler_and_an_unindexed_field_is_a_400() -> None:
    api = everything()
    api.create(node("n-1"))
    api.create(pod("mine"))
    api.create(pod("theirs", scheduler="default-scheduler"))
    api.create(pod("bound", node_name="n-1"))
    async with api.serving(), http(api) as session:
        _, unbound = await call(
            session, "GET", "/api/v1/pods", params={"fieldSelector": "spec.schedulerName=sniper,spec.nodeName="}
        )
        _, placed = await call(session, "GET", "/api/v1/pods", params={"fieldSelector": "spec.nodeName!="})
        _, in_default = await call(session, "GET", "/api/v1/namespaces/default/pods", params={"limit": "2"})
        code, refused = await call(session, "GET", "/api/v1/pods", params={"fieldSelector": "spec.priority=3"})
    assert [p["metadata"]["name"] for p in unbound["items"]] == ["mine"]
    assert [p["metadata"]["name"] for p in placed["items"]] == ["bound"]
    assert len(in_default["items"]) == 2 and in_default["metadata"]["continue"]
    assert code == 400 and refused["kind"] == "Status" and "field label not supported" in refused["message"]


async def test_label_selectors_take_equality_and_set_based_requirements() -> None:
    api = everything()
    api.create(pod("a", labels={"app": "web", "tier": "front"}))
    api.create(pod("b", labels={"app": "db"}))
    api.create(pod("c", labels={}))
    async with api.serving(), http(api) as session:
        found: dict[str, list[str]] = {}
        for selector in ("app=web", "app!=web", "app in (web,db)", "app notin (web)", "tier", "!tier"):
            _, listed = await call(session, "GET", "/api/v1/pods", params={"labelSelector": selector})
            found[selector] = [p["metadata"]["name"] for p in listed["items"]]
    assert found == {
        "app=web": ["a"],
        "app!=web": ["b", "c"],
        "app in (web,db)": ["a", "b"],
        "app notin (web)": ["b", "c"],
        "tier": ["a"],
        "!tier": ["b", "c"],
    }


# ---------------------------------------------------------------------------------------------- watch
async def test_a_watch_resumed_from_a_resource_version_sees_only_later_changes_then_bookmarks(
    kube_api: KubeApiServer,
) -> None:
    kube_api.create(node("n-1"))
    since = kube_api.rv
    kube_api.create(node("n-2"))
    params = {"resourceVersion": str(since), "allowWatchBookmarks": "true"}
    async with http(kube_api) as session, watching(session, "/api/v1/nodes", **params) as w:
        [first] = await w.events(1)
        kube_api.modify("nodes", "n-1", {"spec": {"unschedulable": True}})
        [second] = await w.events(1)
        kube_api.bookmark()
        [mark] = await w.events(1)
    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "n-2")
    assert first["object"]["kind"] == "Node" and first["object"]["apiVersion"] == "v1"  # watch objects do
    assert (second["type"], second["object"]["spec"]["unschedulable"]) == ("MODIFIED", True)
    assert mark == {
        "type": "BOOKMARK",
        "object": {"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": str(kube_api.rv)}},
    }


async def test_a_watch_without_a_resource_version_starts_with_every_object_added(kube_api: KubeApiServer) -> None:
    kube_api.create(node("n-1"))
    kube_api.create(node("n-2"))
    async with http(kube_api) as session, watching(session, "/api/v1/nodes") as w:
        events = await w.events(2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "n-1"), ("ADDED", "n-2")]


async def test_a_watch_from_a_compacted_resource_version_is_a_200_whose_stream_holds_one_410_error(
    kube_api: KubeApiServer,
) -> None:
    kube_api.create(node("n-1"))
    old = kube_api.rv
    kube_api.create(node("n-2"))
    kube_api.compact()
    async with http(kube_api) as session, watching(session, "/api/v1/nodes", resourceVersion=str(old)) as w:
        error = await w.next()
        end = await w.next()
    assert error is not None and error["type"] == "ERROR"
    assert error["object"]["kind"] == "Status" and error["object"]["code"] == 410
    assert error["object"]["reason"] == "Expired"
    assert end is None  # the server ends the stream: the client must relist


async def test_a_bounded_history_expires_a_resource_version_older_than_what_it_keeps() -> None:
    api = KubeApiServer(history=2)
    api.create(node("n-1"))
    first = api.rv
    for name in ("n-2", "n-3", "n-4"):
        api.create(node(name))
    async with api.serving(), http(api) as session:
        async with watching(session, "/api/v1/nodes", resourceVersion=str(first)) as w:
            expired = await w.next()
        async with watching(session, "/api/v1/nodes", resourceVersion=str(api.rv - 2)) as w:
            kept = await w.events(2)
    assert expired is not None and expired["object"]["code"] == 410
    assert [e["object"]["metadata"]["name"] for e in kept] == ["n-3", "n-4"]


async def test_a_pod_leaving_the_field_selector_once_bound_arrives_as_deleted(kube_api: KubeApiServer) -> None:
    kube_api.create(node("n-1"))
    kube_api.create(pod("p-1"))
    selector = "spec.schedulerName=sniper,spec.nodeName="
    async with http(kube_api) as session, watching(session, "/api/v1/pods", fieldSelector=selector) as w:
        [added] = await w.events(1)
        code, _ = await call(
            session, "POST", "/api/v1/namespaces/default/pods/p-1/binding", json=bind_body("p-1", "n-1")
        )
        [left] = await w.events(1)
    assert code == 201
    assert added["type"] == "ADDED"
    assert left["type"] == "DELETED" and left["object"]["spec"]["nodeName"] == "n-1"


async def test_dropped_watches_end_their_streams_and_resume_from_the_last_resource_version_seen(
    kube_api: KubeApiServer,
) -> None:
    kube_api.create(node("n-1"))
    async with http(kube_api) as session:
        async with watching(session, "/api/v1/nodes") as w:
            [seen] = await w.events(1)
            await kube_api.wait_for(lambda api: api.watches)
            assert kube_api.drop_watches() == 1
            assert await w.next() is None
        kube_api.create(node("n-2"))
        resume = seen["object"]["metadata"]["resourceVersion"]
        async with watching(session, "/api/v1/nodes", resourceVersion=resume) as w:
            [missed] = await w.events(1)
    assert missed["type"] == "ADDED" and missed["object"]["metadata"]["name"] == "n-2"


# ---------------------------------------------------------------------------------------------- writes
async def test_an_update_with_a_stale_resource_version_is_a_409_and_a_fresh_one_succeeds(
    kube_api: KubeApiServer,
) -> None:
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "sniper-k8s", "namespace": "sniper"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
    }
    path = "/apis/coordination.k8s.io/v1/namespaces/sniper/leases"
    async with http(kube_api) as session:
        created_code, created = await call(session, "POST", path, json=lease)
        again_code, again = await call(session, "POST", path, json=lease)
        _, current = await call(session, "GET", f"{path}/sniper-k8s")
        mine = {**current, "spec": {**current["spec"], "holderIdentity": "b"}}
        taken_code, taken = await call(session, "PUT", f"{path}/sniper-k8s", json=mine)
        stale_code, stale = await call(session, "PUT", f"{path}/sniper-k8s", json=mine)  # the same version again
    assert (created_code, created["metadata"]["resourceVersion"]) == (201, str(kube_api.rv - 1))
    assert again_code == 409 and again["reason"] == "AlreadyExists"
    assert taken_code == 200 and taken["spec"]["holderIdentity"] == "b"
    assert stale_code == 409 and stale["reason"] == "Conflict"


async def test_a_binding_is_answered_with_a_status_copies_its_annotations_and_a_second_one_is_a_409(
    kube_api: KubeApiServer,
) -> None:
    kube_api.create(node("n-1"))
    kube_api.create(pod("p-1", labels={"app": "web"}))
    path = "/api/v1/namespaces/default/pods/p-1/binding"
    async with http(kube_api) as session:
        code, answer = await call(session, "POST", path, json=bind_body("p-1", "n-1", "alloc-7"))
        again_code, again = await call(session, "POST", path, json=bind_body("p-1", "n-2", "alloc-8"))
        missing_code, _ = await call(
            session, "POST", "/api/v1/namespaces/default/pods/nope/binding", json=bind_body("nope", "n-1")
        )
    assert code == 201 and answer["kind"] == "Status" and answer["status"] == "Success"
    bound = kube_api.get("pods", "p-1", "default")
    assert bound is not None
    assert bound["spec"]["nodeName"] == "n-1"
    assert bound["metadata"]["annotations"] == {"sniper.apache.org/allocation": "alloc-7"}
    assert bound["status"]["phase"] == "Running"  # its kubelet started it
    assert again_code == 409 and again["reason"] == "Conflict" and "already assigned" in again["message"]
    assert missing_code == 404


async def test_an_eviction_is_a_429_while_the_budget_allows_no_disruption_and_else_starts_graceful_deletion(
    kube_api: KubeApiServer,
) -> None:
    kube_api.create(node("n-1"))
    for name in ("w-0", "w-1"):
        kube_api.create(pod(name, "prod", labels={"app": "web"}))
    kube_api.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "prod"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        }
    )
    async with http(kube_api) as session:
        for name in ("w-0", "w-1"):
            await call(session, "POST", f"/api/v1/namespaces/prod/pods/{name}/binding", json=bind_body(name, "n-1"))
        first_code, first = await call(
            session, "POST", "/api/v1/namespaces/prod/pods/w-0/eviction", json=eviction_body("w-0", 20)
        )
        second_code, second = await call(
            session, "POST", "/api/v1/namespaces/prod/pods/w-1/eviction", json=eviction_body("w-1", 20)
        )
        kube_api.finish_terminations()
        kube_api.create(pod("w-2", "prod", labels={"app": "web"}))
        await call(session, "POST", "/api/v1/namespaces/prod/pods/w-2/binding", json=bind_body("w-2", "n-1"))
        third_code, _ = await call(
            session, "POST", "/api/v1/namespaces/prod/pods/w-1/eviction", json=eviction_body("w-1", 20)
        )
    assert first_code == 201 and first["status"] == "Success"
    assert second_code == 429 and second["reason"] == "TooManyRequests"
    assert second["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert third_code == 201  # the budget recovered once the evicted pod's replacement runs
    assert kube_api.terminating() == ["prod/w-1"]
    evicted = kube_api.get("pods", "w-1", "prod")
    assert evicted is not None and evicted["metadata"]["deletionGracePeriodSeconds"] == 20


async def test_grace_periods_are_integers_and_a_uid_precondition_that_does_not_match_is_a_409(
    kube_api: KubeApiServer,
) -> None:
    kube_api.create(node("n-1"))
    created = kube_api.create(pod("p-1", node_name="n-1"))
    path = "/api/v1/namespaces/default/pods/p-1"
    async with http(kube_api) as session:
        float_code, floated = await call(session, "DELETE", path, json={"gracePeriodSeconds": 1.5})
        evict_code, _ = await call(session, "POST", f"{path}/eviction", json=eviction_body("p-1", 2.5))
        query_code, _ = await call(session, "DELETE", path, params={"gracePeriodSeconds": "0.5"})
        other = {"gracePeriodSeconds": 0, "preconditions": {"uid": "not-its-uid"}}
        uid_code, mismatch = await call(session, "DELETE", path, json=other)
        assert kube_api.get("pods", "p-1") is not None  # nothing was deleted so far
        mine = {"gracePeriodSeconds": 0, "preconditions": {"uid": created["metadata"]["uid"]}}
        ok_code, _ = await call(session, "DELETE", path, json=mine)
    assert (float_code, floated["reason"]) == (400, "BadRequest")
    assert evict_code == 400 and query_code == 400
    assert uid_code == 409 and "Precondition failed" in mismatch["message"]
    assert ok_code == 200 and kube_api.get("pods", "p-1") is None


async def test_a_graceful_deletion_keeps_a_bound_pod_until_its_kubelet_finishes(kube_api: KubeApiServer) -> None:
    kube_api.create(node("n-1"))
    kube_api.create(pod("bound", node_name="n-1"))
    kube_api.create(pod("pending"))
    async with http(kube_api) as session:
        code, answer = await call(
            session, "DELETE", "/api/v1/namespaces/default/pods/bound", json={"gracePeriodSeconds": 30}
        )
        pending_code, _ = await call(
            session, "DELETE", "/api/v1/namespaces/default/pods/pending", json={"gracePeriodSeconds": 30}
        )
    assert code == 200 and answer["metadata"]["deletionTimestamp"]
    assert kube_api.terminating() == ["default/bound"]
    assert pending_code == 200 and kube_api.get("pods", "pending") is None  # no kubelet to wait for
    assert kube_api.finish_terminations() == ["default/bound"]
    assert kube_api.get("pods", "bound") is None


async def test_status_patches_merge_conditions_by_type_and_the_main_endpoint_ignores_status(
    kube_api: KubeApiServer,
) -> None:
    kube_api.create(pod("p-1"))
    kube_api.modify("pods", "p-1", {"status": {"conditions": [{"type": "Initialized", "status": "True"}]}})
    strategic = {"Content-Type": "application/strategic-merge-patch+json"}
    merge = {"Content-Type": "application/merge-patch+json"}
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "too big"}
    async with http(kube_api) as session:
        status_path = "/api/v1/namespaces/default/pods/p-1/status"
        code, patched = await call(
            session,
            "PATCH",
            status_path,
            data=json.dumps({"status": {"conditions": [unschedulable]}}),
            headers=strategic,
        )
        nominated_code, nominated = await call(
            session, "PATCH", status_path, data=json.dumps({"status": {"nominatedNodeName": "n-2"}}), headers=merge
        )
    assert code == 200
    assert [c["type"] for c in patched["status"]["conditions"]] == ["Initialized", "PodScheduled"]
    assert nominated_code == 200 and nominated["status"]["nominatedNodeName"] == "n-2"
    assert nominated["status"]["conditions"] == patched["status"]["conditions"]

    api = everything()
    api.create(pod("p-1"))
    async with api.serving(), http(api) as session:
        main_code, main = await call(
            session,
            "PATCH",
            "/api/v1/namespaces/default/pods/p-1",
            data=json.dumps({"metadata": {"labels": {"x": "y"}}, "status": {"nominatedNodeName": "n-2"}}),
            headers=strategic,
        )
        spec_code, spec = await call(
            session,
            "PATCH",
            "/api/v1/namespaces/default/pods/p-1",
            data=json.dumps({"spec": {"nodeName": "n-1"}}),
            headers=strategic,
        )
    assert main_code == 200 and main["metadata"]["labels"] == {"x": "y"}
    assert "nominatedNodeName" not in main["status"]  # the status is the /status endpoint's alone
    assert spec_code == 422 and spec["reason"] == "Invalid"  # a pod is bound through a Binding, never patched


async def test_a_custom_resource_takes_no_strategic_merge_patch() -> None:
    api = everything()
    api.create(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "default"},
            "spec": {"minMember": 3},
        }
    )
    path = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups/g"
    body = json.dumps({"spec": {"minMember": 4}})
    async with api.serving(), http(api) as session:
        code, _ = await call(
            session, "PATCH", path, data=body, headers={"Content-Type": "application/strategic-merge-patch+json"}
        )
        merged_code, merged = await call(
            session, "PATCH", path, data=body, headers={"Content-Type": "application/merge-patch+json"}
        )
    assert code == 415
    assert merged_code == 200 and merged["spec"]["minMember"] == 4


# ---------------------------------------------------------------------------------------------- RBAC
async def test_the_deployed_cluster_role_refuses_what_it_does_not_grant_and_records_what_was_used(
    kube_api: KubeApiServer,
) -> None:
    kube_api.create(pod("p-1"))
    async with http(kube_api) as session:
        listed_code, _ = await call(session, "GET", "/api/v1/pods")
        create_code, refused = await call(session, "POST", "/api/v1/namespaces/default/pods", json=pod("p-2"))
        nodes_code, _ = await call(session, "PATCH", "/api/v1/nodes/n-1", json={})
    assert listed_code == 200
    assert create_code == 403 and refused["reason"] == "Forbidden"
    assert 'cannot create resource "pods"' in refused["message"]
    assert nodes_code == 403
    assert ("", "pods", "list") in kube_api.rbac_used
    assert kube_api.rbac_denied == [("", "pods", "create"), ("", "nodes", "patch")]
    assert kube_api.get("pods", "p-2") is None


def test_the_deployed_cluster_role_grants_the_calls_of_the_shim_and_nothing_to_write_pod_specs() -> None:
    role = deployed_cluster_role()
    for triple in [
        ("", "pods/binding", "create"),
        ("", "pods/eviction", "create"),
        ("coordination.k8s.io", "leases", "update"),
    ]:
        assert role.grants(*triple), triple
    for triple in [
        ("", "pods", "create"),
        ("", "pods", "update"),
        ("", "pods", "patch"),
        ("", "secrets", "get"),
        ("", "nodes", "patch"),
    ]:
        assert not role.grants(*triple), triple


# ---------------------------------------------------------------------------------------------- the Python API
async def test_wait_for_is_woken_by_a_change_and_times_out_otherwise() -> None:
    api = KubeApiServer()
    async with anyio.create_task_group() as tg:

        async def later() -> None:
            await anyio.lowlevel.checkpoint()
            api.create(node("n-1"))

        tg.start_soon(later)
        found = await api.wait_for(lambda s: s.get("nodes", "n-1"), timeout=WAIT)
    assert found["metadata"]["name"] == "n-1"
    with pytest.raises(TimeoutError):
        await api.wait_for(lambda s: s.get("nodes", "n-2"), timeout=0.05)


async def test_the_shims_client_library_reads_the_kubeconfig_without_credentials(kube_api: KubeApiServer) -> None:
    kube_api.create(node("n-1", cpu="4", memory="8Gi", extra={"nvidia.com/gpu": "2"}))
    assert kube_api.kubeconfig is not None
    loaded = client.Configuration()
    await config.load_kube_config(str(kube_api.kubeconfig), client_configuration=loaded)
    async with client.ApiClient(loaded) as api_client:
        nodes = await client.CoreV1Api(api_client).list_node()
    assert [n.metadata.name for n in nodes.items] == ["n-1"]
    assert nodes.items[0].status.allocatable == {"cpu": "4", "memory": "8Gi", "pods": "110", "nvidia.com/gpu": "2"}


async def test_a_terminating_pod_is_modified_with_a_deletion_timestamp_then_deleted_when_its_kubelet_finishes(
    kube_api: KubeApiServer,
) -> None:
    kube_api.create(node("n-1"))
    kube_api.create(pod("p-1", node_name="n-1"))
    async with http(kube_api) as session, watching(session, "/api/v1/pods", resourceVersion=str(kube_api.rv)) as w:
        kube_api.remove("pods", "p-1", "default", grace=10)
        [terminating] = await w.events(1)
        kube_api.finish_terminations(["p-1"])
        [deleted] = await w.events(1)
    assert terminating["type"] == "MODIFIED"
    assert terminating["object"]["metadata"]["deletionGracePeriodSeconds"] == 10
    assert deleted["type"] == "DELETED" and deleted["object"]["metadata"]["name"] == "p-1"
    assert int(deleted["object"]["metadata"]["resourceVersion"]) == kube_api.rv


async def test_an_eviction_of_a_pod_under_two_budgets_is_a_500_and_a_pending_pod_ignores_its_budget(
    kube_api: KubeApiServer,
) -> None:
    kube_api.create(node("n-1"))
    kube_api.create(pod("bound", node_name="n-1", labels={"app": "web"}))
    kube_api.set_phase("bound", "default", "Running")
    kube_api.create(pod("waiting", labels={"app": "web"}))
    for name in ("one", "two"):
        budget = {"minAvailable": "100%", "selector": {"matchLabels": {"app": "web"}}}
        kube_api.create(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": "default"},
                "spec": budget,
            }
        )
    async with http(kube_api) as session:
        two_code, two = await call(
            session, "POST", "/api/v1/namespaces/default/pods/bound/eviction", json=eviction_body("bound", 5)
        )
        pending_code, _ = await call(
            session, "POST", "/api/v1/namespaces/default/pods/waiting/eviction", json=eviction_body("waiting", 5)
        )
    assert two_code == 500 and "more than one PodDisruptionBudget" in two["message"]
    assert pending_code == 201 and kube_api.get("pods", "waiting") is None


async def test_writes_keep_the_resource_version_global_and_a_no_op_write_keeps_it_unchanged() -> None:
    api = everything()
    api.create(node("n-1"))
    api.create(pod("p-1"))
    async with api.serving(), http(api) as session:
        _, current = await call(session, "GET", "/api/v1/nodes/n-1")
        same_code, same = await call(session, "PUT", "/api/v1/nodes/n-1", json=current)
        patch = [{"op": "add", "path": "/metadata/labels/zone", "value": "a"}]
        headers = {"Content-Type": "application/json-patch+json"}
        json_code, patched = await call(session, "PATCH", "/api/v1/nodes/n-1", data=json.dumps(patch), headers=headers)
        failed = [{"op": "test", "path": "/metadata/labels/zone", "value": "b"}]
        test_code, _ = await call(session, "PATCH", "/api/v1/nodes/n-1", data=json.dumps(failed), headers=headers)
        stale = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"], "labels": {"x": "y"}}}
        stale_code, _ = await call(
            session,
            "PATCH",
            "/api/v1/nodes/n-1",
            data=json.dumps(stale),
            headers={"Content-Type": "application/merge-patch+json"},
        )
    assert same_code == 200 and same["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]
    assert json_code == 200 and patched["metadata"]["labels"]["zone"] == "a"
    assert int(patched["metadata"]["resourceVersion"]) == 3  # after the node (1) and the pod (2)
    assert test_code == 422
    assert stale_code == 409  # a patch that names a resourceVersion is a precondition


async def test_an_unknown_resource_is_a_404_and_a_namespace_mismatch_is_a_400() -> None:
    api = everything()
    async with api.serving(), http(api) as session:
        secret_code, _ = await call(session, "GET", "/api/v1/namespaces/default/secrets")
        cluster_code, _ = await call(session, "GET", "/api/v1/namespaces/default/nodes")
        body = pod("p-1", namespace="other")
        mismatch_code, _ = await call(session, "POST", "/api/v1/namespaces/default/pods", json=body)
        generated = {**pod("ignored"), "metadata": {"generateName": "job-", "namespace": "default"}}
        made_code, made = await call(session, "POST", "/api/v1/namespaces/default/pods", json=generated)
    assert secret_code == 404 and cluster_code == 404
    assert mismatch_code == 400
    assert made_code == 201 and made["metadata"]["name"].startswith("job-")
    assert made["status"] == {"phase": "Pending"}  # a new pod's status is the API server's


async def test_the_grants_no_request_used_are_named(kube_api: KubeApiServer) -> None:
    assert kube_api.role is not None
    assert kube_api.unused_grants() == kube_api.role.triples()
    async with http(kube_api) as session:
        await call(session, "GET", "/api/v1/nodes")
    assert kube_api.unused_grants() == kube_api.role.triples() - {("", "nodes", "list")}


async def test_a_watch_ends_after_its_timeout_with_a_bookmark_when_it_allowed_them(kube_api: KubeApiServer) -> None:
    kube_api.create(node("n-1"))
    params = {"resourceVersion": str(kube_api.rv), "timeoutSeconds": "1", "allowWatchBookmarks": "true"}
    async with http(kube_api) as session, watching(session, "/api/v1/nodes", **params) as w:
        last = await w.next()
        end = await w.next()
    assert last == {
        "type": "BOOKMARK",
        "object": {"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": str(kube_api.rv)}},
    }
    assert end is None


async def test_a_lagging_watch_gets_the_held_changes_once_in_order_when_the_lag_ends(kube_api: KubeApiServer) -> None:
    kube_api.create(node("n-1"))
    start = kube_api.rv
    params = {"resourceVersion": str(start), "allowWatchBookmarks": "true"}
    async with http(kube_api) as session, watching(session, "/api/v1/nodes", **params) as w:
        await kube_api.wait_for(lambda api: api.watches)
        [watch] = kube_api.watches
        with kube_api.lag("nodes"):
            kube_api.create(node("n-2"))
            kube_api.modify("nodes", "n-1", {"metadata": {"labels": {"zone": "a"}}})
            kube_api.bookmark()  # a lagging watch is not told it is current
            assert watch.since == start and kube_api.get("nodes", "n-2") is not None
        kube_api.modify("nodes", "n-2", {"metadata": {"labels": {"zone": "b"}}})
        events = await w.events(3)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "n-2"),
        ("MODIFIED", "n-1"),
        ("MODIFIED", "n-2"),
    ]
    assert [int(e["object"]["metadata"]["resourceVersion"]) for e in events] == [start + 1, start + 2, start + 3]
