"""Pods onto applications and asks: YuniKorn's labels and annotations, gangs, opt-outs, and what cannot be said.

Sans-IO and deterministic, on plain JSON dicts as the API server serves them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from sniper.core.resources import Resource
from sniper.kubernetes.objects import KubeObject
from sniper.messages import feed as f


@dataclasses.dataclass(frozen=True, slots=True)
class Unexpressed:
    """Something on a pod Sniper cannot express; ``required``: a hard rule (the pod must not be asked for)."""

    message: str
    required: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Gang:
    """The gang a pod belongs to: its ask key within the app and its minimum members."""

    ask: str
    min_member: int


@dataclasses.dataclass(frozen=True, slots=True)
class PodAsk:
    """What one pod (or one gang of pods) asks Sniper for."""

    app: str
    ask: str
    resource: Resource
    priority: int = 0
    preemption_policy: Literal["preempt_lower_priority", "never"] = "preempt_lower_priority"
    node: str | None = None
    node_selector: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    tags: tuple[str, ...] = ()
    constraints: tuple[f.PlacementConstraint, ...] = ()
    count: int = 1
    gang_min: int = 0
    gang: Gang | None = None
    unexpressed: tuple[Unexpressed, ...] = ()

    def feed_event(self, *, partition: str, t: float, event_id: str) -> f.AskAdded:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True, slots=True)
class AppSpec:
    app: str
    queue: str
    user: str = ""
    groups: tuple[str, ...] = ()
    priority: int = 0
    allow_preemption: bool = True
    max_disruption: int | None = None

    def feed_event(self, *, partition: str, t: float, event_id: str) -> f.AppAdded:
        raise NotImplementedError


def app_id(pod: KubeObject) -> str:
    raise NotImplementedError


def map_pod(pod: KubeObject, *, pod_group: KubeObject | None = None) -> PodAsk:
    raise NotImplementedError


def gang_of(pod: KubeObject, pod_group: KubeObject | None = None) -> Gang | None:
    raise NotImplementedError


def gang_ask(members: Sequence[PodAsk]) -> PodAsk:
    raise NotImplementedError


def allow_preemption(priority_class: KubeObject | None) -> bool:
    raise NotImplementedError


def pdb_selects(pdb: KubeObject, pod: KubeObject) -> bool:
    raise NotImplementedError


def max_disruption(pdbs: Iterable[KubeObject], pods: Sequence[KubeObject]) -> int | None:
    raise NotImplementedError


def map_app(
    pod: KubeObject,
    *,
    queue: str,
    priority_class: KubeObject | None = None,
    pdbs: Iterable[KubeObject] = (),
    app_pods: Sequence[KubeObject] = (),
) -> AppSpec:
    raise NotImplementedError


def user_of(pod: KubeObject) -> tuple[str, tuple[str, ...]]:
    raise NotImplementedError


_ = Mapping
