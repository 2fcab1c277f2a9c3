"""Cache, the single writer: feed events and proposals in; changes, decisions and outcomes out.

Every input is validated: a bad event is a ``rejected`` decision (never an exception), a duplicate
changes nothing, a stale proposal is rejected with its reason.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from sniper.core.allocator import Allocator
from sniper.core.cache import Cache
from sniper.core.config import partition_to_raw
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from tests.core_support import (
    config_of,
    consistency_problems,
    decision_counts,
    fingerprint,
    invariant_problems,
    partition_raw,
    queue,
)

LEAVES = (
    queue("p", queue("x", maximum={"memory": 16384}), queue("y"), maximum={"memory": 24576}),
    queue("b", maximum={"memory": 65536, "gpu": 0}),
)
CONFIG = config_of(*LEAVES)
RAW = partition_raw(*LEAVES)


def _cache(*events: f.Feed) -> Cache:
    cache = Cache("default", CONFIG)
    for e in events:
        cache.handle_event(e)
    cache.drain()
    return cache


SETUP: list[f.Feed] = [
    f.NodeAdded(node="n1", capacity={"memory": 8192, "vcore": 8000}),
    f.NodeAdded(node="n2", capacity={"memory": 16384, "vcore": 8000}),
    f.AppAdded(app="a1", queue="root.p.x"),
    f.AskAdded(app="a1", ask="k", resource={"memory": 2048, "vcore": 1000}, count=4),
    f.AppAdded(app="b1", queue="root.b"),
    f.AskAdded(app="b1", ask="m", resource={"memory": 4096}, count=1),
]


def _allocate(cache: Cache, *placements: tuple[str, str, str], pid: str = "t/1") -> p.ProposalOutcome:
    proposal = p.AllocationProposal(
        id=pid, view_seq=cache.view_seq, placements=[p.Placement(app=a, ask=k, node=n) for a, k, n in placements]
    )
    cache.handle_proposal(proposal)
    view = cache.drain().view
    assert view is not None
    (outcome,) = [o for o in view.outcomes if o.proposal == pid]
    return outcome


def _running() -> Cache:
    """SETUP plus three containers of a1/k on n1 (two) and n2 (one), and b1/m on n2."""
    cache = _cache(*SETUP)
    outcome = _allocate(cache, ("a1", "k", "n1"), ("a1", "k", "n1"), ("a1", "k", "n2"), ("b1", "m", "n2"))
    assert outcome.accepted == 4 and outcome.rejected == {}
    return cache


# ---------------------------------------------------------------------- bad events become decisions

BAD_EVENTS: list[tuple[str, f.Feed, str, d.RejectionCode]] = [
    ("unknown queue", f.AppAdded(app="a9", queue="root.nope"), "root.nope is an unknown queue", "unknown_queue"),
    (
        "parent queue",
        f.AppAdded(app="a9", queue="root.p"),
        "root.p is a parent queue; apps go to leaf queues",
        "not_a_leaf",
    ),
    ("the root", f.AppAdded(app="a9", queue="root"), "root is a parent queue", "not_a_leaf"),
    ("app in another queue", f.AppAdded(app="a1", queue="root.b"), "app a1 already runs in root.p.x", "app_elsewhere"),
    (
        "unknown app",
        f.AskAdded(app="ghost", ask="z", resource={"memory": 1}),
        "ask z: unknown app ghost",
        "unknown_app",
    ),
    (
        "ask over the leaf max",
        f.AskAdded(app="a1", ask="z", resource={"memory": 16385}),
        "can never fit queue root.p.x's max (16 GiB)",
        "over_queue_max",
    ),
    (
        "ask over a parent max",
        f.AskAdded(app="b1", ask="z", resource={"memory": 65537}),
        "can never fit queue root.b's max",
        "over_queue_max",
    ),
    (
        "ask for a resource the max forbids",
        f.AskAdded(app="b1", ask="z", resource={"memory": 1, "gpu": 1}),
        "can never fit queue root.b's max",
        "over_queue_max",
    ),
    (
        "ask for nothing",
        f.AskAdded(app="a1", ask="z", resource={"memory": 0}),
        "ask a1/z asks for nothing",
        "empty_ask",
    ),
    (
        "opportunistic application master",
        f.AskAdded(app="a1", ask="z", resource={"memory": 1}, am=True, execution_type="opportunistic"),
        "an application master cannot be opportunistic",
        "opportunistic_am",
    ),
    (
        "ask past the admission bounds",
        f.AskAdded(app="a1", ask="z", resource={"memory": 1}, count=10**7),
        "over admission.",
        "over_admission",
    ),
    (
        "gang larger than its count",
        f.AskAdded(app="b1", ask="z", resource={"memory": 1}, count=2, gang_min=3),
        "gang_min 3 is more than its count 2",
        "gang_over_count",
    ),
    (
        "node selector no node matches",
        f.AskAdded(app="b1", ask="z", resource={"memory": 1}, node_selector={"zone": ["mars"]}),
        "no node matches its node selector",
        "no_matching_node",
    ),
    (
        "resource no node has",
        f.AskAdded(app="a1", ask="z", resource={"memory": 1, "fpga": 1}),
        "names resources no node has: fpga",
        "never_fits",
    ),
    (
        "gang no set of nodes holds",
        f.AskAdded(app="b1", ask="z", resource={"memory": 8192}, count=4, gang_min=4),
        "ask b1/z (8 GiB",
        "gang_never_fits",
    ),
    ("promotion of nothing", f.AllocationPromoted(allocation="alloc-404"), "is not running", "promotion_refused"),
    ("update of an unknown node", f.NodeUpdated(node="ghost", schedulable=False), "unknown node ghost", "unknown_node"),
    (
        "invalid config",
        f.PartitionConfigEvent(config={"name": "default", "queues": []}),
        "partition default.queues: expected `array` of length >= 1",
        "invalid",
    ),
    (
        "config dropping a queue in use",
        f.PartitionConfigEvent(config=partition_raw(queue("b"))),
        "queue root.p.x is used by app a1 and cannot be removed",
        "invalid",
    ),
]


def test_a_rejection_carries_the_figures_its_reason_quotes_as_numbers() -> None:
    """An ask over its queue's max: the reason says both amounts in human units, ``resource`` and
    ``bound`` give them as numbers."""
    cache = _cache(*SETUP)
    cache.handle_event(f.AskAdded(app="a1", ask="z", resource={"memory": 16385, "vcore": 1000}))
    (decision,) = cache.drain().decisions
    assert isinstance(decision, d.Rejected) and decision.code == "over_queue_max"
    assert "ask a1/z (16 GiB, 1 core) can never fit queue root.p.x's max (16 GiB)" in decision.reason
    assert decision.resource == {"memory": 16385, "vcore": 1000} and decision.bound == {"memory": 16384}


@pytest.mark.parametrize(("event", "reason", "code"), [c[1:] for c in BAD_EVENTS], ids=[c[0] for c in BAD_EVENTS])
def test_bad_events_become_rejected_decisions(event: f.Feed, reason: str, code: d.RejectionCode) -> None:
    cache = _cache(*SETUP)
    before = fingerprint(cache.state)
    cache.handle_event(msgspec.structs.replace(event, id="ev-1"))
    out = cache.drain()
    assert out.view is None  # nothing committed
    (decision,) = out.decisions
    assert isinstance(decision, d.Rejected)
    assert reason in decision.reason and decision.code == code
    assert decision.event == "ev-1"
    assert fingerprint(cache.state) == before
    assert cache.stats.rejected_events == 1
    if isinstance(event, f.AskAdded):
        assert (decision.app, decision.ask) == (event.app, event.ask)


def test_events_before_any_config_are_rejected() -> None:
    cache = Cache("default")
    cache.handle_event(f.NodeAdded(node="n1", capacity={"memory": 1}))
    (decision,) = cache.drain().decisions
    assert isinstance(decision, d.Rejected)
    assert "has no configuration yet" in decision.reason and decision.code == "unconfigured"
    assert cache.state.nodes == {}
    cache.handle_event(f.PartitionConfigEvent(config=RAW))
    cache.handle_event(f.NodeAdded(node="n1", capacity={"memory": 1}))
    out = cache.drain()
    assert out.decisions == []
    assert out.view is not None and [type(c) for c in out.view.changes] == [p.ConfigSet, p.NodeSet]


# ---------------------------------------------------------------------- idempotence

IDEMPOTENT: list[tuple[str, f.Feed]] = [
    ("same config", f.PartitionConfigEvent(config=RAW)),
    ("new node", f.NodeAdded(node="n3", capacity={"memory": 4096})),
    ("node again", f.NodeAdded(node="n1", capacity={"memory": 8192, "vcore": 8000})),
    ("node grows", f.NodeUpdated(node="n2", capacity={"memory": 32768, "vcore": 8000})),
    ("node shrinks", f.NodeUpdated(node="n1", capacity={"memory": 2048, "vcore": 8000})),
    ("node unschedulable", f.NodeUpdated(node="n1", schedulable=False)),
    ("node removed", f.NodeRemoved(node="n1")),
    ("new app", f.AppAdded(app="a2", queue="root.p.y")),
    ("app again", f.AppAdded(app="a1", queue="root.p.x")),
    ("app removed", f.AppRemoved(app="a1")),
    ("new ask", f.AskAdded(app="a1", ask="k2", resource={"memory": 1024}, count=2)),
    ("ask again", f.AskAdded(app="a1", ask="k", resource={"memory": 2048, "vcore": 1000}, count=4)),
    ("ask removed", f.AskRemoved(app="a1", ask="k")),
    ("released", f.AllocationReleased(allocation="alloc-1")),
    ("released unknown", f.AllocationReleased(allocation="alloc-999")),
]


@pytest.mark.parametrize("with_id", [False, True], ids=["no-id", "same-id"])
@pytest.mark.parametrize("event", [c[1] for c in IDEMPOTENT], ids=[c[0] for c in IDEMPOTENT])
def test_every_event_applied_twice_changes_nothing(event: f.Feed, with_id: bool) -> None:
    cache = _running()
    if with_id:
        event = msgspec.structs.replace(event, id="dup-1")
    cache.handle_event(event)
    first = cache.drain()
    state = fingerprint(cache.state)
    assert not any(isinstance(x, d.Rejected) for x in first.decisions)
    cache.handle_event(event)
    again = cache.drain()
    assert again.view is None
    assert again.decisions == []
    assert fingerprint(cache.state) == state
    assert cache.stats.duplicates == (1 if with_id else 0)
    assert invariant_problems(cache.state) == []


def test_an_id_seen_before_is_dropped_even_with_other_content() -> None:
    cache = _cache(*SETUP)
    cache.handle_event(f.NodeAdded(id="e1", node="n3", capacity={"memory": 1}))
    cache.handle_event(f.NodeAdded(id="e1", node="n4", capacity={"memory": 1}))
    assert sorted(cache.state.nodes) == ["n1", "n2", "n3"]
    assert cache.stats.duplicates == 1


# ---------------------------------------------------------------------- nodes going away


def test_node_removed_loses_every_allocation_on_it() -> None:
    cache = _running()
    on_n2 = sorted(cache.state.nodes["n2"].allocations)
    on_n1 = sorted(cache.state.nodes["n1"].allocations)
    assert len(on_n2) == 2 and len(on_n1) == 2
    cache.handle_event(f.NodeRemoved(node="n2"))
    out = cache.drain()
    lost = [x for x in out.decisions if isinstance(x, d.AllocationLost)]
    assert sorted(x.allocation for x in lost) == on_n2
    assert decision_counts(out.decisions) == {"AllocationLost": 2}
    assert {(x.app, x.ask, x.queue, x.node) for x in lost} == {
        ("a1", "k", "root.p.x", "n2"),
        ("b1", "m", "root.b", "n2"),
    }
    assert {x.app: x.resource for x in lost} == {"a1": {"memory": 2048, "vcore": 1000}, "b1": {"memory": 4096}}
    assert "n2" not in cache.state.nodes
    assert all(a.node != "n2" for a in cache.state.allocations.values())
    assert sorted(cache.state.allocations) == on_n1
    assert cache.state.queues["root.b"].allocated.get("memory", 0) == 0
    assert cache.state.queues["root.p.x"].allocated == {"memory": 4096, "vcore": 2000}
    assert cache.state.capacity == {"memory": 8192, "vcore": 8000}
    assert out.view is not None
    kinds = [type(c) for c in out.view.changes]
    assert kinds == [p.AllocationGone, p.AllocationGone, p.NodeGone]
    assert invariant_problems(cache.state) == []
    # A lost container is not asked for again by the cache: the resource manager does that.
    ask = cache.state.ask(("a1", "k"))
    assert ask is not None and ask.pending == 1


def test_node_shrinking_below_what_it_holds_loses_allocations_until_it_fits() -> None:
    cache = _running()  # n1 holds two 2048 containers
    cache.handle_event(f.NodeUpdated(node="n1", capacity={"memory": 3000, "vcore": 8000}))
    out = cache.drain()
    assert decision_counts(out.decisions) == {"AllocationLost": 1}
    node = cache.state.nodes["n1"]
    assert node.capacity == {"memory": 3000, "vcore": 8000}
    assert node.allocated["memory"] == 2048
    assert invariant_problems(cache.state) == []


def test_an_unschedulable_node_keeps_its_allocations() -> None:
    cache = _running()
    cache.handle_event(f.NodeUpdated(node="n1", schedulable=False))
    out = cache.drain()
    assert out.decisions == []
    assert len(cache.state.nodes["n1"].allocations) == 2
    assert cache.state.capacity == {"memory": 16384, "vcore": 8000}


# ---------------------------------------------------------------------- apps and releases


def test_app_removed_withdraws_its_asks_and_releases_its_allocations() -> None:
    cache = _running()
    held = sorted(cache.state.apps["a1"].allocations)
    cache.handle_event(f.AppRemoved(app="a1"))
    out = cache.drain()
    released = [x for x in out.decisions if isinstance(x, d.Released)]
    assert sorted(x.allocation for x in released) == held
    assert "a1" not in cache.state.apps
    assert cache.state.queues["root.p.x"].allocated.get("memory", 0) == 0
    assert cache.state.queues["root.p"].pending.get("memory", 0) == 0
    assert invariant_problems(cache.state) == []


def test_release_frees_room_and_decides_released() -> None:
    cache = _running()
    cache.handle_event(f.AllocationReleased(allocation="alloc-4"))
    (decision,) = cache.drain().decisions
    assert isinstance(decision, d.Released)
    assert (decision.allocation, decision.app, decision.node, decision.queue) == ("alloc-4", "b1", "n2", "root.b")
    assert decision.resource == {"memory": 4096}
    assert "alloc-4" not in cache.state.allocations


# ---------------------------------------------------------------------- proposals


def _mutate(cache: Cache, case: str) -> None:
    events: dict[str, list[f.Feed]] = {
        "fits": [],
        "node gone": [f.NodeRemoved(node="n2")],
        "node not schedulable": [f.NodeUpdated(node="n2", schedulable=False)],
        "app gone": [f.AppRemoved(app="a1")],
        "ask gone": [f.AskRemoved(app="a1", ask="k")],
        "does not fit": [f.NodeUpdated(node="n2", capacity={"memory": 1024, "vcore": 8000})],
    }
    for e in events[case]:
        cache.handle_event(e)
    cache.drain()


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("fits", None),
        ("node gone", "node is gone"),
        ("node not schedulable", "node is not schedulable"),
        ("app gone", "app is gone"),
        ("ask gone", "ask is gone"),
        ("does not fit", "does not fit the node's free room"),
    ],
)
def test_stale_placements_are_rejected_with_the_reason(case: str, reason: str | None) -> None:
    cache = _cache(*SETUP)
    _mutate(cache, case)
    outcome = _allocate(cache, ("a1", "k", "n2"))
    if reason is None:
        assert (outcome.accepted, outcome.rejected) == (1, {})
        assert "alloc-1" in cache.state.allocations
    else:
        assert outcome.accepted == 0
        assert list(outcome.rejected.values()) == [reason]
        assert list(outcome.rejected) == ["a1/k@n2#0"]
        assert cache.state.allocations == {}
        assert cache.stats.placements_rejected == 1


def test_placements_over_the_queue_max_are_rejected() -> None:
    cache = _cache(
        *SETUP,
        f.NodeAdded(node="n3", capacity={"memory": 65536, "vcore": 64000}),
        f.AskAdded(app="a1", ask="big", resource={"memory": 8192}, count=3),
    )
    outcome = _allocate(cache, ("a1", "big", "n3"), ("a1", "big", "n3"), ("a1", "big", "n3"))
    assert outcome.accepted == 2  # root.p.x max is 16384
    assert list(outcome.rejected.values()) == ["queue max would be exceeded"]
    assert cache.state.queues["root.p.x"].allocated == {"memory": 16384}


def test_an_ask_is_never_allocated_over_its_count() -> None:
    cache = _cache(*SETUP)
    outcome = _allocate(cache, ("b1", "m", "n2"), ("b1", "m", "n2"))
    assert outcome.accepted == 1
    assert list(outcome.rejected.values()) == ["ask is already fully allocated"]
    later = _allocate(cache, ("b1", "m", "n1"), pid="t/2")
    assert later.accepted == 0 and list(later.rejected.values()) == ["ask is already fully allocated"]
    ask = cache.state.ask(("b1", "m"))
    assert ask is not None and ask.allocated == 1


def test_a_required_node_is_enforced() -> None:
    cache = _cache(*SETUP, f.AskAdded(app="a1", ask="pinned", resource={"memory": 1}, node="n1"))
    outcome = _allocate(cache, ("a1", "pinned", "n2"), ("a1", "pinned", "n1"))
    assert outcome.accepted == 1
    assert list(outcome.rejected.values()) == ["ask requires node n1"]
    assert [a.node for a in cache.state.allocations.values()] == ["n1"]


def test_accepted_placements_become_allocations_and_decisions() -> None:
    cache = _cache(*SETUP)
    cache.tick(7.5)
    cache.drain()
    proposal = p.AllocationProposal(
        id="t/1", view_seq=cache.view_seq, placements=[p.Placement(app="a1", ask="k", node="n1")]
    )
    cache.handle_proposal(proposal)
    out = cache.drain()
    (decision,) = out.decisions
    assert isinstance(decision, d.Allocated)
    assert (decision.allocation, decision.app, decision.ask, decision.queue, decision.node) == (
        "alloc-1",
        "a1",
        "k",
        "root.p.x",
        "n1",
    )
    assert decision.resource == {"memory": 2048, "vcore": 1000}
    assert decision.t == 7.5
    assert out.view is not None
    assert [type(c) for c in out.view.changes] == [p.AllocationSet]
    assert out.view.outcomes == [p.ProposalOutcome(proposal="t/1", accepted=1, rejected={})]
    assert consistency_problems(cache.state) == []


# ---------------------------------------------------------------------- output sequencing


def test_decision_and_view_sequences_increase_by_one() -> None:
    cache = Cache("default", CONFIG, epoch=3)
    seqs: list[int] = []
    views: list[int] = []
    for e in [*SETUP, f.AppAdded(app="zz", queue="root")]:
        cache.handle_event(e)
        out = cache.drain()
        seqs.extend(x.seq for x in out.decisions)
        assert all(x.epoch == 3 and x.partition == "default" for x in out.decisions)
        if out.view is not None:
            views.append(out.view.seq)
    _allocate(cache, ("a1", "k", "n1"), ("a1", "k", "n1"))
    views.append(cache.view_seq)
    assert views == list(range(1, len(views) + 1))
    cache.handle_event(f.NodeRemoved(node="n1"))
    seqs.extend(x.seq for x in cache.drain().decisions)
    assert seqs == [1, 4, 5]  # the rejected app, then the two lost allocations (2 and 3 were the allocations)
    assert cache.drain().view is None  # nothing new: no empty deltas


def test_full_view_rebuilds_the_state_for_a_replica() -> None:
    cache = _running()
    cache.handle_event(f.AllocationReleased(allocation="alloc-1"))
    cache.tick(3.0)
    cache.drain()
    replica = Allocator("default")
    assert replica.apply_view(cache.full_view())
    assert replica.view_seq == cache.view_seq
    a, b = fingerprint(cache.state), fingerprint(replica.state)
    for key in ("now", "config", "nodes", "queues", "allocations", "node_order"):
        assert a[key] == b[key], key
    pending: dict[Any, int] = {
        (app.name, ask.name): ask.pending for app in cache.state.apps.values() for ask in app.asks.values()
    }
    assert pending == {
        (app.name, ask.name): ask.pending for app in replica.state.apps.values() for ask in app.asks.values()
    }
    # and the replica goes on with the next ordinary delta
    cache.handle_event(f.NodeAdded(node="n9", capacity={"memory": 1}))
    view = cache.drain().view
    assert view is not None and replica.apply_view(view)
    assert "n9" in replica.state.nodes


def test_config_change_reaches_the_replica() -> None:
    cache = _cache(*SETUP)
    changed = partition_to_raw(config_of(*LEAVES, queue("c"), node_sort="fair"))
    cache.handle_event(f.PartitionConfigEvent(config=changed))
    out = cache.drain()
    assert out.decisions == []
    assert out.view is not None and [type(c) for c in out.view.changes] == [p.ConfigSet]
    assert cache.state.node_index.policy == "fair"
    assert "root.c" in cache.state.queues


def test_a_sync_is_answered_with_synced_and_changes_nothing_configured_or_not() -> None:
    cache = _cache(*SETUP)
    view = msgspec.msgpack.encode(cache.full_view())
    cache.handle_event(f.Sync(id="s1"))
    out = cache.drain()
    assert [(type(x), x.event) for x in out.decisions] == [(d.Synced, "s1")]
    assert out.view is None and msgspec.msgpack.encode(cache.full_view()) == view
    assert cache.stats.rejected_events == 0
    unconfigured = Cache("new", None)
    unconfigured.handle_event(f.Sync(partition="new", id="s2"))
    assert [type(x) for x in unconfigured.drain().decisions] == [d.Synced]
