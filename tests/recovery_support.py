"""A partition's old owner driven by hand, and a new owner's recovery from its snapshot and log.

:class:`Owner` is a :class:`DurableCache` with an allocator replica: feed records get Kafka-like offsets
(with gaps), every decision it publishes goes to ``log``. :func:`recover` restores a snapshot and
replays the feed records and the decisions logged after it, as a new owner does; the tests compare
:func:`durable_fingerprint` of the two.
"""

from __future__ import annotations

from typing import Any

from sniper.core.allocator import Allocator
from sniper.core.recovery import DurableCache, ReplayResult, replay, restore, take_snapshot
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.messages.snapshot import Snapshot
from tests.core_support import PARTITION, fingerprint, partition_raw, queue


def durable_fingerprint(core: DurableCache) -> dict[str, Any]:
    """The state's fingerprint without its clock (a new owner's clock is the last event it replayed)."""
    out = fingerprint(core.state)
    out.pop("now")
    return out


class Owner:
    """An old owner: feed records get offsets, every decision goes to ``log``."""

    def __init__(self, policy: str = "sniper", config: dict[str, Any] | None = None) -> None:
        """``config``: the raw partition (default: queues a and b, 8 MiB guaranteed each)."""
        self.core = DurableCache(PARTITION)
        self.allocator = Allocator(PARTITION)
        self.log: list[d.DecisionMsg] = []
        self.feed: list[tuple[int, f.Feed]] = []
        self.offset = 100  # Kafka offsets need not start at 0
        self.proposals = 0
        raw = config or partition_raw(
            queue("a", guaranteed={"memory": 8}), queue("b", guaranteed={"memory": 8}), policy=policy
        )
        self.feed_event(f.PartitionConfigEvent(partition=PARTITION, config=raw))

    def pump(self) -> None:
        out = self.core.drain()
        if out.view is not None:
            assert self.allocator.apply_view(out.view)
        self.log.extend(out.decisions)

    def feed_event(self, *events: f.Feed) -> None:
        for event in events:
            self.offset += 1 + (self.offset % 3 == 0)  # gaps, like other keys' records in between
            self.feed.append((self.offset, event))
            self.core.feed_offset = self.offset
            self.core.handle_event(event)
        self.pump()

    def settle(self) -> None:
        for _ in range(50):
            proposal = self.allocator.cycle()
            if proposal is None:
                return
            self.core.handle_proposal(proposal)
            self.pump()
        raise AssertionError("never settled")

    def tick(self, now: float) -> None:
        self.core.tick(now)
        self.pump()

    def preempt(self, node: str, victims: list[str], app: str = "a1", ask: str = "k") -> None:
        """Proposes what a sniper policy round would: ``victims`` on ``node`` for ``app``'s ``ask``."""
        self.proposals += 1
        proposal = p.PreemptionProposal(
            partition=PARTITION,
            id=f"pp/{self.proposals}",
            view_seq=self.allocator.view_seq,
            policy="sniper",
            placements=[p.Victimized(app=app, ask=ask, node=node, victims=victims)],
        )
        self.core.handle_proposal(proposal)
        self.pump()


def busy_owner(count: int = 4, *more: f.Feed, contract: bool = False) -> Owner:
    """Two nodes of 8, filled by ``count`` containers of 4 of b1/k (and what ``more`` asks for); b1 has
    a preemption contract if ``contract``."""
    o = Owner()
    o.feed_event(
        f.NodeAdded(partition=PARTITION, id="n1", node="n1", capacity={"memory": 8}),
        f.NodeAdded(partition=PARTITION, id="n2", node="n2", capacity={"memory": 8}),
        f.AppAdded(partition=PARTITION, id="b1", app="b1", queue="root.b", preemption_contract=contract),
        f.AskAdded(partition=PARTITION, id="b1k", app="b1", ask="k", resource={"memory": 4}, count=count),
        *more,
    )
    o.settle()
    return o


def owner_with_a_contract_request() -> tuple[Owner, Snapshot, dict[str, list[str]]]:
    """An old owner on whose log b1 (contract) holds n1 and n2 (8 each) with 4s and a1's 8 is reserved
    on n1 (sniper, both of n1's named in one preemption request); a snapshot taken before a1 came; b1's
    containers per node."""
    o = busy_owner(contract=True)
    snap = take_snapshot(o.core)
    o.feed_event(
        f.AppAdded(partition=PARTITION, id="a1", app="a1", queue="root.a"),
        f.AskAdded(partition=PARTITION, id="a1k", app="a1", ask="k", resource={"memory": 8}, count=1),
    )
    o.settle()
    on = {n: sorted(a.id for a in o.core.state.allocations.values() if a.node == n) for n in ("n1", "n2")}
    o.preempt("n1", on["n1"])
    assert [type(x) for x in o.log[-1:]] == [d.PreemptRequest]
    return o, snap, on


def recover(o: Owner, snapshot: Snapshot, log: list[d.DecisionMsg] | None = None) -> tuple[DurableCache, ReplayResult]:
    """A new owner restored from ``snapshot`` (one epoch later) that replayed ``o``'s feed records and
    ``log`` (default: ``o``'s) after it: the new owner and what the replay found."""
    log = o.log if log is None else log
    core = restore(snapshot, epoch=snapshot.epoch + 1)
    feed = [(off, e) for off, e in o.feed if off > snapshot.feed_offset]
    after = [x for x in log if x.seq > snapshot.decision_seq]
    return core, replay(core, feed, after)
