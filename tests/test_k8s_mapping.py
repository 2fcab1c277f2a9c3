"""Kubernetes objects onto the feed: quantities, requests, nodes, pod roles, apps, asks, gangs, PriorityClass
and PodDisruptionBudget flags, and what Sniper cannot express; the mapped events are run through the real
scheduling core where the rule is about placement."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sniper.core.resources import QuantityError, parse_quantity
from sniper.kubernetes import mapping
from sniper.kubernetes.objects import (
    ALLOCATION_ANNOTATION,
    KubeObjectError,
    PodRole,
    event_id,
    node_view,
    pod_request,
    pod_role,
    published_capacity,
    quantity,
    resources,
)
from sniper.messages import feed as f
from tests.core_support import Harness, config_of, queue

SCHEDULER = "sniper"


def container(
    requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    return {"name": "c", "image": "busybox", "resources": res, **extra}


def pod(
    name: str = "p",
    namespace: str = "default",
    *,
    containers: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owners: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "1"}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    if owners:
        meta["ownerReferences"] = owners
    body = {"schedulerName": SCHEDULER, "containers": containers or [container({"cpu": "1", "memory": "1Gi"})]}
    return {"metadata": meta, "spec": {**body, **spec}, "status": {"phase": "Pending"}}


def node(name: str, allocatable: dict[str, Any], **extra: Any) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, **extra.pop("labels", {})}
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1", "labels": labels},
        "spec": extra.pop("spec", {}),
        "status": {"allocatable": allocatable, **extra.pop("status", {})},
    }


def anti_affinity(labels: dict[str, str], topology: str = "kubernetes.io/hostname") -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": labels}, "topologyKey": topology}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def node_affinity(*terms: dict[str, Any], preferred: bool = False) -> dict[str, Any]:
    if preferred:
        return {
            "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": terms[0]}]}
        }
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def expression(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


def wire(event: f.Feed) -> f.Feed:
    """The event through the wire's validation, as a core receives it."""
    decoded: f.Feed = msgspec.json.decode(msgspec.json.encode(event), type=f.Feed)
    return decoded


def core(queue_name: str, *nodes: f.NodeAdded) -> Harness:
    """The real scheduling core with one leaf queue and ``nodes``."""
    h = Harness(config_of(queue(queue_name)))
    h.feed(*(wire(n) for n in nodes))
    return h


def submit(h: Harness, queue_path: str, *pods: dict[str, Any]) -> None:
    """Each pod's app (once) and ask, as the shim publishes them, then every allocation cycle."""
    apps: set[str] = set()
    for p in pods:
        app = mapping.map_app(p, queue=queue_path)
        if app.app not in apps:
            apps.add(app.app)
            h.feed(wire(app.feed_event(partition="default", t=0, event_id=f"app/{app.app}")))
        h.feed(wire(mapping.map_pod(p).feed_event(partition="default", t=0, event_id=event_id("pod", p))))
    h.settle()


# --- quantities -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "up", "down"),
    [
        ("cpu", "500m", 500, 500),
        ("cpu", "2", 2000, 2000),
        ("cpu", "1.5", 1500, 1500),
        ("cpu", "1e3", 1_000_000, 1_000_000),
        ("cpu", "100u", 1, 0),  # a tenth of a milli-core
        ("cpu", 3, 3000, 3000),
        ("memory", "4Gi", 4096, 4096),
        ("memory", "128974848", 123, 123),
        ("memory", "129e6", 124, 123),  # 123.02 MiB
        ("memory", "1288490188800m", 1229, 1228),  # the API server's "1.2Gi"
        ("memory", "1E3", 1, 0),  # an exponent, not exa
        ("memory", "1E", 953_674_316_407, 953_674_316_406),  # exa
        ("memory", "1Ei", 2**40, 2**40),
        ("nvidia.com/gpu", "2", 2, 2),
        ("ephemeral-storage", "10Gi", 10 * 2**30, 10 * 2**30),  # bytes, as a queues.yaml counts it
        ("pods", "110", 110, 110),
    ],
)
def test_kubernetes_quantities_become_sniper_units_rounded_up_for_requests_and_down_for_capacity(
    name: str, value: object, up: int, down: int
) -> None:
    assert quantity(name, value, round_up=True) == up
    assert quantity(name, value, round_up=False) == down


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("lots", "cannot parse"),
        ("-1", "negative"),
        ("", "cannot parse"),
        ("1e99", "out of range"),
        ("1e-99", "out of range"),
        (True, "boolean"),
        (None, "not a quantity"),
        ("9" * 70, "too large"),
    ],
)
def test_a_bad_quantity_is_a_clear_error_naming_the_field(value: object, fragment: str) -> None:
    with pytest.raises(KubeObjectError, match=fragment) as info:
        resources({"memory": value}, "spec.containers[0].resources.requests", round_up=True)
    assert str(info.value).startswith("spec.containers[0].resources.requests.memory: memory:")


