"""The independent checker of a live cluster: feed and decisions merged in the order the caches saw them.

Owns one :class:`~sniper.simulator.model.ClusterModel` (and :class:`~sniper.simulator.metrics.Metrics`) per
scheduler partition, fed from outside the scheduler: feed records with their Kafka offsets and the
decisions from the decisions topic. A decision says after which feed record it was made
(``feed_offset``), so the checker applies the feed records of that partition up to that offset before
the decision, and checks the invariants (architecture: Invariants) on exactly the sequence the cache
committed, however the two topics interleave on the wire.

Invariants:

- **Epochs** (what a resource manager does): per partition, a decision with an epoch lower than the
  highest seen is a deposed owner's and is dropped (counted in ``stale``); within an epoch, a seq
  already seen is a redelivery and is dropped (``duplicates``).
- Decisions wait until their feed records arrived; :meth:`OrderedChecker.finish` applies whatever is
  left (feed records no decision followed) and runs the quiescent checks.
- Times given to the models and metrics are the caller's clock (``now``), not the cores' clocks.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter, deque
from collections.abc import Mapping
from typing import Any

import msgspec

from sniper.core.config import PartitionConfig, SchedulerConfig, parse_partition
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.metrics import IdealFn, Metrics
from sniper.simulator.model import ClusterModel
from sniper.simulator.report import PartitionFigures, Report, build_report


@dataclasses.dataclass(slots=True)
class _Partition:
    model: ClusterModel
    metrics: Metrics
    feed: deque[tuple[int, f.Feed]] = dataclasses.field(default_factory=deque)
    waiting: deque[d.DecisionMsg] = dataclasses.field(default_factory=deque)
    applied_offset: int = -1
    max_epoch: int = 0
    last_seq: int = 0
    accepted: list[d.DecisionMsg] = dataclasses.field(default_factory=list)


class OrderedChecker:
    def __init__(self, config: SchedulerConfig | None = None, ideal_fn: IdealFn | None = None) -> None:
        self.configs: dict[str, PartitionConfig] = {p.name: p for p in (config.partitions if config else ())}
        self.ideal_fn = ideal_fn
        self.parts: dict[str, _Partition] = {}
        self.stale = 0
        self.duplicates = 0

    def part(self, name: str) -> _Partition:
        part = self.parts.get(name)
        if part is None:
            model = ClusterModel(name, self.configs.get(name))
            part = self.parts[name] = _Partition(model, Metrics(model, self.ideal_fn))
        return part

    # ---- inputs
    def on_feed(self, offset: int, event: f.Feed, now: float) -> None:
        part = self.part(event.partition)
        if isinstance(event, f.PartitionConfigEvent) and part.model.config is None:
            with contextlib.suppress(ValueError):
                part.model.configure(parse_partition(event.config, f"partition {event.partition}"))
        part.feed.append((offset, event))
        self._drain(part, now)

    def on_decision(self, dec: d.DecisionMsg, now: float) -> bool:
        """Take one decision off the wire; False if it was dropped (stale epoch or duplicate)."""
        part = self.part(dec.partition)
        if dec.epoch < part.max_epoch:
            self.stale += 1
            return False
        if dec.epoch == part.max_epoch and dec.seq <= part.last_seq:
            self.duplicates += 1
            return False
        part.max_epoch = dec.epoch
        part.last_seq = dec.seq
        part.waiting.append(dec)
        self._drain(part, now)
        return True

    def _apply_feed(self, part: _Partition, upto: int | None) -> None:
        while part.feed and (upto is None or part.feed[0][0] <= upto):
            offset, event = part.feed.popleft()
            part.applied_offset = max(part.applied_offset, offset)
            part.model.on_event(event)  # the model ignores a duplicated event, as the cache does

    def _drain(self, part: _Partition, now: float) -> None:
        while part.waiting:
            dec = part.waiting[0]
            if dec.feed_offset > part.applied_offset:
                self._apply_feed(part, dec.feed_offset)
                if dec.feed_offset > part.applied_offset:
                    return  # its feed records have not arrived yet
            part.waiting.popleft()
            timed = msgspec.structs.replace(dec, t=now)
            part.model.on_decision(timed)
            part.metrics.record(timed)
            part.accepted.append(dec)

    def sample(self, now: float) -> None:
        for part in self.parts.values():
            if part.model.nodes:  # nothing to measure before the first node is known
                part.metrics.sample(now)

    def finish(self, now: float) -> None:
        """Apply everything left and run the quiescent invariant checks (call once the cluster is idle)."""
        for part in self.parts.values():
            self._drain(part, now)
            while part.waiting:  # feed records never seen (read before the checker started): apply anyway
                self._apply_feed(part, part.waiting[0].feed_offset)
                dec = part.waiting.popleft()
                timed = msgspec.structs.replace(dec, t=now)
                part.model.on_decision(timed)
                part.metrics.record(timed)
                part.accepted.append(dec)
            self._apply_feed(part, None)
            part.model.check(now)
            part.metrics.sample(now)
            part.metrics.finish(now)

    # ---- results
    @property
    def violations(self) -> int:
        return sum(len(p.model.violations) for p in self.parts.values())

    def pending_decisions(self) -> int:
        return sum(len(p.waiting) for p in self.parts.values())

    def decisions(self) -> list[d.DecisionMsg]:
        return [x for p in self.parts.values() for x in p.accepted]

    def report(
        self,
        *,
        seconds: float,
        wall: float,
        tick: float,
        lost_work: Mapping[str, float] | None = None,
        lost_work_by_cause: Mapping[str, Mapping[str, float]] | None = None,
        running_time_lost: Mapping[str, float] | None = None,
        retries: int = 0,
        extra: Mapping[str, Any] | None = None,
    ) -> Report:
        """The report (architecture: Metrics), as far as the decisions allow (``proposals_rejected``: None)."""
        parts = {
            name: PartitionFigures(
                model=part.model,
                metrics=part.metrics,
                grace=part.model.config.preemption.grace if part.model.config is not None else 15.0,
                counts=Counter(type(x).__name__ for x in part.accepted),
                lost_work=(lost_work or {}).get(name, 0.0),
                lost_work_by_cause=(lost_work_by_cause or {}).get(name, {}),
                running_time_lost=(running_time_lost or {}).get(name, 0.0),
            )
            for name, part in self.parts.items()
        }
        more = {
            "stale_decisions_dropped": self.stale,
            "duplicate_decisions_dropped": self.duplicates,
            "epochs": {name: part.max_epoch for name, part in sorted(self.parts.items())},
            **(extra or {}),
        }
        return build_report(
            parts, sim_seconds=seconds, wall=wall, cycle=tick, retries=retries, transport="kafka", extra=more
        )
