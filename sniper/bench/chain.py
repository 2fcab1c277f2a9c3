"""``sniper bench chain``: the decision work of one partition's chain per event, in one process.

The e2e bench's partition and feed (one large node, one leaf queue, one app, single-container asks of
1 MiB and 1 milli-core) go through a :class:`Cache` and an :class:`Allocator` wired by hand, as the
partition's actors wire them but without actors, a bus or Kafka: for each batch of events the cache
takes them (and drains its view delta), the allocator replica applies that delta, one allocation cycle
runs, the cache commits its proposal (and drains again), the replica applies the answer. After the last
batch, cycles run until one proposes nothing. Each phase is timed with ``time.process_time()`` (CPU
seconds of this process), so the figures are CPU per event, not wall time; setup is not timed. The
result checks itself: every ask is allocated once, on the node, nothing else is decided, and the
replica applies every view.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from sniper.bench.e2e import partition_config as e2e_partition_config
from sniper.core.allocator import Allocator
from sniper.core.cache import Cache
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p

PARTITION = "bench0"
NODE = "n1"
PHASES = (
    "cache_takes_events",
    "replica_applies_events",
    "cycle",
    "cache_commits_proposal",
    "replica_applies_answer",
)


def setup_events() -> list[f.Feed]:
    """The e2e bench's partition: its config, one node with room for any number of asks, one app."""
    return [
        f.PartitionConfigEvent(partition=PARTITION, config=e2e_partition_config(PARTITION)),
        f.NodeAdded(partition=PARTITION, node=NODE, capacity={"memory": 2**39, "vcore": 2**39}),
        f.AppAdded(partition=PARTITION, app="app", queue="root.a"),
    ]


def _batches(events: int, batch: int) -> Iterator[list[f.Feed]]:
    """The e2e bench's asks ``k0`` .. ``k{events-1}``, ``batch`` at a time."""
    for first in range(0, events, batch):
        yield [
            f.AskAdded(partition=PARTITION, app="app", ask=f"k{i}", resource={"memory": 1, "vcore": 1})
            for i in range(first, min(events, first + batch))
        ]


class Chain:
    """The cache and the allocator replica of one partition, the CPU seconds of each phase, the decisions."""

    def __init__(self) -> None:
        self.cache = Cache(PARTITION)
        self.allocator = Allocator(PARTITION)
        self.cpu = dict.fromkeys(PHASES, 0.0)
        self.decisions: list[d.DecisionMsg] = []
        self.cycles = 0
        self.gaps: list[str] = []  # views the replica could not apply (a gap in the sequence)

    def _apply(self, view: p.ViewDelta | None, phase: str, began: float) -> None:
        if view is not None and not self.allocator.apply_view(view):
            self.gaps.append(f"the replica found a gap at view {view.seq}")
        self.cpu[phase] += time.process_time() - began

    def take(self, events: list[f.Feed]) -> None:
        """The cache takes ``events`` and drains; the replica applies the delta (both timed)."""
        began = time.process_time()
        for event in events:
            self.cache.handle_event(event)
        out = self.cache.drain()
        now = time.process_time()
        self.cpu["cache_takes_events"] += now - began
        self.decisions += out.decisions
        self._apply(out.view, "replica_applies_events", now)

    def cycle(self) -> bool:
        """One allocation cycle and, if it proposed, the cache's commit and the replica's apply of the
        answer (all timed); whether it proposed."""
        began = time.process_time()
        proposal = self.allocator.cycle()
        now = time.process_time()
        self.cpu["cycle"] += now - began
        self.cycles += 1
        if proposal is None:
            return False
        self.cache.handle_proposal(proposal)
        out = self.cache.drain()
        committed = time.process_time()
        self.cpu["cache_commits_proposal"] += committed - now
        self.decisions += out.decisions
        self._apply(out.view, "replica_applies_answer", committed)
        return True


def problems(decisions: list[d.DecisionMsg], events: int) -> list[str]:
    """What the decisions got wrong against the feed: every ask ``k0`` .. ``k{events-1}`` allocated once,
    on the node, and no other decision."""
    found: list[str] = []
    placed: dict[str, int] = {}
    for dec in decisions:
        if isinstance(dec, d.Allocated) and dec.node == NODE:
            placed[dec.ask] = placed.get(dec.ask, 0) + 1
        else:
            found.append(f"unexpected {type(dec).__name__} decision for ask {getattr(dec, 'ask', '')!r}")
    wanted = {f"k{i}" for i in range(events)}
    missing = wanted - placed.keys()
    if missing:
        found.append(f"{len(missing)} asks never allocated (e.g. {min(missing)})")
    twice = sorted(ask for ask, times in placed.items() if times > 1)
    if twice:
        found.append(f"{len(twice)} asks allocated more than once (e.g. {twice[0]})")
    stray = sorted(placed.keys() - wanted)
    if stray:
        found.append(f"{len(stray)} allocations of asks the feed never sent (e.g. {stray[0]})")
    return found


def bench_chain(events: int, batch: int) -> dict[str, Any]:
    """``events`` asks through the chain ``batch`` at a time: µs of CPU per event in each phase and in
    all, the cycles, the decisions, and ``problems`` (empty when every ask was allocated once)."""
    chain = Chain()
    chain.take(setup_events())
    chain.cpu = dict.fromkeys(PHASES, 0.0)  # setup is not measured
    for events_batch in _batches(events, batch):
        chain.take(events_batch)
        chain.cycle()
    while chain.cycle():
        pass
    per_event = {f"{phase}_us": round(chain.cpu[phase] * 1e6 / events, 2) for phase in PHASES}
    return {
        "bench": "chain",
        "events": events,
        "batch": batch,
        **per_event,
        "chain_us": round(sum(chain.cpu.values()) * 1e6 / events, 2),
        "cycles": chain.cycles,
        "decisions": len(chain.decisions),
        "allocated": sum(isinstance(dec, d.Allocated) for dec in chain.decisions),
        "problems": chain.gaps + problems(chain.decisions, events),
    }