@given(st.integers(0, 10**15), st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]))
def test_every_way_the_api_server_writes_an_amount_means_the_same(milli: int, name: str) -> None:
    """``1500m``, ``1.5``, ``15e-1`` and ``1500e-3`` are one amount; rounded down it is never above rounded up,
    and never more than one unit below."""
    whole, fraction = divmod(milli, 1000)
    forms = [f"{milli}m", f"{whole}.{fraction:03d}", f"{milli}e-3", f"{milli * 1000}u"]
    if fraction == 0:
        forms += [str(whole), f"{whole}e0"]
    ups = {quantity(name, form, round_up=True) for form in forms}
    downs = {quantity(name, form, round_up=False) for form in forms}
    assert len(ups) == 1 and len(downs) == 1
    assert downs.pop() <= (up := ups.pop()) <= quantity(name, f"{milli}m", round_up=False) + 1
    if name == "cpu":
        assert up == milli


def test_a_queue_config_keeps_refusing_what_only_api_objects_write() -> None:
    """One grammar, two readers: exponents and a milli memory are Kubernetes' wire forms, not a config's."""
    with pytest.raises(QuantityError, match="cannot parse"):
        parse_quantity("memory", "1e3")
    with pytest.raises(QuantityError, match="milli suffix"):
        parse_quantity("memory", "500m")
    assert quantity("memory", "500m", round_up=True) == 1


# --- pod requests ---------------------------------------------------------------------------------------


def test_a_pods_request_sums_its_containers_and_counts_a_limit_without_a_request_at_the_limit() -> None:
    p = pod(
        containers=[
            container({"cpu": "500m", "memory": "1Gi"}),
            container(limits={"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "1"}),
            container({"cpu": "250m"}, limits={"cpu": "2"}),  # a request below its limit stays the request
        ]
    )
    assert pod_request(p) == {"vcore": 1750, "memory": 3072, "nvidia.com/gpu": 1, "pods": 1}


def test_an_init_container_larger_than_the_containers_sets_the_request() -> None:
    p = pod(
        containers=[container({"cpu": "1", "memory": "1Gi"})],
        initContainers=[container({"cpu": "4"}), container({"memory": "512Mi"})],
    )
    assert pod_request(p) == {"vcore": 4000, "memory": 1024, "pods": 1}


def test_sidecars_add_to_the_containers_and_to_every_init_container_started_after_them() -> None:
    p = pod(
        containers=[container({"cpu": "1", "memory": "1Gi"})],
        initContainers=[
            container({"cpu": "3"}),  # before the sidecar: alone
            container({"cpu": "500m", "memory": "256Mi"}, restartPolicy="Always"),  # a sidecar
            container({"cpu": "2", "memory": "2Gi"}),  # beside the sidecar: 2.5 cores, 2.25 GiB
        ],
    )
    assert pod_request(p) == {"vcore": 3000, "memory": 2304, "pods": 1}
    without_early_init = pod(containers=p["spec"]["containers"], initContainers=p["spec"]["initContainers"][1:])
    assert pod_request(without_early_init) == {"vcore": 2500, "memory": 2304, "pods": 1}


def test_the_pods_overhead_is_added_and_a_pod_that_asks_for_nothing_still_takes_a_pod_slot() -> None:
    p = pod(containers=[container({"cpu": "1"})], overhead={"cpu": "250m", "memory": "120Mi"})
    assert pod_request(p) == {"vcore": 1250, "memory": 120, "pods": 1}
    assert pod_request(pod(containers=[container()])) == {"pods": 1}


# --- nodes ----------------------------------------------------------------------------------------------


def test_a_nodes_capacity_is_its_allocatable_rounded_down_with_its_labels() -> None:
    n = node(
        "n1",
        {"cpu": "15900m", "memory": "64425558015", "pods": "110", "nvidia.com/gpu": "4", "hugepages-1Gi": "0"},
        labels={"zone": "a"},
    )
    view = node_view(n)
    assert view.allocatable == {"vcore": 15900, "memory": 61440, "pods": 110, "nvidia.com/gpu": 4}
    assert view.labels == {"kubernetes.io/hostname": "n1", "zone": "a"}
    assert view.schedulable and view.why_unschedulable == ()
    fraction = node_view(node("n2", {"memory": "1048575"}))  # a byte short of a MiB: none promised
    assert fraction.allocatable == {}


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"spec": {"unschedulable": True}}, "cordoned (spec.unschedulable)"),
        ({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, "condition Ready=False"),
        ({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}, "condition Ready=Unknown"),
        ({"spec": {"taints": [{"key": "gpu", "value": "a100", "effect": "NoSchedule"}]}}, "taint gpu=a100:NoSchedule"),
        (
            {"spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}},
            "taint node.kubernetes.io/unreachable:NoExecute",
        ),
    ],
)
def test_a_cordoned_not_ready_or_tainted_node_is_unschedulable_with_the_reason(extra: dict[str, Any], why: str) -> None:
    view = node_view(node("n1", {"cpu": "4"}, **extra))
    assert not view.schedulable
    assert view.why_unschedulable == (why,)


