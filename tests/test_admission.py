"""Admission: what one ask, one app and one partition may hold (``admission`` in queues.yaml), and every
other reason an ask is refused, one row per check in the order they run.

An ask over a bound is refused with the reason and changes nothing; the bounds count running
containers plus those still asked for, whatever their shape (memory-heavy, vcore-heavy, GPU). An ask
that breaks two checks is refused for the first.
"""

from __future__ import annotations

from typing import Any, get_args

import anyio
import pytest
from msgspec.structs import replace

from sniper.cluster.process import CoreProcess
from sniper.core import admission
from sniper.core import resources as res
from sniper.core.cache import Cache
from sniper.core.config import AdmissionConfig, ConfigError, parse_partition
from sniper.core.units import human_resource
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.run import run_simulation
from sniper.transport.bus import DECISIONS, FEED
from sniper.transport.kafka import KafkaBus, KafkaSettings
from tests.core_process_support import WAIT, Decisions, options
from tests.core_support import consistency_problems, partition_raw, queue

TIB = 2**40


def _cache(**admission: Any) -> Cache:
    raw = partition_raw(queue("a"), queue("b"))
    if admission:
        raw["admission"] = admission
    cache = Cache("default", parse_partition(raw))
    cache.handle_event(f.NodeAdded(node="big", capacity={"memory": TIB, "vcore": TIB, "gpu": 1024}))
    cache.handle_event(f.AppAdded(app="a1", queue="root.a"))
    cache.handle_event(f.AppAdded(app="b1", queue="root.b"))
    cache.drain()
    return cache


def _ask(cache: Cache, app: str, ask: str, count: int, resource: dict[str, int] | None = None) -> list[str]:
    cache.handle_event(f.AskAdded(app=app, ask=ask, resource=resource or {"memory": 1024}, count=count))
    return [x.reason for x in cache.drain().decisions if isinstance(x, d.Rejected)]


def test_the_defaults_bound_an_ask_an_app_and_a_partition() -> None:
    bounds = parse_partition(partition_raw(queue("a"))).admission
    assert bounds == AdmissionConfig()
    assert bounds.max_pending_per_ask <= bounds.max_containers_per_app <= bounds.max_containers


@pytest.mark.parametrize(
    "resource",
    [{"memory": 1}, {"vcore": 1}, {"memory": 1, "vcore": 1, "gpu": 1}],
    ids=["memory", "vcore", "gpu"],
)
def test_an_ask_of_ten_million_is_refused_with_the_reason_whatever_its_shape(resource: dict[str, int]) -> None:
    cache = _cache()
    reasons = _ask(cache, "a1", "huge", 10_000_000, resource)
    assert reasons == ["ask a1/huge (count 10000000): over admission.max_pending_per_ask (100000)"]
    assert "huge" not in cache.state.apps["a1"].asks


def test_an_ask_at_the_bound_is_admitted_and_one_more_is_not() -> None:
    cache = _cache(max_pending_per_ask=5)
    assert _ask(cache, "a1", "five", 5) == []
    assert _ask(cache, "a1", "six", 6) == ["ask a1/six (count 6): over admission.max_pending_per_ask (5)"]


def test_an_app_counts_its_running_and_its_pending_containers() -> None:
    cache = _cache(max_containers_per_app=10)
    assert _ask(cache, "a1", "first", 6) == []
    cache.allocate("a1", "first", "big")  # one runs, five still asked for: six held
    cache.drain()
    reasons = _ask(cache, "a1", "second", 5)
    assert reasons == ["ask a1/second (count 5): app a1 would hold 11, over admission.max_containers_per_app (10)"]
    assert _ask(cache, "a1", "third", 4) == []  # exactly ten
    assert _ask(cache, "b1", "other", 4) == []  # another app's bound is its own


def test_a_partition_counts_every_app() -> None:
    cache = _cache(max_containers=8)
    assert _ask(cache, "a1", "x", 5) == []
    reasons = _ask(cache, "b1", "y", 4)
    assert reasons == ["ask b1/y (count 4): the partition would hold 9, over admission.max_containers (8)"]
    assert _ask(cache, "b1", "y", 3) == []


def test_a_withdrawn_ask_frees_its_share_of_the_bound() -> None:
    cache = _cache(max_containers_per_app=4)
    assert _ask(cache, "a1", "x", 4) == []
    cache.handle_event(f.AskRemoved(app="a1", ask="x"))
    assert _ask(cache, "a1", "y", 4) == []


