"""``sniper k8s`` when things go wrong mid-way: watches dropped and compacted, a budget that refuses, nodes
cordoned or deleted during a grace, the shim killed during a preemption. Whole path: stand-in, broker, core.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sniper.messages import decisions as d
from sniper.transport.kafka import KafkaSettings
from tests.k8s_shim_support import (
    QUEUES,
    add_app_pods,
    add_etl_budget,
    add_nodes,
    evicted,
    fill_with_batch,
    prod_bound,
    spend_etl_budget,
    victims,
    whole_path,
)
from tests.kube_apiserver import KubeApiServer, pod

pytestmark = pytest.mark.kafka


async def test_a_dropped_watch_resumes_and_a_compacted_one_relists_without_losing_a_change(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    api = kube_api
    add_nodes(api, "n1", cpu="2", memory="4Gi")
    async with whole_path(api, kafka_settings, tmp_path) as world:
        shim = (await world.start_leading()).shim
        nodes, pods = shim.informers["nodes"], shim.informers["pods"]
        api.create(pod("a", "batch", labels={"applicationId": "a"}))
        await world.until_bound("batch/a")
        # A bookmark carries the nodes' watch past the pods' changes: a compaction then costs it nothing.
        api.bookmark()
        await world.until(lambda: nodes.version == str(api.rv))
        api.compact()
        api.drop_watches()
        api.create(pod("b", "batch", labels={"applicationId": "a"}))
        await world.until_bound("batch/b")
        assert (nodes.lists, pods.lists) == (1, 1)
        assert nodes.resumes >= 1 and pods.resumes >= 1
        # Without one, the nodes' watch resumes from before the compaction: a 200 with an ERROR 410 inside.
        api.create(pod("c", "batch", labels={"applicationId": "a"}))  # no room: waits
        api.compact()
        api.drop_watches()
        add_nodes(api, "n2", cpu="2", memory="4Gi")
        await world.until(lambda: api.bound().get("batch/c") == "n2")
        assert nodes.lists == 2
        assert len(api.served(verb="create", resource="pods/binding")) == 3


async def test_a_budget_that_refuses_is_retried_until_the_deadline_then_the_victim_is_killed(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    api = kube_api
    add_nodes(api, "n1", "n2")
    add_etl_budget(api)
    async with whole_path(api, kafka_settings, tmp_path) as world:
        await world.start_leading()
        await fill_with_batch(world)
        # Two pods fall unready: the budget (7 healthy wanted) is spent, every eviction is a 429.
        spend_etl_budget(api)
        api.create(pod("web", "prod", cpu="1", memory="1Gi", labels={"applicationId": "web"}))
        await world.until(lambda: world.of(d.Kill))
        (kill,) = world.of(d.Kill)
        (preempt,) = world.of(d.Preempt)
        assert kill.allocation == preempt.allocation
        refused = api.served(verb="create", resource="pods/eviction", code=429)
        assert len(refused) >= 2, "retried while the budget was spent"
        assert not evicted(world)
        await world.until(lambda: prod_bound(api))
        deletes = [s for s in api.served(verb="delete", resource="pods") if s.code == 200]
        assert len(deletes) == 1
        assert deletes[0].body["gracePeriodSeconds"] == 0
        assert deletes[0].body["preconditions"]["uid"]
        assert f"{deletes[0].namespace}/{deletes[0].name}" not in api.bound()
        assert prod_bound(api) == {"prod/web": preempt.node}


async def test_a_node_cordoned_mid_grace_gets_no_beneficiary_until_it_is_uncordoned(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    api = kube_api
    add_nodes(api, "n1", "n2")
    # A long grace: the victims chosen on the other node after the cordon are never killed in this test.
    async with whole_path(api, kafka_settings, tmp_path, QUEUES.replace("grace: 3.0", "grace: 600.0")) as world:
        await world.start_leading()
        await fill_with_batch(world)
        api.create(pod("web", "prod", cpu="2", memory="2Gi", labels={"applicationId": "web"}))
        await world.until(lambda: len(api.terminating()) == 2)
        (target,) = {p.node for p in world.of(d.Preempt)}
        api.modify("nodes", target, {"spec": {"unschedulable": True}})
        api.finish_terminations()
        chosen = {p.allocation for p in world.of(d.Preempt)}
        await world.until(lambda: chosen <= world.released())
        assert "prod/web" not in api.bound()
        api.modify("nodes", target, {"spec": {"unschedulable": False}})
        await world.until(lambda: prod_bound(api))
        assert prod_bound(api) == {"prod/web": target}


async def test_a_node_deleted_mid_grace_loses_its_pods_and_the_beneficiary_waits_for_room_elsewhere(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    api = kube_api
    add_nodes(api, "n1", "n2")
    async with whole_path(api, kafka_settings, tmp_path) as world:
        await world.start_leading()
        await fill_with_batch(world)
        api.create(pod("web", "prod", cpu="2", memory="2Gi", labels={"applicationId": "web"}))
        await world.until(lambda: len(api.terminating()) == 2)
        (target,) = {p.node for p in world.of(d.Preempt)}
        api.remove("nodes", target)
        lost = await world.until(lambda: len(world.of(d.AllocationLost)) == 4 and world.of(d.AllocationLost))
        assert {x.node for x in lost} == {target}
        api.finish_terminations()  # the victims' kubelet went with its node
        # batch is down to its guarantee on the node left: nothing more may be preempted; a new node serves.
        add_nodes(api, "n3")
        await world.until(lambda: prod_bound(api))
        assert prod_bound(api) == {"prod/web": "n3"}
        assert len(world.of(d.Preempt)) == 2
        assert target not in {s.body["target"]["name"] for s in api.served(verb="create", resource="pods/binding")[8:]}


async def test_a_shim_killed_mid_preemption_and_restarted_closes_the_loop_and_binds_each_pod_once(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    api = kube_api
    add_nodes(api, "n1", "n2")
    async with whole_path(api, kafka_settings, tmp_path) as world:
        first = await world.start_leading()
        batch = await fill_with_batch(world)
        add_app_pods(api, "prod", "web", "web-0", "web-1", cpu="2", memory="2Gi")
        await world.until(lambda: len(api.terminating()) == 4)
        chosen = victims(world)
        await world.kill(first)
        api.finish_terminations()  # the victims go while no shim watches
        evictions = len(api.served(verb="create", resource="pods/eviction"))
        await world.start_leading()
        await world.until(lambda: len(prod_bound(api)) == 2)
        assert len(api.served(verb="create", resource="pods/eviction")) == evictions, "evicted a pod already gone"
        binds = [f"{s.namespace}/{s.name}" for s in api.served(verb="create", resource="pods/binding")]
        assert sorted(binds) == sorted(set(binds)), "a pod bound twice"
        assert set(binds) == set(batch) | {"prod/web-0", "prod/web-1"}
        assert not chosen & set(api.bound())


async def test_a_pod_gone_while_the_watch_was_down_is_released_after_the_relist(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    api = kube_api
    add_nodes(api, "n1", cpu="2", memory="4Gi")
    async with whole_path(api, kafka_settings, tmp_path) as world:
        shim = (await world.start_leading()).shim
        add_app_pods(api, "batch", "a", "a", "b")
        await world.until_bound("batch/a", "batch/b")
        (allocation,) = await world.until(lambda: world.allocations_of("batch/a"))
        # In one step of the event loop: the watches drop, the pod goes, the history is compacted; the
        # shim's watch cannot see the deletion, and resuming it is a 410.
        api.drop_watches()
        api.remove("pods", "a", "batch", grace=0)
        api.compact()
        await world.until(lambda: allocation in world.released())
        assert shim.informers["pods"].lists == 2
        api.create(pod("c", "batch", labels={"applicationId": "a"}))  # the room freed is handed out again
        await world.until(lambda: api.bound().get("batch/c") == "n1")


async def test_a_restarted_shim_keeps_the_queues_its_placement_created_for_running_apps(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """Without a queues file each namespace's queue is created; a restarted shim must publish them again
    with any new one (Sniper refuses a configuration that drops a queue in use, and the new app with it)."""
    api = kube_api
    add_nodes(api, "n1")
    async with whole_path(api, kafka_settings, tmp_path, queues=None) as world:
        first = await world.start_leading()
        api.create(pod("a", "alpha", labels={"applicationId": "a"}))
        await world.until_bound("alpha/a")
        await world.kill(first)
        api.create(pod("x", "aaa", labels={"applicationId": "x"}))  # listed before alpha's pod on restart
        shim = (await world.start_leading()).shim
        api.create(pod("b", "beta", labels={"applicationId": "b"}))
        await world.until_bound("aaa/x", "beta/b")
        assert all(shim.view.config.leaf(f"root.{q}") for q in ("alpha", "aaa", "beta"))
        assert not world.of(d.Rejected)


async def test_a_pod_deleted_while_no_shim_ran_is_released_by_the_restarted_one_and_its_name_scheduled_again(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    api = kube_api
    add_nodes(api, "n1", cpu="2", memory="4Gi")
    async with whole_path(api, kafka_settings, tmp_path) as world:
        first = await world.start_leading()
        add_app_pods(api, "prod", "web", "web-0", "web-1")
        await world.until_bound("prod/web-0", "prod/web-1")
        (allocation,) = await world.until(lambda: world.allocations_of("prod/web-0"))
        await world.kill(first)
        api.remove("pods", "web-0", "prod", grace=0)  # no list will ever show this deletion
        api.create(pod("web-0", "prod", labels={"applicationId": "web"}))  # its StatefulSet makes it again
        await world.start_leading()
        await world.until(lambda: allocation in world.released())
        await world.until_bound("prod/web-0")  # the room and the name are free again
        await world.until(lambda: len(world.allocations_of("prod/web-0")) >= 2)
        assert len(world.allocations_of("prod/web-0")) == 2


async def test_a_shim_reading_old_decisions_never_binds_a_new_pod_with_an_allocation_already_released(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """A shim whose consumer group is new (its offsets expired) reads every decision again: the old
    ``allocated`` of ``web-0`` must not bind the pod that now waits under that name."""
    api = kube_api
    add_nodes(api, "n1")
    async with whole_path(api, kafka_settings, tmp_path) as world:
        first = await world.start_leading()
        add_app_pods(api, "prod", "web", "web-0", "web-1")
        await world.until_bound("prod/web-0", "prod/web-1")
        (old,) = await world.until(lambda: world.allocations_of("prod/web-0"))
        api.remove("pods", "web-0", "prod", grace=0)
        await world.until(lambda: old in world.released())
        await world.kill(first)
        api.create(pod("web-0", "prod", labels={"applicationId": "web"}))
        await world.start_leading(group=f"{kafka_settings.prefix}k8s-fresh")
        await world.until_bound("prod/web-0")
        carried = api.get("pods", "web-0", "prod")["metadata"]["annotations"]["sniper.apache.org/allocation"]
        assert carried != old
        assert carried in {a.allocation for a in world.of(d.Allocated) if a.ask == "prod/web-0"}