def test_a_ready_node_with_only_a_soft_taint_stays_schedulable() -> None:
    n = node(
        "n1",
        {"cpu": "4"},
        spec={"taints": [{"key": "spot", "effect": "PreferNoSchedule"}]},
        status={"conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}]},
    )
    assert node_view(n).schedulable


def test_a_node_with_a_bad_allocatable_is_an_error_naming_the_node() -> None:
    with pytest.raises(KubeObjectError, match=r"^node n1: status\.allocatable\.cpu: vcore: cannot parse"):
        node_view(node("n1", {"cpu": "four"}))


def test_foreign_pods_take_their_requests_off_the_published_capacity_never_below_zero() -> None:
    allocatable = {"vcore": 4000, "memory": 8192, "pods": 110}
    daemon = pod_request(pod("ds", containers=[container({"cpu": "100m", "memory": "200Mi"})]))
    greedy = {"vcore": 5000, "nvidia.com/gpu": 1}  # more cpu than the node, a resource it lacks
    assert published_capacity(allocatable, [daemon]) == {"vcore": 3900, "memory": 7992, "pods": 109}
    assert published_capacity(allocatable, [daemon, greedy]) == {"vcore": 0, "memory": 7992, "pods": 109}
    assert allocatable == {"vcore": 4000, "memory": 8192, "pods": 110}  # not changed in place


def test_room_foreign_pods_take_is_never_handed_out_by_the_core() -> None:
    """Two 4-core nodes: a 3-core foreign pod on n1, a 3-core Sniper pod on n2. A 2-core ask waits (the
    foreign room is not free); the foreign pod gone, it is placed on n1."""
    view = node_view(node("n1", {"cpu": "4", "memory": "8Gi", "pods": "110"}))
    foreign = pod_request(pod("other", containers=[container({"cpu": "3"})], nodeName="n1", schedulerName="x"))
    h = core(
        "default",
        f.NodeAdded(node="n1", capacity=published_capacity(view.allocatable, [foreign]), labels=view.labels),
        f.NodeAdded(node="n2", capacity=view.allocatable),
    )
    submit(h, "root.default", pod("filler", containers=[container({"cpu": "3"})]))
    assert h.placements() == [("default/filler", "n2")]
    submit(h, "root.default", pod("want", containers=[container({"cpu": "2"})]))
    assert h.placements() == [("default/filler", "n2")]
    h.feed(wire(f.NodeUpdated(node="n1", capacity=view.allocatable)))
    h.settle()
    assert h.placements() == [("default/filler", "n2"), ("default/want", "n1")]


# --- pod roles and ids ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "role"),
    [
        ({}, PodRole.ASK),
        ({"spec": {"schedulerName": "default-scheduler"}}, PodRole.NOT_OURS),
        ({"spec": {"schedulerName": None}}, PodRole.NOT_OURS),  # no name: the default scheduler's
        ({"spec": {"nodeName": "n1"}, "annotations": {ALLOCATION_ANNOTATION: "alloc-3"}}, PodRole.PLACED),
        ({"spec": {"nodeName": "n1"}}, PodRole.FOREIGN),  # bound by hand: never Sniper's to move
        ({"spec": {"nodeName": "n1", "schedulerName": "other"}}, PodRole.FOREIGN),
        ({"spec": {"nodeName": "n1"}, "phase": "Succeeded"}, PodRole.FINISHED),
        ({"phase": "Failed"}, PodRole.FINISHED),
        ({"spec": {"schedulingGates": [{"name": "quota"}]}}, PodRole.GATED),
        ({"deleting": True}, PodRole.FINISHED),
    ],
)
def test_a_pods_role_for_the_shim(changes: dict[str, Any], role: PodRole) -> None:
    p = pod(annotations=changes.get("annotations"))
    p["spec"].update(changes.get("spec", {}))
    if "phase" in changes:
        p["status"]["phase"] = changes["phase"]
    if changes.get("deleting"):
        p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert pod_role(p, SCHEDULER) is role


