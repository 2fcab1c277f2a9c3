"""A replica that applied the cache's view deltas holds the cache's state, bookkeeping included.

The allocator's replica commits each change through the same ``apply`` as the cache, sharing the change
messages (and the resources they carry) with it. After every delta, on runs that mix asks of several
shapes and priorities, gangs, placements, releases, withdrawals, apps leaving, nodes shrinking, lost and
back, and preemption rounds with their notices and kills, every derived total the state keeps must be
the cache's: the node's, each queue's on it and their container bounds, the apps', the queues' up the
tree, the pending asks in their order, the apps waiting and holding.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sniper.core import resources as res
from sniper.core.state import PartitionState
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from tests.core_support import consistency_problems, fingerprint, queue
from tests.preemption_support import GRACE, PreemptHarness, preemption_raw

NODES = ("n1", "n2", "n3")
APPS = {"a1": "root.a", "b1": "root.b", "b2": "root.b", "c1": "root.c"}


def bookkeeping(state: PartitionState) -> dict[str, Any]:
    """What :func:`fingerprint` does not hold: the totals per node and leaf queue, their container
    bounds, and the indexes of waiting and holding apps and asks."""

    def r(x: res.Resource) -> dict[str, int]:
        return dict(sorted(res.normalized(x).items()))

    return {
        "version": state.version,
        "nodes": {
            n.name: {
                "by_queue": {path: r(x) for path, x in sorted(n.by_queue.items()) if res.normalized(x)},
                "bounds": {
                    path: (b.count, r(b.largest), b.latest_start) for path, b in sorted(n.container_bounds.items())
                },
                "unmeasured": sorted(n.unmeasured_ids),
            }
            for n in state.nodes.values()
        },
        "queues": {q.path: (sorted(q.waiting), sorted(q.holding), r(q.node_reserved)) for q in state.queues.values()},
        "apps": {a.name: (a.asked, a.disrupted, [ask.key for ask in a.pending_asks]) for a in state.apps.values()},
        "opportunistic_asks": list(state.opportunistic_asks),
        "selectors": state.selector_demand.counts(),
    }


class Mirrored(PreemptHarness):
    """A harness whose allocator replica is held to the cache's state after every delta."""

    deltas_compared = 0

    def pump(self) -> list[d.DecisionMsg]:
        decisions = super().pump()
        replica, cache = self.allocator.state, self.cache.state
        assert replica.version == cache.version
        if not self.allocator.inflight:  # (room held for a proposal moves the replica's node order)
            assert fingerprint(replica) == fingerprint(cache)
        assert bookkeeping(replica) == bookkeeping(cache)
        assert consistency_problems(replica) == []
        self.deltas_compared += 1
        return decisions


def three_queues() -> dict[str, Any]:
    return preemption_raw(
        queue("a", guaranteed={"memory": 120, "vcore": 12}),
        queue("b", guaranteed={"memory": 60, "vcore": 6}, maximum={"memory": 200, "vcore": 20}),
        queue("c", guaranteed={"memory": 60, "vcore": 6}),
    )


def start() -> Mirrored:
    h = Mirrored(three_queues())
    h.feed(*(f.NodeAdded(node=n, capacity={"memory": 100, "vcore": 10}) for n in NODES))
    h.feed(*(f.AppAdded(app=app, queue=path, priority=i) for i, (app, path) in enumerate(APPS.items())))
    return h


# One step: (what, which, memory, vcore or count, priority).
STEP = st.tuples(
    st.sampled_from(["ask", "gang", "fill", "settle", "release", "withdraw", "shrink", "lose", "restore", "preempt"]),
    st.integers(0, 30),
    st.integers(1, 60),
    st.integers(1, 4),
    st.integers(0, 2),
)


