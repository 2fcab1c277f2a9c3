"""The ClusterRole of deploy/kubernetes/ is exactly what ``sniper k8s`` calls: one pass through every path of
the shim (its queues from a ConfigMap, its Lease, Bindings, one answered 409 for a pod bound meanwhile, a
nomination, evictions a budget refuses until their deadline, the kills, a rejection with its Event) is
never refused, and it uses every grant."""

from __future__ import annotations

from pathlib import Path

import pytest

from sniper.kubernetes.process import ProcessOptions, run_shim
from sniper.kubernetes.shim import QueuesSource, Shim, ShimOptions
from sniper.messages import decisions as d
from sniper.transport.kafka import KafkaSettings
from tests.k8s_shim_support import QUEUES, WholePath, fill_with_batch, prod_bound, unready, whole_path
from tests.kube_apiserver import KubeApiServer, node, pod

pytestmark = pytest.mark.kafka


async def start_on_the_config_map(world: WholePath) -> Shim:
    """A leading shim whose queues are the ConfigMap sniper/sniper-queues, as deploy/kubernetes/ runs it."""
    shims: list[Shim] = []
    options = ProcessOptions(
        shim=ShimOptions(queues=QueuesSource(config_map=("sniper", "sniper-queues")), retry_delay=0.2),
        kubeconfig=world.api.kubeconfig,
        identity="shim-a",
        lease_duration=3,
        renew_deadline=2.0,
        retry_period=0.5,
    )

    async def run() -> None:
        await run_shim(world.settings, options, started=shims.append)

    world.tg.start_soon(run)
    await world.until(lambda: shims and shims[-1].ready.is_set())
    return shims[-1]


async def test_every_call_of_the_shim_is_granted_and_every_grant_is_called(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    api = kube_api
    api.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "sniper-queues", "namespace": "sniper"},
            "data": {"queues.yaml": QUEUES},
        }
    )
    api.create(node("n1", cpu="4", memory="8Gi"))
    api.create(node("n2", cpu="4", memory="8Gi"))
    budget = {"maxUnavailable": 4, "selector": {"matchLabels": {"applicationId": "etl"}}}
    api.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "etl", "namespace": "batch"},
            "spec": budget,
        }
    )
    async with whole_path(api, kafka_settings, tmp_path) as world:
        await start_on_the_config_map(world)
        batch = fill_with_batch(world)
        await world.until(lambda: set(batch) <= set(api.bound()))
        for name in ("batch-0", "batch-1", "batch-2", "batch-3", "batch-4"):
            api.modify("pods", name, unready, "batch")  # the budget, 4 healthy pods at least, is spent

        # Prod takes its guarantee back: evictions refused by the budget until the deadline, then the kills.
        for i in range(2):
            api.create(pod(f"web-{i}", "prod", cpu="2", memory="2Gi", labels={"applicationId": "web"}))
        await world.until(lambda: len(prod_bound(api)) == 2)
        assert api.served(verb="create", resource="pods/eviction", code=429)
        assert api.served(verb="delete", resource="pods", code=200)

        # A pod no node can ever hold is rejected, with a condition and an Event.
        api.create(pod("huge", "prod", cpu="64", memory="1Ti", labels={"applicationId": "huge"}))
        await world.until(lambda: world.of(d.Rejected) and api.served(verb="create", resource="events"))

        # A pod bound by someone else while the shim's view of pods lags: its Binding is a 409, then a get.
        # (It waits for room, which n3 brings; the shim saw it arrive, and sees nothing of it after.)
        api.create(pod("late", "batch", cpu="1", memory="1Gi", labels={"applicationId": "etl"}))
        with api.lag("pods"):
            api.modify("pods", "late", {"spec": {"nodeName": "n3"}}, "batch")
            api.create(node("n3", cpu="4", memory="8Gi"))
            await world.until(lambda: api.served(verb="get", resource="pods"))
        assert api.served(verb="create", resource="pods/binding", code=409)

        await world.until(lambda: api.served(verb="update", resource="leases"))  # the leader renewed

    assert not api.rbac_denied, api.rbac_denied
    assert api.unused_grants() == set()
