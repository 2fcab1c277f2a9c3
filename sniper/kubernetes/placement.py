"""YuniKorn's placement rules: which queue an application's pods run in.

Sans-IO and deterministic. The rules are parsed with the configuration (:mod:`sniper.core.config`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from sniper.core.config import PartitionConfig, PlacementRuleConfig
from sniper.kubernetes.objects import KubeObject


class PlacementError(ValueError):
    """No rule placed the application; the message says why."""


@dataclasses.dataclass(frozen=True, slots=True)
class AppFacts:
    """What the rules read of an application: its user, groups, the queue it names, its tags."""

    user: str = ""
    groups: tuple[str, ...] = ()
    provided: str = ""
    tags: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class Placement:
    queue: str
    create: bool  # the queue does not exist yet: it must be added to the configuration


def app_facts(pod: KubeObject, namespace: KubeObject | None) -> AppFacts:
    raise NotImplementedError


def place(rules: Sequence[PlacementRuleConfig], facts: AppFacts, config: PartitionConfig) -> Placement:
    raise NotImplementedError


def with_queues(config: PartitionConfig, paths: Sequence[str]) -> PartitionConfig:
    raise NotImplementedError
