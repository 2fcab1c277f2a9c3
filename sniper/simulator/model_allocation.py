"""A container as the independent checker's model sees it, from the decisions alone: shared by the
model (:mod:`sniper.simulator.model`) and its over-commit view (:mod:`sniper.simulator.overcommit_check`), below both.
"""

from __future__ import annotations

import dataclasses

from sniper.core.resources import Resource


@dataclasses.dataclass(slots=True)
class ModelAllocation:
    id: str
    app: str
    ask: str
    queue: str
    node: str
    resource: Resource
    start: float
    am: bool
    preempted_at: float | None = None
    opportunistic: bool = False  # on its node only: in no queue's usage, not bound by max
    usage: Resource = dataclasses.field(default_factory=dict)  # what it really uses (declared, else resource)
    overcommit: bool = False  # placed on room only measured utilization left (outside invariant 1)