def test_the_partition_bound_follows_containers_placed_released_withdrawn_and_gone_with_their_app() -> None:
    cache = _cache(max_containers=10)

    def held() -> int:
        state = cache.state
        assert consistency_problems(state) == []
        return state.held()

    assert _ask(cache, "a1", "x", 6) == []
    cache.allocate("a1", "x", "big")
    cache.allocate("a1", "x", "big")
    first = sorted(cache.state.apps["a1"].allocations)[0]
    cache.drain()
    assert held() == 6  # two running, four still asked for
    assert _ask(cache, "b1", "y", 5) == [
        "ask b1/y (count 5): the partition would hold 11, over admission.max_containers (10)"
    ]
    cache.handle_event(f.AllocationReleased(allocation=first))
    assert held() == 5
    assert _ask(cache, "b1", "y", 5) == []
    assert held() == 10
    cache.handle_event(f.AskAdded(app="b1", ask="idle", resource={"memory": 1024}, execution_type="opportunistic"))
    reasons = [x.reason for x in cache.drain().decisions if isinstance(x, d.Rejected)]
    assert reasons == ["ask b1/idle (count 1): the partition would hold 11, over admission.max_containers (10)"]
    cache.handle_event(f.AskRemoved(app="b1", ask="y"))
    assert held() == 5
    cache.handle_event(f.AppRemoved(app="a1"))
    assert held() == 0
    assert _ask(cache, "b1", "z", 10) == []
    assert cache.state.held(cache.state.apps["b1"]) == held() == 10


def _apps_added(cache: Cache, *names: str, queue_path: str = "root.a") -> list[tuple[str, str]]:
    for name in names:
        cache.handle_event(f.AppAdded(app=name, queue=queue_path))
    return [(x.code, x.reason) for x in cache.drain().decisions if isinstance(x, d.Rejected)]


def test_a_partition_takes_apps_up_to_max_apps_and_refuses_the_next_with_the_reason() -> None:
    cache = _cache(max_apps=4)  # a1 and b1 are in already
    assert _apps_added(cache, "a2", "b2") == []
    refused = _apps_added(cache, "a3", queue_path="root.b")
    assert refused == [("over_admission", "app a3: the partition holds 4 apps, the most admission.max_apps (4) allows")]
    assert "a3" not in cache.state.apps and len(cache.state.apps) == 4
    assert _ask(cache, "a3", "x", 1) == ["ask x: unknown app a3"]  # the refused app holds nothing


def test_an_app_added_again_is_no_new_app_under_max_apps() -> None:
    cache = _cache(max_apps=2)
    assert _apps_added(cache, "a1") == []  # a repeat of an app the partition holds
    assert _apps_added(cache, "a2") == [
        ("over_admission", "app a2: the partition holds 2 apps, the most admission.max_apps (2) allows")
    ]


def test_a_removed_app_makes_room_for_the_next_however_much_it_held() -> None:
    cache = _cache(max_apps=2)
    assert _ask(cache, "a1", "x", 3) == []
    cache.allocate("a1", "x", "big")
    cache.drain()
    cache.handle_event(f.AppRemoved(app="a1"))
    assert _apps_added(cache, "a2") == []
    assert sorted(cache.state.apps) == ["a2", "b1"]
    assert consistency_problems(cache.state) == []


def test_a_stopped_queue_is_named_before_the_app_bound() -> None:
    raw = partition_raw(queue("a"), queue("s", queue_state="stopped"))
    raw["admission"] = {"max_apps": 1}
    cache = Cache("default", parse_partition(raw))
    assert _apps_added(cache, "a1") == []
    assert [code for code, _ in _apps_added(cache, "s1", queue_path="root.s")] == ["queue_stopped"]
    assert [code for code, _ in _apps_added(cache, "a2")] == ["over_admission"]


@pytest.mark.parametrize("bound", [0, -1, 2**53 + 1, "many", 1.5, None], ids=repr)
def test_a_max_apps_out_of_its_range_or_not_a_count_is_refused_naming_it(bound: object) -> None:
    raw = partition_raw(queue("a"))
    raw["admission"] = {"max_apps": bound}
    with pytest.raises(ConfigError, match="max_apps"):
        parse_partition(raw)


def test_bad_bounds_are_refused_with_where_they_are() -> None:
    raw = partition_raw(queue("a"))
    raw["admission"] = {"max_pending_per_ask": 0}
    with pytest.raises(ConfigError, match="admission"):
        parse_partition(raw)
    raw["admission"] = {"max_pending": 5}
    with pytest.raises(ConfigError, match="max_pending"):
        parse_partition(raw)


def test_simulate_refuses_the_ten_million_ask_at_once_and_goes_on() -> None:
    events: list[f.Feed] = [
        f.PartitionConfigEvent(config=partition_raw(queue("a"))),
        f.NodeAdded(node="big", capacity={"memory": TIB, "vcore": TIB}),
        f.AppAdded(t=1, app="a1", queue="root.a"),
        f.AskAdded(t=1, app="a1", ask="huge", resource={"memory": 1, "vcore": 1}, count=10_000_000),
        f.AskAdded(t=2, app="a1", ask="small", resource={"memory": 1, "vcore": 1}, count=3, duration=5),
    ]
    result = run_simulation(events)
    rejected = [x for x in result.decisions if isinstance(x, d.Rejected)]
    assert [(x.ask, x.reason) for x in rejected] == [
        ("huge", "ask a1/huge (count 10000000): over admission.max_pending_per_ask (100000)")
    ]
    assert sum(isinstance(x, d.Allocated) and x.ask == "small" for x in result.decisions) == 3


