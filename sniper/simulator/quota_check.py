"""The independent checker's view of quota preemption (architecture: invariant 15), from the feed's
configurations and the decisions alone; it shares no code with :mod:`sniper.core.preemption.quota_preemption`.

It tracks the queues with a ``quota.preemption.delay`` in a partition whose quota preemption is on (and
whose preemption neither is off nor only observes), each with the time its current ``max`` took effect.
A ``preempt`` of policy ``quota`` names a container of such a queue (or under one) that still holds more
than its ``max`` once the containers already under notice are gone: no victim outside the queue, none
once it is back. At quiescence, no tracked queue without a preemption-disabled queue in its subtree holds
more than its ``max`` once its delay, the grace and one round (``preemption.interval``) have passed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from sniper.core import resources as res
from sniper.core.config import PartitionConfig
from sniper.core.resources import Resource
from sniper.core.units import human_resource
from sniper.messages import decisions as d
from sniper.simulator.model_allocation import ModelAllocation

INVARIANT = 15
QUOTA = "quota"  # the policy a quota preemption's notice names


class Model(Protocol):
    """What this view reads of the model (:class:`sniper.simulator.model.ClusterModel`), and how it reports."""

    @property
    def usage(self) -> Mapping[str, Resource]: ...

    @property
    def allocations(self) -> Mapping[str, ModelAllocation]: ...

    def _violate(self, t: float, invariant: int, reason: str) -> None: ...


class QuotaChecker:
    def __init__(self, model: Model) -> None:
        self.model = model
        self.maxes: dict[str, Resource] = {}  # tracked queue -> its max
        self.since: dict[str, float] = {}  # tracked queue -> when that max took effect
        self.due_after: dict[str, float] = {}  # tracked queue -> delay + grace + one round
        self.reported: set[tuple[str, float]] = set()  # (queue, since) found late once already

    def configure(self, config: PartitionConfig, t: float) -> None:
        pre = config.preemption
        on = pre.quotapreemptionenabled and pre.policy != "none" and not pre.observe_only
        maxes: dict[str, Resource] = {}
        since: dict[str, float] = {}
        due_after: dict[str, float] = {}
        for q in config.queues() if on else ():
            if q.max is None or q.quota_preemption_delay <= 0:
                continue
            maxes[q.path] = dict(q.max)
            since[q.path] = self.since[q.path] if self.maxes.get(q.path) == q.max else t
            if all(c.preemption_policy != "disabled" for c in q.walk()):
                due_after[q.path] = q.quota_preemption_delay + pre.grace + pre.interval
        self.maxes, self.since, self.due_after = maxes, since, due_after

    def _leaving(self, path: str) -> Resource:
        prefix = path + "."
        return res.total(
            a.resource
            for a in self.model.allocations.values()
            if a.preempted_at is not None and not a.opportunistic and (a.queue == path or a.queue.startswith(prefix))
        )

    def _excess(self, path: str, leaving: bool) -> Resource:
        usage = self.model.usage.get(path, {})
        if leaving:
            usage = res.sub(usage, self._leaving(path))
        return {k: usage.get(k, 0) - m for k, m in self.maxes[path].items() if usage.get(k, 0) > m}

    def notice(self, dec: d.Preempt, victim: ModelAllocation) -> None:
        """A quota notice's victim (not yet counted leaving) is in a tracked queue still above its max."""
        if dec.policy != QUOTA or dec.observe_only:
            return
        parts = victim.queue.split(".")
        lineage = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
        if not any(path in self.maxes and self._excess(path, leaving=True) for path in lineage):
            self.model._violate(
                dec.t,
                INVARIANT,
                f"quota victim {victim.id} of {victim.queue}: no queue over it is above its max without it",
            )

    def check(self, t: float) -> None:
        for path, after in self.due_after.items():
            late = (path, self.since[path])
            if late in self.reported or t <= late[1] + after:
                continue
            if over := self._excess(path, leaving=False):
                self.reported.add(late)
                self.model._violate(
                    t,
                    INVARIANT,
                    f"{path} still above its max by {human_resource(over)} {t - self.since[path]:g}s after it took "
                    f"effect (quota preemption allows {after:g}s)",
                )
