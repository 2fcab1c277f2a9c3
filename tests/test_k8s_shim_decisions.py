"""Which decisions ``sniper k8s`` acts on (each ``(partition, seq)`` once, never a deposed core's), which pods
a decision names, and how ``--queues`` is read: the shim's pure parts, without an API server or a broker."""

from __future__ import annotations

from typing import Any, cast

import pytest

from sniper.kubernetes.client import Apis
from sniper.kubernetes.shim import QueuesSource, Shim, ShimOptions, _subject, decisions_group
from sniper.kubernetes.view import ClusterView, default_partition
from sniper.messages import decisions as d
from tests.kube_apiserver import pod


def shim() -> Shim:
    nothing: Any = None
    apis = Apis(nothing, nothing, nothing, nothing, nothing, "sniper")
    return Shim(apis, cast(Any, nothing), ShimOptions(partition="p"), config=default_partition("p"))


def released(seq: int, epoch: int, partition: str = "p") -> d.Released:
    return d.Released(
        partition=partition, seq=seq, epoch=epoch, allocation="a", app="x", queue="root.q", node="n", resource={}
    )


def test_each_seq_is_acted_on_once_and_a_deposed_cores_late_decisions_are_dropped() -> None:
    s = shim()
    assert s._fresh(released(5, 2))
    assert not s._fresh(released(5, 2)), "read again after a restart: acted on already"
    assert not s._fresh(released(4, 2))
    assert not s._fresh(released(9, 1)), "a lower epoch: a deposed owner's output"
    assert s._fresh(released(6, 2))
    assert s._fresh(released(1, 3)), "a new owner goes on under a higher epoch"
    assert not s._fresh(released(7, 2))
    assert not s._fresh(released(2, 3, partition="other")), "another partition's"
    assert s.acted == (3, 1)


def test_decisions_about_one_allocation_or_ask_share_a_subject_and_others_do_not() -> None:
    bind = d.Allocated(allocation="a1", app="x", ask="ns/p", queue="q", node="n", resource={})
    kill = d.Kill(allocation="a1", app="x", queue="q", node="n")
    reserved = d.NodeReserved(reservation="r", app="x", ask="ns/p", queue="q", node="n", resource={}, expires=1.0)
    other = d.Kill(allocation="a2", app="x", queue="q", node="n")
    assert _subject(bind) == _subject(kill) != _subject(other)
    assert _subject(reserved) == "ask/x/ns/p"


def test_queues_are_a_file_or_a_config_map_and_a_half_named_config_map_is_refused() -> None:
    assert QueuesSource.parse(None) == QueuesSource()
    assert QueuesSource.parse("queues.yaml").path is not None
    assert QueuesSource.parse("configmap:sniper/sniper-queues").config_map == ("sniper", "sniper-queues")
    for bad in ("configmap:sniper", "configmap:/name", "configmap:ns/", "configmap:a/b/c"):
        with pytest.raises(ValueError, match="configmap:NAMESPACE/NAME"):
            QueuesSource.parse(bad)


def test_a_rejection_names_the_pods_of_its_ask_or_without_an_ask_every_pod_of_its_app() -> None:
    view = ClusterView("p", "sniper", default_partition("p"))
    for i, name in enumerate(("a", "b")):
        obj = pod(name, "batch", labels={"applicationId": "etl"})
        obj["metadata"].update(uid=f"uid-{i}", resourceVersion=str(i + 1))
        view.on_pod("ADDED", obj, 1.0)
    other = pod("c", "batch", labels={"applicationId": "web"})
    other["metadata"].update(uid="uid-c", resourceVersion="3")
    view.on_pod("ADDED", other, 1.0)
    names = lambda app, ask: [p["metadata"]["name"] for p in view.pods_of(app, ask)]  # noqa: E731
    assert names("etl", "batch/a") == ["a"]
    assert names("etl", "") == ["a", "b"]
    assert names("web", "") == ["c"]
    assert names("gone", "") == []


def test_the_shims_of_two_partitions_read_decisions_in_groups_of_their_own() -> None:
    one = decisions_group("sniper.", ShimOptions(partition="east"))
    two = decisions_group("sniper.", ShimOptions(partition="west"))
    assert one != two and one == decisions_group("sniper.", ShimOptions(partition="east"))
    assert decisions_group("sniper.", ShimOptions(scheduler_name="other", partition="east")) != one