def play(h: Mirrored, steps: list[tuple[str, int, int, int, int]]) -> None:
    asks = 0
    for what, which, memory, count, priority in steps:
        state = h.cache.state
        app = sorted(APPS)[which % len(APPS)]
        if what in ("ask", "gang") and app in state.apps:
            asks += 1
            h.feed(
                f.AskAdded(
                    app=app,
                    ask=f"k{asks}",
                    resource={"memory": memory, "vcore": count},
                    count=count,
                    priority=priority,
                    gang_min=count if what == "gang" and count > 1 else 0,
                ),
                allow_rejected=True,
            )
        elif what == "fill":  # b and c borrow what is free
            for borrower in ("b1", "c1"):
                asks += 1
                wanted = {"memory": 10 + memory % 30, "vcore": 1}
                h.feed(f.AskAdded(app=borrower, ask=f"k{asks}", resource=wanted, count=6), allow_rejected=True)
            h.settle()
        elif what == "settle":
            h.settle()
        elif what == "release" and state.allocations:
            h.release(sorted(state.allocations)[which % len(state.allocations)])
        elif what == "withdraw":
            held = sorted((a.name, k) for a in state.apps.values() for k in a.asks)
            if held:
                name, ask = held[which % len(held)]
                h.feed(f.AskRemoved(app=name, ask=ask), allow_rejected=True)
        elif what == "shrink":
            shrunk = {"memory": 40 + memory, "vcore": 10}
            h.feed(f.NodeUpdated(node=NODES[which % 3], capacity=shrunk), allow_rejected=True)
        elif what == "lose":
            h.feed(f.NodeRemoved(node=NODES[which % 3]), allow_rejected=True)
        elif what == "restore":
            missing = [n for n in NODES if n not in state.nodes]
            if missing:
                h.feed(f.NodeAdded(node=missing[which % len(missing)], capacity={"memory": 100, "vcore": 10}))
        elif what == "preempt":  # a starves for what b and c borrowed
            asks += 1
            wanted = {"memory": memory, "vcore": 1}
            h.feed(f.AskAdded(app="a1", ask=f"k{asks}", resource=wanted, count=count, priority=priority))
            h.starve()
            h.preempt_round(state.now + 1.0)
            h.tick(state.now + GRACE + 1.0)  # notices run out: the victims still there are killed
            h.preempt_round()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEP, min_size=8, max_size=30))
def test_after_every_delta_the_replica_keeps_the_caches_totals_and_indexes(
    steps: list[tuple[str, int, int, int, int]],
) -> None:
    h = start()
    play(h, steps)
    h.settle()
    assert h.deltas_compared > 0


def test_a_preemption_with_kills_node_loss_and_a_gang_leaves_both_copies_equal() -> None:
    """The same rule on one run that takes every path: b and c hold the cluster, a's gang starves and
    preempts, the victims are killed, a node goes with containers on it and comes back, the gang lands."""
    h = start()
    h.feed(f.AskAdded(app="b1", ask="fill", resource={"memory": 25, "vcore": 2}, count=8))
    h.feed(f.AskAdded(app="c1", ask="fill", resource={"memory": 25, "vcore": 2}, count=4))
    h.settle()
    assert len(h.cache.state.allocations) == 12, "b and c hold the whole cluster"
    h.feed(f.AskAdded(app="a1", ask="gang", resource={"memory": 50, "vcore": 4}, count=2, gang_min=2, priority=1))
    h.starve()
    result = h.preempt_round(1.0)
    assert result.proposal is not None and h.preempts(), "a's gang preempts b's borrowed room"
    h.tick(1.0 + GRACE + 1.0)
    h.preempt_round()
    assert h.kills(), "the victims still running after their notice are killed"
    lost = next(a.node for a in h.cache.state.allocations.values())
    h.feed(f.NodeRemoved(node=lost))
    h.feed(f.NodeAdded(node=lost, capacity={"memory": 100, "vcore": 10}))
    h.settle()
    placed = {x.ask for x in h.allocated()}
    assert "gang" in placed
    assert isinstance(h.views[-1], p.ViewDelta) and h.deltas_compared >= len(h.views)
