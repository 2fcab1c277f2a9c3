"""Plain, immutable snapshots of a partition's queues, applications and containers, as preemption sees them.

Owns: :class:`ContainerSnapshot`, :class:`AppSnapshot`, :class:`QueueSnapshot`, :class:`ClusterSnapshot` and
their structural validation. These are the only inputs of the decision code in this package; they are built
by code from live scheduler state or loaded from the conformance JSON (:mod:`sniper.core.yarn.conformance`).

Invariants of a constructed :class:`ClusterSnapshot` (checked in ``__post_init__``, violations raise
:class:`SnapshotError`): queue paths are unique; exactly one root, listed first; queues are in depth-first
pre-order; every ``parent``/``children`` link is mirrored on the other side; ``is_leaf`` is true exactly for
queues without children; only leaves hold applications and every app names the queue that holds it; every
container belongs to the app that holds it; container ids are unique in the snapshot. Resources are
``dict[str, int]`` (a missing name means zero); snapshots are never mutated by the decision code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

from sniper.core.resources import MEMORY, VCORE, Resource


class SnapshotError(ValueError):
    """A snapshot that is structurally inconsistent; the message names the offending queue, app or container."""


@dataclasses.dataclass(frozen=True, slots=True)
class ContainerSnapshot:
    """A running (or reserved) container.

    ``priority`` is the container's scheduling priority: a numerically larger value is a lower priority and is
    preempted first. ``seq`` is the allocation order inside the app (YARN's container id number): a larger
    value was allocated later and is preempted first. ``reserved`` marks a reservation (not yet running);
    ``am`` marks the application master. ``killable`` marks a container the scheduler already holds as
    killable (it is not selected again and its resource is not counted as preemptable usage).
    """

    id: str
    app: str
    resource: Resource
    priority: int = 0
    reserved: bool = False
    am: bool = False
    seq: int = 0
    killable: bool = False
    node: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class AppSnapshot:
    """An application in a leaf queue; ``submit_order`` grows with submission time (last submitted = largest).
    ``max_disruption``: at most that many of its containers killable (under notice) at once (``None``: no
    budget); ``allow_preemption`` false: its containers are taken only after every other of the leaf's."""

    id: str
    queue: str
    submit_order: int
    priority: int = 0
    containers: tuple[ContainerSnapshot, ...] = ()
    max_disruption: int | None = None
    allow_preemption: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """One queue of the tree.

    ``guaranteed`` is the effective minimum, ``max`` the effective maximum, ``used`` the usage as the
    scheduler reports it (a parent's ``used`` is not recomputed from its children). ``pending`` is the
    outstanding demand; ``pending_considering_reserved`` the same with reserved resources deducted (what the
    ideal assignment may still hand to the queue). For parents both are recomputed by the decision code as the
    sum of their children's, whatever is given here. ``priority`` is the queue's priority relative to its
    siblings (larger = more important). ``preemption_disabled`` is already resolved (inherited).
    ``max_am_resource_percent`` bounds the AM resource a leaf keeps when its AMs are preempted.
    ``smallest_pending_ask`` is the smallest resource request waiting in the queue, if known (Sniper's
    ineffective-preemption avoidance); ``None`` means unknown.
    """

    path: str
    parent: str | None
    children: tuple[str, ...]
    is_leaf: bool
    guaranteed: Resource
    max: Resource
    used: Resource
    pending: Resource
    pending_considering_reserved: Resource
    reserved: Resource
    priority: int = 0
    preemption_disabled: bool = False
    fenced: bool = False  # its own ``preemption.policy`` is ``fence`` (Sniper's ideal reads it)
    apps: tuple[AppSnapshot, ...] = ()
    max_am_resource_percent: float = 0.0
    smallest_pending_ask: Resource | None = None


def _default_resource_names(cluster: Mapping[str, int], queues: tuple[QueueSnapshot, ...]) -> tuple[str, ...]:
    names: set[str] = set(cluster)
    for q in queues:
        for r in (q.guaranteed, q.max, q.used, q.pending):
            names.update(r)
    ordered = [n for n in (MEMORY, VCORE) if n in names]
    ordered.extend(sorted(names - {MEMORY, VCORE}))
    return tuple(ordered)


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """A partition at one instant: its total resource (given, never recomputed) and its queue tree.

    ``queues`` are in depth-first pre-order with the root first. ``resource_names`` fixes the resource types the
    calculators know and the order of list outputs; when left empty it is derived (``memory``, ``vcore``, then
    the other names seen, sorted).
    """

    resource: Resource
    queues: tuple[QueueSnapshot, ...]
    resource_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.resource_names:
            object.__setattr__(self, "resource_names", _default_resource_names(self.resource, self.queues))
        _validate(self)

    @property
    def root(self) -> QueueSnapshot:
        return self.queues[0]

    def queue(self, path: str) -> QueueSnapshot:
        for q in self.queues:
            if q.path == path:
                return q
        raise KeyError(path)

    def by_path(self) -> dict[str, QueueSnapshot]:
        return {q.path: q for q in self.queues}

    def leaves(self) -> list[QueueSnapshot]:
        """Leaf queues in pre-order."""
        return [q for q in self.queues if q.is_leaf]

    def apps(self) -> Iterator[AppSnapshot]:
        """Every application, leaf by leaf in pre-order, each leaf's apps in the given order."""
        for q in self.queues:
            yield from q.apps


def _validate(snap: ClusterSnapshot) -> None:
    if not snap.queues:
        raise SnapshotError("snapshot has no queues")
    by_path: dict[str, QueueSnapshot] = {}
    for q in snap.queues:
        if q.path in by_path:
            raise SnapshotError(f"queue {q.path}: listed twice")
        by_path[q.path] = q
    root = snap.queues[0]
    if root.parent is not None:
        raise SnapshotError(f"queue {root.path}: the first queue must be the root (parent null)")
    for q in snap.queues[1:]:
        if q.parent is None:
            raise SnapshotError(f"queue {q.path}: a second root (parent null)")
        parent = by_path.get(q.parent)
        if parent is None:
            raise SnapshotError(f"queue {q.path}: unknown parent {q.parent!r}")
        if q.path not in parent.children:
            raise SnapshotError(f"queue {q.path}: not among the children of its parent {q.parent}")
    for q in snap.queues:
        for child in q.children:
            c = by_path.get(child)
            if c is None:
                raise SnapshotError(f"queue {q.path}: unknown child {child!r}")
            if c.parent != q.path:
                raise SnapshotError(f"queue {child}: parent is {c.parent!r}, but {q.path} lists it as a child")
        if q.is_leaf == bool(q.children):
            raise SnapshotError(f"queue {q.path}: is_leaf={q.is_leaf} but it has {len(q.children)} children")
        if q.apps and not q.is_leaf:
            raise SnapshotError(f"queue {q.path}: only leaf queues hold applications")
    expected: list[str] = []

    def walk(path: str) -> None:
        expected.append(path)
        for child in by_path[path].children:
            walk(child)

    walk(root.path)
    if [q.path for q in snap.queues] != expected:
        raise SnapshotError("queues are not in depth-first pre-order of the tree")
    container_ids: set[str] = set()
    app_ids: set[str] = set()
    for q in snap.queues:
        for app in q.apps:
            if app.queue != q.path:
                raise SnapshotError(f"app {app.id}: says queue {app.queue!r} but is held by {q.path}")
            if app.id in app_ids:
                raise SnapshotError(f"app {app.id}: listed twice")
            app_ids.add(app.id)
            for container in app.containers:
                if container.app != app.id:
                    raise SnapshotError(f"container {container.id}: says app {container.app!r} but is held by {app.id}")
                if container.id in container_ids:
                    raise SnapshotError(f"container {container.id}: listed twice")
                container_ids.add(container.id)
