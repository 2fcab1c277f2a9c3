"""``sniper k8s`` through the whole path: the API-server stand-in over HTTP, the real broker, a real core.

Each test is written to break one rule of the shim: exactly the chosen victims are evicted, with the
grace, and the beneficiaries bound on the room they free; a restarted shim binds nothing twice and
loses nothing; a dropped watch and a compacted history change nothing; foreign pods' room is never
handed out; only the Lease holder acts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sniper.messages import decisions as d
from sniper.transport.kafka import KafkaSettings
from tests.k8s_shim_support import add_app_pods, add_nodes, evicted, fill_with_batch, victims, whole_path
from tests.kube_apiserver import KubeApiServer, pod

pytestmark = pytest.mark.kafka


async def test_the_large_container_loop_evicts_exactly_the_chosen_victims_with_the_grace_and_binds_prod_there(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    api = kube_api
    add_nodes(api, "n1", "n2")
    async with whole_path(api, kafka_settings, tmp_path) as world:
        await world.start_leading()
        await fill_with_batch(world)
        add_app_pods(api, "prod", "web", "web-0", "web-1", cpu="2", memory="2Gi")
        await world.until(lambda: len(api.terminating()) == 4)
        chosen = victims(world)
        assert set(api.terminating()) == chosen
        assert set(evicted(world)) == chosen
        grace = evicted(world)
        assert all(isinstance(g, int) and 0 < g <= 3 for g in grace.values()), grace
        assert not set(api.bound()) & {"prod/web-0", "prod/web-1"}, "bound before the victims left"
        api.finish_terminations()
        prod = await world.until(lambda: {k: v for k, v in api.bound().items() if k.startswith("prod/")} or None)
        await world.until(lambda: len([k for k in api.bound() if k.startswith("prod/")]) == 2)
        prod = {k: v for k, v in api.bound().items() if k.startswith("prod/")}
        freed = {world_node for world_node in (p.node for p in world.of(d.Preempt))}
        assert set(prod.values()) <= freed
        assert not api.served(code=403), [s.path for s in api.served(code=403)]


async def test_a_restarted_shim_binds_nothing_twice_and_loses_no_pod(
    kube_api: KubeApiServer, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    api = kube_api
    add_nodes(api, "n1")
    async with whole_path(api, kafka_settings, tmp_path) as world:
        first = await world.start_leading()
        add_app_pods(api, "batch", "a", "a-0", "a-1", "a-2")
        await world.until(lambda: len(api.bound()) == 3)
        await world.kill(first)
        api.create(pod("late", "batch", cpu="1", memory="1Gi", labels={"applicationId": "a"}))
        await world.start_leading()
        await world.until_bound("batch/late")
        binds = [s.name for s in api.served(verb="create", resource="pods/binding")]
        assert sorted(binds) == ["a-0", "a-1", "a-2", "late"], binds
        assert len(world.of(d.Allocated)) == 4