def test_event_ids_derive_from_the_objects_uid_and_version() -> None:
    p = pod("web-1")
    assert event_id("pod", p) == "pod/uid-web-1/1"
    p["metadata"]["resourceVersion"] = "2"
    assert event_id("pod", p) == "pod/uid-web-1/2"
    del p["metadata"]["uid"]
    with pytest.raises(KubeObjectError, match=r"metadata\.uid"):
        event_id("pod", p)


@pytest.mark.parametrize(
    ("labels", "annotations", "owners", "app"),
    [
        ({"applicationId": "spark-7"}, None, None, "spark-7"),
        ({"yunikorn.apache.org/app-id": "y-1", "applicationId": "spark-7"}, None, None, "y-1"),
        ({"applicationId": "spark-7"}, {"yunikorn.apache.org/app-id": "from-annotation"}, None, "from-annotation"),
        ({"spark-app-selector": "spark-9"}, None, None, "spark-9"),
        (None, None, [{"kind": "Job", "name": "train", "controller": True}], "Job/ml/train"),
        (
            None,
            None,
            [{"kind": "ConfigMap", "name": "cfg"}, {"kind": "ReplicaSet", "name": "web-5d8f", "controller": True}],
            "ReplicaSet/ml/web-5d8f",
        ),
        (None, None, [{"kind": "ConfigMap", "name": "cfg"}], "Pod/ml/p"),  # no controller: the pod itself
        (None, None, None, "Pod/ml/p"),
    ],
)
def test_a_pods_application_is_its_label_or_annotation_else_its_controller_else_itself(
    labels: dict[str, str] | None, annotations: dict[str, str] | None, owners: list[dict[str, Any]] | None, app: str
) -> None:
    assert mapping.app_id(pod("p", "ml", labels=labels, annotations=annotations, owners=owners)) == app


# --- asks -----------------------------------------------------------------------------------------------


def test_a_pod_is_one_ask_keyed_by_namespace_and_name_with_its_priority_and_preemption_policy() -> None:
    p = pod("w-0", "ml", labels={"applicationId": "a1"}, priority=1000, preemptionPolicy="Never")
    ask = mapping.map_pod(p)
    event = wire(ask.feed_event(partition="gpu", t=5, event_id=event_id("pod", p)))
    assert event == f.AskAdded(
        t=5,
        partition="gpu",
        id="pod/uid-w-0/1",
        app="a1",
        ask="ml/w-0",
        resource={"vcore": 1000, "memory": 1024, "pods": 1},
        count=1,
        priority=1000,
        preemption_policy="never",
    )
    assert ask.unexpressed == () and not ask.refused
    assert mapping.map_pod(pod("w-1")).preemption_policy == "preempt_lower_priority"


def test_a_bad_pod_is_an_error_naming_it() -> None:
    with pytest.raises(KubeObjectError, match=r"^pod ml/w-0: spec\.priority"):
        mapping.map_pod(pod("w-0", "ml", priority="high"))
    with pytest.raises(KubeObjectError, match=r"^pod ml/w-0: spec\.containers\[0\]\.resources\.requests\.cpu"):
        mapping.map_pod(pod("w-0", "ml", containers=[container({"cpu": "1x"})]))
    for shapeless in ({"affinity": ["x"]}, {"tolerations": "all"}, {"nodeSelector": ["zone"]}):
        with pytest.raises(KubeObjectError, match=r"^pod ml/w-0: "):
            mapping.map_pod(pod("w-0", "ml", **shapeless))


