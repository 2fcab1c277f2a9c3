"""Kubernetes objects in Sniper's units: quantities, a node's capacity and schedulability, a pod's request.

Works on plain JSON dicts as the API server serves them (camelCase keys). One quantity grammar for the
whole product (:func:`sniper.core.resources.parse_quantity`'s); a request is rounded up (a pod never gets
less than it asked for) and a capacity down (a node is never promised more than it has). Pure functions.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from typing import Any

from sniper.core.resources import Resource

KubeObject = Mapping[str, Any]
HOSTNAME_LABEL = "kubernetes.io/hostname"
ALLOCATION_ANNOTATION = "sniper.apache.org/allocation"


class KubeObjectError(ValueError):
    """An object the API server would not serve, or Sniper cannot read: the message names it and the field."""


def sniper_resource_name(name: str) -> str:
    """The feed's name for a Kubernetes resource: ``cpu`` is ``vcore``, the others keep their names."""
    raise NotImplementedError


def quantity(name: str, value: object, *, round_up: bool) -> int:
    """A Kubernetes quantity of the Kubernetes resource ``name`` in Sniper's unit for it."""
    raise NotImplementedError


def resources(raw: Mapping[str, object] | None, where: str, *, round_up: bool) -> Resource:
    """A Kubernetes resource list (``requests``, ``allocatable``) in Sniper's units, zeros dropped."""
    raise NotImplementedError


def pod_key(pod: KubeObject) -> str:
    """``NAMESPACE/NAME``: the pod's ask key."""
    raise NotImplementedError


def event_id(kind: str, obj: KubeObject) -> str:
    """A feed event id that derives from the object: ``kind/UID/resourceVersion``."""
    raise NotImplementedError


def pod_request(pod: KubeObject) -> Resource:
    """What the pod asks for, as Kubernetes counts it, plus one ``pods``."""
    raise NotImplementedError


@dataclasses.dataclass(frozen=True, slots=True)
class NodeView:
    """A node as the feed sees it."""

    name: str
    allocatable: Resource
    labels: dict[str, str]
    schedulable: bool
    why_unschedulable: tuple[str, ...] = ()


def node_view(node: KubeObject) -> NodeView:
    raise NotImplementedError


def published_capacity(allocatable: Resource, occupied: Iterable[Resource]) -> Resource:
    """A node's capacity on the feed: its allocatable less what foreign pods request, never negative."""
    raise NotImplementedError


class PodRole(enum.Enum):
    ASK = "ask"
    PLACED = "placed"
    FOREIGN = "foreign"
    WAITING = "waiting"
    NOT_OURS = "not_ours"
    FINISHED = "finished"


def pod_role(pod: KubeObject, scheduler_name: str) -> PodRole:
    raise NotImplementedError


def allocation_of(pod: KubeObject) -> str | None:
    """The allocation id Sniper gave a pod it bound (the annotation its Binding carried)."""
    raise NotImplementedError
