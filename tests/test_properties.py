"""Property tests: random feeds through Cache + Allocator (sans-IO) never break an invariant.

Each example draws a queue tree's limits and a list of operations: nodes added, updated, removed and
re-added; apps and asks added (some invalid) and withdrawn; releases; re-deliveries of earlier events
(at-least-once, same id); allocator cycles whose proposals reach the cache late and out of order;
ticks; the partition retired (``partition_removed``) and configured again. After every operation the
cache's state satisfies invariants 1-4 (architecture: Invariants) and its own derived totals, the independent
:class:`ClusterModel` fed with the same events and decisions sees no violation, and what is in flight
never exceeds what is pending. At the end the allocator's replica equals the cache's state and nothing
placeable is left waiting.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sniper.core import node_reservation
from sniper.core import resources as res
from sniper.core.config import PartitionConfig, partition_to_raw
from sniper.core.state import AskKey, PartitionState
from sniper.messages import decisions as d
from sniper.messages import feed as f
from tests.core_support import Harness, config_of, consistency_problems, fingerprint, invariant_problems, queue

NODES = [f"n{i}" for i in range(5)]
QUEUES = ["root.a", "root.p.x", "root.p.y", "root.b", "root.p", "root.nope"]  # the last two are invalid

Op = tuple[Any, ...]

memory = st.sampled_from([512, 1024, 2048, 3072, 4096, 6144, 8192])
vcore = st.sampled_from([0, 500, 1000, 2000, 4000])
node_memory = st.sampled_from([2048, 4096, 8192, 16384])
node_vcore = st.sampled_from([2000, 8000, 16000])
index = st.integers(min_value=0, max_value=50)

ask_add = st.tuples(
    st.just("ask_add"),
    index,
    memory,
    vcore,
    st.sampled_from([0, 0, 0, 1]),  # gpu: root.b forbids it
    st.integers(min_value=0, max_value=4),
    st.integers(min_value=-1, max_value=2),
    st.none() | st.none() | st.sampled_from(NODES),
)
deliver = st.tuples(st.just("deliver"), index)
cycle = st.tuples(st.just("cycle"))

OPS: dict[str, st.SearchStrategy[Op]] = {
    "ask_add": ask_add,
    "cycle": cycle,
    "deliver": deliver,
    "release": st.tuples(st.just("release"), index),
    "tick": st.tuples(st.just("tick")),
    "node_add": st.tuples(st.just("node_add"), st.sampled_from(NODES), node_memory, node_vcore),
    "node_update": st.tuples(
        st.just("node_update"), st.sampled_from(NODES), st.none() | node_memory, st.none() | st.booleans()
    ),
    "node_remove": st.tuples(st.just("node_remove"), st.sampled_from(NODES)),
    "app_add": st.tuples(st.just("app_add"), st.sampled_from(QUEUES)),
    "app_remove": st.tuples(st.just("app_remove"), index),
    "ask_remove": st.tuples(st.just("ask_remove"), index),
    "ask_again": st.tuples(st.just("ask_again"), index, st.integers(min_value=0, max_value=3)),
    "dup": st.tuples(st.just("dup"), index),
    "replay": st.tuples(st.just("replay"), index),
}
# Mostly work (asks, cycles, late deliveries, releases), with churn in between.
WEIGHTS = {"ask_add": 5, "cycle": 5, "deliver": 4, "release": 2, "tick": 1, "node_add": 2, "app_add": 1, "dup": 2}
ops = st.sampled_from([kind for kind in OPS for _ in range(WEIGHTS.get(kind, 1))]).flatmap(OPS.__getitem__)
# The partition retired and configured again now and then (its ids forgotten: not for the replay test).
retire = st.tuples(st.just("retire"))
ops_and_retire = st.one_of(ops, ops, ops, ops, ops, ops, ops, ops, ops, retire)


@st.composite
def configs(draw: st.DrawFn) -> PartitionConfig:
    a_max = draw(st.sampled_from([8192, 16384, 32768]))
    p_max = draw(st.sampled_from([8192, 24576, 65536]))
    x_max = draw(st.sampled_from([4096, 8192])) if draw(st.booleans()) else None
    return config_of(
        queue("a", guaranteed={"memory": 8192}, maximum={"memory": a_max}, application_sort_policy="fair"),
        queue(
            "p",
            queue("x", maximum=None if x_max is None else {"memory": x_max}, application_sort_policy="priority"),
            queue("y"),
            maximum={"memory": p_max, "vcore": 32000},
        ),
        queue("b", maximum={"gpu": 0}),
        node_sort=draw(st.sampled_from(["binpacking", "fair"])),
    )


def nothing_placeable_waits(state: PartitionState) -> list[tuple[AskKey, str]]:
    """After settling: pending asks within their queue limits that some schedulable node could hold and
    that no node reservation of another ask keeps off it."""
    out: list[tuple[AskKey, str]] = []
    for app in state.apps.values():
        for ask in app.asks.values():
            if ask.pending <= 0 or not state.headroom_allows(app.queue, ask.resource):
                continue
            for node in state.nodes.values():
                if (
                    ask.required_node in (None, node.name)
                    and node.schedulable
                    and node.can_hold(ask.resource)
                    and not node_reservation.blocks(state, ask, node.name)
                ):
                    out.append((ask.key, node.name))
    return out


class Run:
    """Interprets operations against a harness and checks the invariants after each."""

    def __init__(self, config: PartitionConfig) -> None:
        self.h = Harness(config)
        self.apps: list[str] = []
        self.asks: list[f.AskAdded] = []
        self.events: list[f.Feed] = []
        self.stale: dict[str, int] = {}  # proposal id -> feed events since it was made
        self.clean_deliveries = 0
        self.reused: set[tuple[str, str]] = set()  # ask names added more than once
        self.config = config
        self.start()

    def start(self) -> None:
        """A starting point so that most operations have something to act on."""
        for op in (("node_add", "n0", 8192, 8000), ("node_add", "n1", 16384, 16000)):
            self.apply(op)
        for leaf in QUEUES[:4]:
            self.apply(("app_add", leaf))

    # ---- operations

    def send(self, event: f.Feed) -> None:
        if isinstance(event, f.AskAdded) and any(
            isinstance(e, f.AskAdded) and (e.app, e.ask) == (event.app, event.ask) for e in self.events
        ):
            self.reused.add((event.app, event.ask))
        self.events.append(event)
        self._deliver_event(event)

    def _deliver_event(self, event: f.Feed) -> None:
        for pid in self.stale:
            self.stale[pid] += 1
        cache = self.h.cache
        before = None
        if isinstance(event, f.NodeRemoved) and event.id not in cache.seen and event.node in cache.state.nodes:
            before = set(cache.state.nodes[event.node].allocations)
        decisions = self.h.feed(event)
        if before is not None:
            lost = {x.allocation for x in decisions if isinstance(x, d.AllocationLost)}
            assert lost == before, f"node {event.node} removed: lost {lost}, held {before}"

    def apply(self, op: Op) -> None:
        h = self.h
        kind = op[0]
        eid = f"e{len(self.events)}"
        if kind == "node_add":
            self.send(f.NodeAdded(id=eid, node=op[1], capacity={"memory": op[2], "vcore": op[3]}))
        elif kind == "node_update":
            capacity = None if op[2] is None else {"memory": op[2], "vcore": 8000}
            self.send(f.NodeUpdated(id=eid, node=op[1], capacity=capacity, schedulable=op[3]))
        elif kind == "node_remove":
            self.send(f.NodeRemoved(id=eid, node=op[1]))
        elif kind == "app_add":
            name = f"app{len(self.apps)}"
            self.apps.append(name)
            self.send(f.AppAdded(id=eid, app=name, queue=op[1], priority=len(self.apps) % 3))
        elif kind == "app_remove" and self.apps:
            self.send(f.AppRemoved(id=eid, app=self.apps[op[1] % len(self.apps)]))
        elif kind == "ask_add":
            app = self.apps[op[1] % len(self.apps)] if self.apps else "ghost"
            name = f"ask{len(self.asks)}"
            resource = {"memory": op[2], "vcore": op[3], "gpu": op[4]}
            ask = f.AskAdded(
                id=eid, app=app, ask=name, resource=resource, count=op[5], priority=op[6], node=op[7], duration=5.0
            )
            self.asks.append(ask)
            self.send(ask)
        elif kind == "ask_again" and self.asks:
            # The same ask name again with a new id: ignored while the ask exists, a new ask once withdrawn.
            self.send(msgspec.structs.replace(self.asks[op[1] % len(self.asks)], id=eid, count=op[2]))
        elif kind == "ask_remove" and self.asks:
            ask = self.asks[op[1] % len(self.asks)]
            self.send(f.AskRemoved(id=eid, app=ask.app, ask=ask.ask))
        elif kind == "release":
            live = sorted(h.cache.state.allocations)
            target = live[op[1] % len(live)] if live and op[1] % 5 else "alloc-999"
            self.send(f.AllocationReleased(id=eid, allocation=target))
        elif kind == "dup" and self.events:
            self._deliver_event(self.events[op[1] % len(self.events)])  # at-least-once: same event, same id
        elif kind == "replay" and self.events:
            # The same content as a new event (a new id): re-adds what was removed, and so on.
            self.send(msgspec.structs.replace(self.events[op[1] % len(self.events)], id=eid))
        elif kind == "cycle":
            proposal = h.propose()
            if proposal is not None:
                self.stale[proposal.id] = 0
        elif kind == "deliver" and h.in_flight:
            self.deliver(op[1] % len(h.in_flight))
        elif kind == "tick":
            h.tick(h.now + 1.0)
        elif kind == "retire":
            # Everything released, proposals still in flight; then the same partition starts again.
            held = set(h.cache.state.allocations)
            decisions = h.feed(f.PartitionRemoved(id=eid))
            assert {x.allocation for x in decisions if isinstance(x, d.Released)} == held
            assert isinstance(decisions[-1], d.PartitionRemoved) and h.cache.state.apps == {}
            self.send(f.PartitionConfigEvent(id=f"{eid}-config", config=partition_to_raw(self.config)))
            self.start()

    def deliver(self, i: int) -> None:
        pid = self.h.in_flight[i].id
        outcome = self.h.deliver(i)
        if self.stale.pop(pid) == 0:
            # Nothing happened since it was computed: in-flight accounting makes every placement valid,
            # however many other proposals were in flight and in whatever order they arrived.
            assert outcome.rejected == {}, outcome.rejected
            self.clean_deliveries += 1
        else:
            # A stale proposal may land on a node or ask re-added under the same name since, taking
            # room the others did not count on: they are stale from now on too.
            for other in self.stale:
                self.stale[other] += 1

    # ---- checks

    def check(self) -> None:
        h = self.h
        cache_state, replica = h.cache.state, h.allocator.state
        assert invariant_problems(cache_state) == []
        assert consistency_problems(replica) == []
        h.model.check(h.now)
        assert h.model.violations == []
        # What the allocator holds is exactly what its undelivered proposals place (an ask withdrawn and
        # asked again under its name is a new object: the old one keeps the old proposals' hold).
        held = h.allocator.inflight
        assert {pid: len(placed) for pid, placed in held.items()} == {
            x.id: len(x.placements) + len(x.evictions) for x in h.in_flight
        }
        per_ask = Counter(id(ask) for placed in held.values() for ask, _ in placed)
        for app in replica.apps.values():
            for ask in app.asks.values():
                assert ask.allocating == per_ask.get(id(ask), 0), ask.key
                committed = cache_state.ask(ask.key)
                assert committed is not None
                if ask.key not in self.reused:
                    # (a proposal for a withdrawn ask may land on one asked again under its name)
                    assert ask.allocating <= committed.count - committed.allocated - committed.reserved, ask.key

    def finish(self) -> None:
        h = self.h
        while h.in_flight:
            self.deliver(0)
        h.settle()
        self.check()
        assert fingerprint(h.allocator.state, allocating=True) == fingerprint(h.cache.state, allocating=True)
        assert fingerprint(h.allocator.state) == fingerprint(h.cache.state)
        assert nothing_placeable_waits(h.cache.state) == []
        allocated = [x.allocation for x in h.decisions if isinstance(x, d.Allocated)]
        assert len(allocated) == len(set(allocated))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(), script=st.lists(ops_and_retire, min_size=10, max_size=60))
def test_random_feeds_keep_every_invariant(config: PartitionConfig, script: list[Op]) -> None:
    run = Run(config)
    for op in script:
        run.apply(op)
        run.check()
    run.finish()


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(), script=st.lists(ops, min_size=10, max_size=40))
def test_replaying_the_whole_feed_changes_nothing(config: PartitionConfig, script: list[Op]) -> None:
    """At-least-once delivery: the whole feed delivered again (same ids) leaves state and decisions alone."""
    run = Run(config)
    for op in script:
        run.apply(op)
    run.finish()
    before = fingerprint(run.h.cache.state)
    decided = len(run.h.decisions)
    for event in run.events:
        run.h.feed(event)
    assert fingerprint(run.h.cache.state) == before
    assert len(run.h.decisions) == decided
    assert run.h.allocator.cycle() is None


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(), script=st.lists(ops_and_retire, min_size=10, max_size=40))
def test_the_same_feed_gives_the_same_decisions(config: PartitionConfig, script: list[Op]) -> None:
    """Same feed, same decisions (architecture: invariant 7), sans-IO: nothing in the core depends on
    anything but its inputs."""
    runs = [Run(config), Run(config)]
    for run in runs:
        for op in script:
            run.apply(op)
        run.finish()
    first, second = ([msgspec.json.encode(x) for x in run.h.decisions] for run in runs)
    assert first == second
    assert fingerprint(runs[0].h.cache.state) == fingerprint(runs[1].h.cache.state)


@settings(max_examples=50, deadline=None)
@given(
    nodes=st.lists(st.tuples(node_memory, node_vcore), min_size=1, max_size=6),
    asks=st.lists(st.tuples(memory, vcore, st.integers(min_value=1, max_value=5)), min_size=1, max_size=8),
    node_sort=st.sampled_from(["binpacking", "fair"]),
)
def test_one_cycle_places_what_fits_and_never_overcommits(
    nodes: list[tuple[int, int]], asks: list[tuple[int, int, int]], node_sort: str
) -> None:
    """Without concurrent events every placement is accepted, and the cycle stops only when nothing fits."""
    h = Harness(config_of(queue("a"), node_sort=node_sort))
    h.feed(*(f.NodeAdded(node=f"n{i}", capacity={"memory": m, "vcore": v}) for i, (m, v) in enumerate(nodes)))
    h.feed(f.AppAdded(app="app", queue="root.a"))
    h.feed(
        *(
            f.AskAdded(app="app", ask=f"k{i}", resource={"memory": m, "vcore": v}, count=c)
            for i, (m, v, c) in enumerate(asks)
        )
    )
    proposal = h.propose()
    if proposal is not None:
        outcome = h.deliver()
        assert outcome.rejected == {}
        assert outcome.accepted == len(proposal.placements)
    assert h.propose() is None  # one cycle placed everything that could go
    assert nothing_placeable_waits(h.cache.state) == []
    assert invariant_problems(h.cache.state) == []
    for node in h.cache.state.nodes.values():
        assert res.fits(node.allocated, node.capacity)