def test_node_selector_and_a_required_in_affinity_narrow_each_other() -> None:
    p = pod(
        nodeSelector={"gpu": "a100", "kubernetes.io/hostname": "n7"},
        affinity=node_affinity(
            {
                "matchExpressions": [
                    {"key": "gpu", "operator": "In", "values": ["a100", "h100"]},
                    {"key": "zone", "operator": "In", "values": ["b", "a"]},
                ]
            }
        ),
    )
    ask = mapping.map_pod(p)
    assert ask.node_selector == {"gpu": ["a100"], "kubernetes.io/hostname": ["n7"], "zone": ["a", "b"]}
    assert ask.node is None and ask.unexpressed == ()


def test_a_hostname_selector_follows_the_label_so_a_node_named_apart_from_its_host_still_matches() -> None:
    hosts = [
        f.NodeAdded(
            node=f"ip-10-0-0-{i}.internal",
            capacity={"vcore": 4000, "memory": 4096, "pods": 10},
            labels={"kubernetes.io/hostname": f"host-{i}"},
        )
        for i in (1, 2)
    ]
    h = core("default", *hosts)
    submit(h, "root.default", pod("pinned", nodeSelector={"kubernetes.io/hostname": "host-2"}))
    assert h.placements() == [("default/pinned", "ip-10-0-0-2.internal")]


def test_a_match_field_on_the_node_name_is_the_asks_node() -> None:
    p = pod(affinity=node_affinity({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n3"]}]}))
    assert mapping.map_pod(p).node == "n3"


def test_terms_that_each_hold_one_in_on_the_same_key_are_their_union() -> None:
    p = pod(affinity=node_affinity(expression("zone", "In", "a"), expression("zone", "In", "c", "b")))
    ask = mapping.map_pod(p)
    assert ask.node_selector == {"zone": ["a", "b", "c"]} and ask.unexpressed == ()


@pytest.mark.parametrize(
    ("affinity", "fragment"),
    [
        (node_affinity(expression("zone", "NotIn", "a")), "required node affinity zone NotIn"),
        (node_affinity(expression("gpu", "Exists")), "required node affinity gpu Exists"),
        (node_affinity(expression("zone", "In", "a"), expression("gpu", "In", "x")), "2 node selector terms"),
        (node_affinity(), "no terms"),
        (
            {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "zone"}]}},
            "required pod affinity",
        ),
        (anti_affinity({"app": "db"}), "pods other than its own kind"),
    ],
)
def test_a_required_rule_sniper_cannot_express_refuses_the_pod_and_says_why(
    affinity: dict[str, Any], fragment: str
) -> None:
    ask = mapping.map_pod(pod(labels={"app": "web"}, affinity=affinity))
    assert ask.refused
    assert [u.required for u in ask.unexpressed] == [True]
    assert fragment in ask.unexpressed[0].message


def test_a_hard_topology_spread_refuses_the_pod_and_a_soft_one_is_said_and_ignored() -> None:
    hard = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}
    soft = {**hard, "whenUnsatisfiable": "ScheduleAnyway"}
    assert mapping.map_pod(pod(topologySpreadConstraints=[hard])).refused
    ask = mapping.map_pod(pod(topologySpreadConstraints=[soft]))
    assert not ask.refused
    assert ask.unexpressed == (
        mapping.Unexpressed(
            "topology spread constraint on zone (maxSkew 1) is not expressible in Sniper; ignored", False
        ),
    )


def test_preferences_tolerations_and_host_ports_are_said_but_the_pod_is_still_asked_for() -> None:
    p = pod(
        containers=[container({"cpu": "1"}, ports=[{"containerPort": 80, "hostPort": 8080}])],
        affinity={
            **node_affinity(expression("zone", "In", "a"), preferred=True),
            "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]},
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]},
        },
        tolerations=[
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {"key": "spot", "operator": "Exists", "effect": "PreferNoSchedule"},
            {"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"},
            {"operator": "Exists"},
        ],
    )
    ask = mapping.map_pod(p)
    assert not ask.refused
    messages = [u.message for u in ask.unexpressed]
    assert messages[:3] == [
        "preferred node affinity is not expressible in Sniper; ignored",
        "preferred pod anti-affinity is not expressible in Sniper; ignored",
        "preferred pod affinity is not expressible in Sniper; ignored",
    ]
    assert messages[3].startswith("tolerates gpu=a100:NoSchedule, but Sniper places no pod on a node with")
    assert messages[4].startswith("tolerates *:*, but")
    assert messages[5] == "host ports [8080]: Sniper does not check them for conflicts"
    assert len(messages) == 6  # the API server's default tolerations and a soft taint's say nothing