async def test_on_kafka_the_ten_million_ask_is_refused_with_the_reason_and_the_partition_answers_on(
    kafka_settings: KafkaSettings, bus: KafkaBus
) -> None:
    events: list[f.Feed] = [
        f.PartitionConfigEvent(partition="p1", config=partition_raw(queue("a"), name="p1")),
        f.NodeAdded(partition="p1", node="big", capacity={"memory": TIB, "vcore": TIB}),
        f.AppAdded(partition="p1", app="a1", queue="root.a"),
        f.AskAdded(partition="p1", app="a1", ask="huge", resource={"memory": 1}, count=10_000_000),
        f.AskAdded(partition="p1", app="a1", ask="small", resource={"memory": 1}, count=2),
    ]
    with anyio.fail_after(WAIT):
        reader = Decisions(await bus.subscribe_ready(DECISIONS, group=bus.settings.prefix + "reader"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.pump)
            await tg.start(CoreProcess(kafka_settings, options()).run)
            await bus.publish_many(FEED, [(e.partition, e) for e in events])
            await reader.until(lambda _: len(reader.of(d.Allocated)) == 2)
            tg.cancel_scope.cancel()
    assert [(x.ask, x.reason) for x in reader.of(d.Rejected)] == [
        ("huge", "ask a1/huge (count 10000000): over admission.max_pending_per_ask (100000)")
    ]
    assert {x.ask for x in reader.of(d.Allocated)} == {"small"}


# ---------------------------------------------------------------------- every refusal, in the order they run


def _judged(event: f.AskAdded) -> tuple[str | None, str]:
    """The code and reason the cache rejects ``event`` with (``None``, ``""``: admitted), checked against
    what :func:`sniper.core.admission.refusal` says on the state before it."""
    raw = partition_raw(queue("a"), queue("c", maximum={"memory": 2048}))
    raw["admission"] = {"max_pending_per_ask": 5}
    cache = Cache("default", parse_partition(raw))
    cache.handle_event(f.NodeAdded(node="big", capacity={"memory": TIB, "vcore": TIB, "gpu": 1024}))
    cache.handle_event(f.AppAdded(app="a1", queue="root.a"))
    cache.handle_event(f.AppAdded(app="c1", queue="root.c"))
    cache.drain()
    said = admission.refusal(cache.state, event, res.normalized(event.resource), cache.shapes)
    cache.handle_event(event)
    rejected = [x for x in cache.drain().decisions if isinstance(x, d.Rejected)]
    assert [(x.code, x.reason, x.resource, x.bound) for x in rejected] == (
        [] if said is None else [(said.code, said.reason, said.resource or {}, said.bound or {})]
    )
    app = cache.state.apps.get(event.app)
    assert (app is not None and event.ask in app.asks) is (said is None)
    return (None, "") if said is None else (said.code, said.reason)


HALF = TIB // 2 + 1  # two of them never fit the one node
ASK = f.AskAdded(app="a1", ask="x", resource={"memory": 1024})
NO_TAGS = (f.PlacementConstraint(tags=[]),)
# One row per check, in the order they run: the ask that breaks it and the code it gets.
REFUSALS: list[tuple[str, f.AskAdded, str, str]] = [
    ("an ask of an unknown app", replace(ASK, app="ghost"), "unknown_app", "ask x: unknown app ghost"),
    ("an ask for nothing", replace(ASK, resource={"memory": 0}), "empty_ask", "ask a1/x asks for nothing"),
    (
        "an opportunistic application master",
        replace(ASK, am=True, execution_type="opportunistic"),
        "opportunistic_am",
        "ask a1/x: an application master cannot be opportunistic",
    ),
    (
        "a count past the admission bound",
        replace(ASK, count=6),
        "over_admission",
        "ask a1/x (count 6): over admission.max_pending_per_ask (5)",
    ),
    (
        "a constraint that names no tags",
        replace(ASK, constraints=NO_TAGS),
        "bad_constraint",
        "ask a1/x: constraint 1 (in per node) names no tags",
    ),
    (
        "a gang larger than its count",
        replace(ASK, count=2, gang_min=3),
        "gang_over_count",
        "ask a1/x: gang_min 3 is more than its count 2",
    ),
    (
        "an ask larger than its queue's max",
        replace(ASK, app="c1", resource={"memory": 4096}),
        "over_queue_max",
        "ask c1/x (4 GiB) can never fit queue root.c's max (2 GiB)",
    ),
    (
        "a node selector no node matches",
        replace(ASK, node_selector={"zone": ["mars"]}),
        "no_matching_node",
        "ask a1/x: no node matches its node selector {'zone': ['mars']}",
    ),
    (
        "a resource no node has",
        replace(ASK, resource={"memory": 1, "fpga": 1}),
        "never_fits",
        "ask a1/x (1 MiB, fpga 1) names resources no node has: fpga",
    ),
    (
        "a gang no set of nodes holds together",
        replace(ASK, resource={"memory": HALF}, count=2, gang_min=2),
        "gang_never_fits",
        f"ask a1/x ({human_resource({'memory': HALF})}): ",
    ),
]
# Asks that break a check and the one after it: the first is the one they are refused for.
BOTH = [
    replace(ASK, app="ghost", resource={"memory": 0}),
    replace(ASK, resource={"memory": 0}, am=True, execution_type="opportunistic"),
    replace(ASK, am=True, execution_type="opportunistic", count=6),
    replace(ASK, count=6, constraints=NO_TAGS),
    replace(ASK, count=2, gang_min=7, constraints=NO_TAGS),
    replace(ASK, app="c1", resource={"memory": 4096}, count=2, gang_min=3),
    replace(ASK, app="c1", resource={"memory": 4096}, node_selector={"zone": ["mars"]}),
    replace(ASK, resource={"memory": 1, "fpga": 1}, node_selector={"zone": ["mars"]}),
    replace(ASK, resource={"memory": HALF, "fpga": 1}, count=2, gang_min=2),
]


def test_every_rejection_code_of_admission_has_a_row_in_the_order_the_checks_run() -> None:
    codes = [code for _, _, code, _ in REFUSALS]
    assert codes == list(dict.fromkeys(codes)) and len(codes) == 10
    assert set(codes) <= set(get_args(d.RejectionCode))


@pytest.mark.parametrize(("event", "code", "reason"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_an_ask_that_breaks_one_check_is_refused_for_it(event: f.AskAdded, code: str, reason: str) -> None:
    got_code, got_reason = _judged(event)
    assert got_code == code
    assert got_reason.startswith(reason)


@pytest.mark.parametrize("index", range(len(BOTH)), ids=[r[0] for r in REFUSALS[:-1]])
def test_an_ask_that_breaks_two_checks_is_refused_for_the_first(index: int) -> None:
    assert _judged(BOTH[index])[0] == REFUSALS[index][2]
    assert _judged(REFUSALS[index + 1][1])[0] == REFUSALS[index + 1][2]  # the second alone is refused for it


def test_an_ask_that_breaks_none_is_admitted_and_the_same_ask_again_changes_nothing() -> None:
    assert _judged(replace(ASK, app="c1", resource={"memory": 2048}, count=5)) == (None, "")
    cache = _cache(max_pending_per_ask=5)
    assert _ask(cache, "a1", "x", 5) == []
    before = cache.state.apps["a1"].asks["x"]
    cache.handle_event(replace(ASK, count=50))  # over the bound, but asked already: not judged again
    out = cache.drain()
    assert out.decisions == [] and out.view is None
    assert cache.state.apps["a1"].asks["x"] is before and before.count == 5


def test_an_ask_is_judged_by_every_node_shape_seen_even_after_its_nodes_left() -> None:
    cache = _cache()
    cache.handle_event(f.NodeAdded(node="small", capacity={"memory": 100, "fpga": 1}))
    cache.handle_event(f.NodeRemoved(node="small"))
    cache.handle_event(f.NodeRemoved(node="big"))
    cache.drain()
    assert cache.state.nodes == {}
    assert _ask(cache, "a1", "fpga", 1, {"memory": 100, "fpga": 1}) == []  # small may come back
    assert _ask(cache, "a1", "gpus", 1, {"gpu": 1025}) == [
        "ask a1/gpus (1025 GPUs) is larger than every node in some resource"
    ]
    assert _ask(cache, "a1", "tpu", 1, {"tpu": 1}) == [
        f"ask a1/tpu ({human_resource({'tpu': 1})}) names resources no node has: tpu"
    ]


def test_a_node_shape_another_covers_is_dropped_and_its_resources_are_still_known() -> None:
    shapes = admission.NodeShapes()
    shapes.see({"memory": 100, "fpga": 1})
    shapes.see({"memory": 50})  # covered: nothing changes
    assert shapes.shapes == [{"memory": 100, "fpga": 1}]
    shapes.see({"memory": 200, "fpga": 2, "vcore": 8})
    assert shapes.shapes == [{"memory": 200, "fpga": 2, "vcore": 8}]
    assert shapes.names == {"memory", "fpga", "vcore"}
