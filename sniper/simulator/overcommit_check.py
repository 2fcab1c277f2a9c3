"""The independent checker's view of over-commit (architecture: invariant 12), from the feed's
``node_utilization`` reports and the decisions alone; it shares no code with :mod:`sniper.core.overcommit`.

Per node it keeps the last two reports, each with the containers placed since (taken to use all they
hold) and the usage of the opportunistic containers killed since. A decision may have crossed the
latest report on its way, so a placement or a kill is judged against either of the two; the state at
quiescence is judged against the latest, which the scheduler has handled by then.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Protocol

from sniper.core import resources as res
from sniper.core.config import OvercommitConfig, PartitionConfig
from sniper.core.resources import Resource
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.model_allocation import ModelAllocation

INVARIANT = 12


@dataclasses.dataclass(slots=True)
class Report:
    used: Resource
    after: set[str] = dataclasses.field(default_factory=set)  # containers placed on the node since
    killed: Resource = dataclasses.field(default_factory=dict)  # usage of opportunistic ones killed since
    present: set[str] = dataclasses.field(default_factory=set)  # opportunistic ones running when it came

    def left(self) -> Resource:
        return res.sub(self.used, self.killed)


def _number(aid: str) -> int:
    tail = aid.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def _above(used: Resource, thresholds: dict[str, float], capacity: Resource) -> bool:
    return any(used.get(k, 0) > fraction * capacity.get(k, 0) for k, fraction in thresholds.items())


class Model(Protocol):
    """What this view reads of the model (:class:`sniper.simulator.model.ClusterModel`), and how it reports."""

    @property
    def config(self) -> PartitionConfig | None: ...

    @property
    def nodes(self) -> Mapping[str, Resource]: ...

    @property
    def allocations(self) -> Mapping[str, ModelAllocation]: ...

    @property
    def on_node(self) -> Mapping[str, set[str]]: ...

    def _violate(self, t: float, invariant: int, reason: str) -> None: ...


class OvercommitChecker:
    def __init__(self, model: Model) -> None:
        self.model = model
        self.reports: dict[str, list[Report]] = {}  # node -> its last two reports, the newest last

    @property
    def config(self) -> OvercommitConfig | None:
        config = self.model.config
        return config.overcommit if config is not None else None

    def _running_opportunistic(self, node: str) -> list[ModelAllocation]:
        """The node's opportunistic containers not under notice, newest first."""
        model = self.model
        found = [
            a
            for a in (model.allocations[x] for x in model.on_node.get(node, ()))
            if a.opportunistic and a.preempted_at is None
        ]
        return sorted(found, key=lambda a: (-a.start, -_number(a.id)))

    # ------------------------------------------------------------------ inputs

    def report(self, event: f.NodeUtilization) -> None:
        """A report the scheduler takes (the others it refuses, with the reason)."""
        capacity = self.model.nodes.get(event.node)
        if capacity is None:
            return
        used = event.used
        if any(not math.isfinite(v) or v < 0 or k not in capacity for k, v in used.items()):
            return
        present = {a.id for a in self._running_opportunistic(event.node)}
        held = self.reports.setdefault(event.node, [])
        held.append(Report({k: math.ceil(v) for k, v in used.items() if v > 0}, present=present))
        del held[:-2]

    def node_gone(self, node: str) -> None:
        self.reports.pop(node, None)

    def clear(self) -> None:
        self.reports.clear()

    def allocated(self, dec: d.Allocated, resource: Resource) -> bool:
        """Judge a placement (before the model adds it); whether it over-commits its node: it does not
        fit the room the node's containers leave. Only an opportunistic one may, and only while the
        projected utilization stays below ``allocate_below``; no guaranteed one is placed on a node's
        over-committed room."""
        node = dec.node
        capacity = self.model.nodes.get(node, {})
        model = self.model
        here = [model.allocations[x] for x in model.on_node.get(node, ())]
        over = not res.fits(res.add(res.total(a.resource for a in here), resource), capacity)
        if over and dec.opportunistic:
            self._check_overcommitted(dec, resource, capacity, here)
        elif over and any(a.overcommit for a in here):
            self._violate(dec.t, f"guaranteed {dec.allocation} placed on over-committed room of {node}")
        for r in self.reports.get(node, ()):
            r.after.add(dec.allocation)
        return over and dec.opportunistic

    def _check_overcommitted(
        self, dec: d.Allocated, resource: Resource, capacity: Resource, here: list[ModelAllocation]
    ) -> None:
        config = self.config
        if config is None:
            self._violate(dec.t, f"opportunistic {dec.allocation} over-commits {dec.node}, but over-commit is off")
            return
        allocations = self.model.allocations
        free = res.sub(capacity, res.total(a.resource for a in here))
        below = config.allocate_below
        for r in self.reports.get(dec.node, ()):
            use = dict(r.used)
            for aid in r.after:
                other = allocations.get(aid)
                if other is not None:
                    res.add_into(use, other.resource)
            if all(
                (use.get(k, 0) + v < below[k] * capacity.get(k, 0)) if k in below else v <= free.get(k, 0)
                for k, v in resource.items()
            ):
                return
        self._violate(
            dec.t, f"{dec.allocation} over-committed on {dec.node}, whose utilization is not below allocate_below"
        )

    def killed(self, dec: d.Kill, alloc: ModelAllocation) -> None:
        """A kill for over-commit takes the newest running opportunistic container of a node whose
        reported utilization, less what was killed since, is above ``preempt_above``. Call before the
        model drops it."""
        reports = self.reports.get(alloc.node, [])
        if dec.reason == "overcommit":
            config = self.config
            if not alloc.opportunistic:
                self._violate(dec.t, f"guaranteed {alloc.id} killed by over-commit")
            elif alloc.preempted_at is None and self._running_opportunistic(alloc.node)[0].id != alloc.id:
                self._violate(dec.t, f"over-commit killed {alloc.id}, not the newest opportunistic one on {alloc.node}")
            capacity = self.model.nodes.get(alloc.node, {})
            if config is None or not any(_above(r.left(), config.preempt_above, capacity) for r in reports):
                self._violate(dec.t, f"over-commit killed {alloc.id} while {alloc.node} was not above preempt_above")
        if alloc.opportunistic:
            for r in reports:
                res.add_into(r.killed, alloc.usage)

    def check(self, t: float) -> None:
        """At quiescence: no node is left above ``preempt_above`` by its latest report, less what was
        killed since, while an opportunistic container that ran when it came still runs unwarned."""
        config = self.config
        if config is None:
            return
        model = self.model
        for node, reports in self.reports.items():
            latest = reports[-1]
            capacity = model.nodes.get(node, {})
            if not _above(latest.left(), config.preempt_above, capacity):
                continue
            alive = [x for x in latest.present if x in model.allocations and model.allocations[x].preempted_at is None]
            if alive:
                self._violate(t, f"{node} above preempt_above with opportunistic {sorted(alive)[0]} still running")
                latest.present.clear()  # said once

    def _violate(self, t: float, reason: str) -> None:
        self.model._violate(t, INVARIANT, reason)