def test_self_anti_affinity_on_the_hostname_keeps_replicas_on_different_nodes_in_the_core() -> None:
    labels = {"app": "web", "tier": "front"}
    replicas = [pod(f"web-{i}", labels=labels, affinity=anti_affinity({"app": "web"})) for i in range(3)]
    asks = [mapping.map_pod(r) for r in replicas]
    assert asks[0].constraints == (f.PlacementConstraint(scope="node", op="not_in", tags=list(asks[0].tags)),)
    assert len(asks[0].tags) == 1 and all(a.tags == asks[0].tags for a in asks)
    nodes = [f.NodeAdded(node=f"n{i}", capacity={"vcore": 8000, "memory": 8192, "pods": 10}) for i in range(2)]
    h = core("default", *nodes)
    submit(h, "root.default", *replicas)
    assert sorted(node for _, node in h.placements()) == ["n0", "n1"]  # the third waits: both nodes hold one
    plain = core("default", *nodes)
    submit(plain, "root.default", *(pod(f"web-{i}", labels=labels) for i in range(3)))
    assert len(plain.placements()) == 3  # without the term, all three fit


def test_self_anti_affinity_on_another_topology_scopes_the_constraint_to_that_label() -> None:
    ask = mapping.map_pod(
        pod(labels={"app": "db"}, affinity=anti_affinity({"app": "db"}, "topology.kubernetes.io/zone"))
    )
    assert [c.scope for c in ask.constraints] == ["topology.kubernetes.io/zone"]


def test_anti_affinity_tags_differ_by_namespace_and_a_long_selector_still_fits_a_tag() -> None:
    a = mapping.map_pod(pod("p", "ns-a", labels={"app": "x"}, affinity=anti_affinity({"app": "x"})))
    b = mapping.map_pod(pod("p", "ns-b", labels={"app": "x"}, affinity=anti_affinity({"app": "x"})))
    assert a.tags != b.tags
    long_labels = {f"key-{i}": "v" * 40 for i in range(10)}
    ask = mapping.map_pod(pod(labels=long_labels, affinity=anti_affinity(long_labels)))
    assert len(ask.tags[0]) <= 256
    wire(ask.feed_event(partition="default", t=0, event_id="x"))  # valid on the wire


# --- gangs ----------------------------------------------------------------------------------------------

TASK_GROUPS = json.dumps(
    [{"name": "workers", "minMember": 3, "minResource": {"cpu": "2"}}, {"name": "driver", "minMember": 1}]
)


def gang_pod(name: str, *, declare: bool = True, **spec: Any) -> dict[str, Any]:
    annotations = {mapping.TASK_GROUP_NAME: "workers"}
    if declare:
        annotations[mapping.TASK_GROUPS] = TASK_GROUPS
    return pod(
        name,
        "ml",
        labels={"applicationId": "train-1"},
        annotations=annotations,
        containers=[container({"cpu": "2", "memory": "4Gi"})],
        **spec,
    )


def test_a_yunikorn_task_group_is_a_gang_with_its_min_member() -> None:
    ask = mapping.map_pod(gang_pod("w-0"))
    assert ask.gang == mapping.Gang(ask="ml/task-group:workers", min_member=3)
    undeclared = gang_pod("w-1", declare=False)
    assert mapping.map_pod(undeclared, task_groups={"workers": 3}).gang == ask.gang  # declared on another pod


def test_a_task_group_declared_nowhere_is_placed_alone_and_said() -> None:
    ask = mapping.map_pod(gang_pod("w-1", declare=False))
    assert ask.gang is None and not ask.refused
    assert ask.unexpressed == (
        mapping.Unexpressed("gang ml/task-group:workers: its minimum is declared nowhere; placed alone", False),
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{not json", "not JSON"),
        (json.dumps([{"name": "workers"}]), "needs a name and an integer minMember"),
        (json.dumps([{"name": "workers", "minMember": -1}]), "negative"),
        (json.dumps({"name": "workers"}), "needs a name"),
    ],
)
def test_a_malformed_task_groups_annotation_is_a_clear_error(text: str, fragment: str) -> None:
    p = gang_pod("w-0")
    p["metadata"]["annotations"][mapping.TASK_GROUPS] = text
    with pytest.raises(KubeObjectError, match=fragment):
        mapping.map_pod(p)


def test_a_scheduler_plugins_pod_group_is_a_gang_with_the_groups_min_member() -> None:
    p = pod("w-0", "ml", labels={"scheduling.x-k8s.io/pod-group": "pg"})
    group = {"metadata": {"name": "pg", "namespace": "ml"}, "spec": {"minMember": 4}}
    assert mapping.map_pod(p, pod_group=group).gang == mapping.Gang(ask="ml/pod-group:pg", min_member=4)
    assert mapping.gang_of(p) is None  # the PodGroup not seen yet
    assert "its minimum is declared nowhere" in mapping.map_pod(p).unexpressed[0].message
    with pytest.raises(KubeObjectError, match=r"spec\.minMember"):
        mapping.map_pod(p, pod_group={"metadata": {"name": "pg"}, "spec": {"minMember": "four"}})


def test_a_gangs_pods_become_one_ask_with_count_and_gang_min() -> None:
    members = mapping.gang_members(
        [
            {
                **gang_pod("w-2"),
                "metadata": {**gang_pod("w-2")["metadata"], "creationTimestamp": "2026-01-01T00:00:02Z"},
            },
            {
                **gang_pod("w-0"),
                "metadata": {**gang_pod("w-0")["metadata"], "creationTimestamp": "2026-01-01T00:00:00Z"},
            },
            {
                **gang_pod("w-1", priority=50),
                "metadata": {**gang_pod("w-1")["metadata"], "creationTimestamp": "2026-01-01T00:00:01Z"},
            },
            {
                **gang_pod("w-3"),
                "metadata": {**gang_pod("w-3")["metadata"], "creationTimestamp": "2026-01-01T00:00:02Z"},
            },
        ]
    )
    assert [m["metadata"]["name"] for m in members] == ["w-0", "w-1", "w-2", "w-3"]
    asks = [mapping.map_pod(m) for m in members]
    asks[3] = mapping.map_pod(gang_pod("w-3", overhead={"memory": "1Gi"}))
    whole = mapping.gang_ask(asks)
    assert (whole.ask, whole.count, whole.gang_min, whole.priority) == ("ml/task-group:workers", 4, 3, 50)
    assert whole.resource == {"vcore": 2000, "memory": 5120, "pods": 1}  # the largest member's
    assert not whole.refused
    event = wire(whole.feed_event(partition="default", t=0, event_id="gang"))
    assert isinstance(event, f.AskAdded) and (event.count, event.gang_min) == (4, 3)


def test_gang_members_that_must_run_in_different_places_cannot_be_one_ask() -> None:
    asks = [mapping.map_pod(gang_pod("w-0")), mapping.map_pod(gang_pod("w-1", nodeSelector={"zone": "b"}))]
    whole = mapping.gang_ask(asks)
    assert whole.refused
    assert "ml/w-1 differ from ml/w-0 in where they may run" in whole.unexpressed[-1].message
    with pytest.raises(ValueError, match="not the member of a gang"):
        mapping.gang_ask([mapping.map_pod(pod())])


def test_a_gang_ask_is_placed_all_or_nothing_by_the_core() -> None:
    """Three workers of two cores, gang of three, on three two-core nodes one of which a core is taken
    on: none is placed; that core freed, all three are."""
    nodes = [f.NodeAdded(node=f"n{i}", capacity={"vcore": 2000, "memory": 8192, "pods": 10}) for i in range(3)]
    h = core("ml", *nodes)
    submit(h, "root.ml", pod("filler", "ml", containers=[container({"cpu": "1"})]))
    [filler] = h.allocated()
    members = [gang_pod(f"w-{i}") for i in range(3)]
    h.feed(wire(mapping.map_app(members[0], queue="root.ml").feed_event(partition="default", t=0, event_id="train")))
    whole = mapping.gang_ask([mapping.map_pod(m) for m in members])
    h.feed(wire(whole.feed_event(partition="default", t=1, event_id="gang")))
    h.settle()
    assert [ask for ask, _ in h.placements()] == ["ml/filler"]
    h.feed(wire(f.AllocationReleased(allocation=filler.allocation)))
    h.settle()
    assert sorted(node for ask, node in h.placements() if ask == whole.ask) == ["n0", "n1", "n2"]


# --- PriorityClass and PodDisruptionBudget ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "allowed"),
    [
        ({"yunikorn.apache.org/allow-preemption": "false"}, False),
        ({"yunikorn.apache.org/allow-preemption": "False"}, False),
        ({"yunikorn.apache.org/allow-preemption": "true"}, True),
        ({}, True),
    ],
)
def test_a_priority_class_annotated_allow_preemption_false_protects_the_apps_that_use_it(
    annotations: dict[str, str], allowed: bool
) -> None:
    priority_class = {"metadata": {"name": "critical", "annotations": annotations}, "value": 1000}
    app = mapping.map_app(
        pod(priorityClassName="critical", priority=1000), queue="root.default", priority_class=priority_class
    )
    assert app.allow_preemption is allowed
    assert app.priority == 1000
    event = wire(app.feed_event(partition="default", t=0, event_id="a"))
    assert isinstance(event, f.AppAdded) and event.allow_preemption is allowed
    assert mapping.map_app(pod(), queue="root.default").allow_preemption


def pdb(name: str, namespace: str = "web", selector: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    body = {"selector": {"matchLabels": {"app": "web"}} if selector is None else selector, **spec}
    return {"metadata": {"name": name, "namespace": namespace}, "spec": body}


WEB = [pod(f"web-{i}", "web", labels={"app": "web"}) for i in range(10)]


@pytest.mark.parametrize(
    ("budget", "allowed"),
    [
        ({"maxUnavailable": 2}, 2),
        ({"maxUnavailable": "25%"}, 3),  # 2.5 pods, rounded up
        ({"maxUnavailable": "0%"}, 0),
        ({"minAvailable": 7}, 3),
        ({"minAvailable": "75%"}, 2),  # 7.5 must stay, rounded up to 8
        ({"minAvailable": 12}, 0),  # more than there are: none may go
        ({"minAvailable": "100%"}, 0),
        ({}, None),
    ],
)
def test_a_pod_disruption_budget_is_the_apps_max_disruption(budget: dict[str, Any], allowed: int | None) -> None:
    assert mapping.max_disruption([pdb("b", **budget)], WEB) == allowed


def test_the_tightest_budget_covering_the_app_wins_and_others_do_not_count() -> None:
    budgets = [
        pdb("loose", maxUnavailable=5),
        pdb(
            "tight",
            selector={"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]},
            maxUnavailable=1,
        ),
        pdb("elsewhere", namespace="other", maxUnavailable=0),  # another namespace
        pdb("db", selector={"matchLabels": {"app": "db"}}, maxUnavailable=0),  # other pods
        {"metadata": {"name": "none", "namespace": "web"}, "spec": {"maxUnavailable": 0}},  # no selector: no pod
    ]
    assert mapping.max_disruption(budgets, WEB) == 1
    assert mapping.max_disruption(budgets[2:], WEB) is None
    assert mapping.max_disruption([pdb("all", selector={}, maxUnavailable=4)], WEB) == 4  # {}: every pod of web
    app = mapping.map_app(WEB[0], queue="root.web", pdbs=budgets, app_pods=WEB)
    assert app.max_disruption == 1


def test_a_budget_against_part_of_the_app_counts_the_pods_it_covers() -> None:
    canary = [pod("c-0", "web", labels={"app": "web", "track": "canary"}), pod("c-1", "web", labels={"app": "web"})]
    budget = pdb("canary", selector={"matchLabels": {"track": "canary"}}, minAvailable="50%")
    assert mapping.max_disruption([budget], canary) == 0  # one pod covered, half of it must stay: 1


@pytest.mark.parametrize("value", ["lots", "12.5%", -1, True])
def test_a_bad_budget_is_a_clear_error(value: object) -> None:
    with pytest.raises(KubeObjectError, match=r"PodDisruptionBudget web/b: spec.maxUnavailable"):
        mapping.max_disruption([pdb("b", maxUnavailable=value)], WEB)


def test_a_bad_selector_operator_is_a_clear_error() -> None:
    budget = pdb(
        "b", selector={"matchExpressions": [{"key": "app", "operator": "Like", "values": ["w"]}]}, maxUnavailable=1
    )
    with pytest.raises(KubeObjectError, match="'Like' is not In, NotIn, Exists or DoesNotExist"):
        mapping.max_disruption([budget], WEB)
