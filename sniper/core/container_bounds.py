"""Per node and leaf queue, bounds over the guaranteed containers running there, kept by the state.

:class:`ContainerBounds` holds how many there are, the largest amount of each resource one of them holds
and when the newest of them started. Invariants: ``count`` and ``latest_start`` are exact; no such
container holds more than ``largest`` of any resource (exact until one leaves, an upper bound after, exact
again whenever the newest leaves and the rest are counted anew); an entry exists only while ``count`` is
positive. The preemption search reads them to bound, without looking at a node's
containers, how many victims there it needs at least and what each costs at least.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from sniper.core import resources as res
from sniper.core.resources import Resource


class ContainerBounds(msgspec.Struct, gc=False):
    """Never tracked by the garbage collector (``gc=False``): it refers to resources only, so it is never
    in a reference cycle; a node holds one per leaf queue with containers there, in each replica.
    ``largest`` is replaced, never written: it may be a container's own resource."""

    count: int
    largest: Resource
    last: Resource  # the resource last counted into ``largest``
    latest_start: float

    @classmethod
    def first(cls, resource: Resource, start: float) -> ContainerBounds:
        """The bounds over one container holding ``resource``, started at ``start``."""
        return cls(1, res.shared(resource), resource, start)

    def include(self, resource: Resource, start: float) -> None:
        """Count one more container holding ``resource``, started at ``start``."""
        self.count += 1
        last = self.last
        # Containers of one ask share their resource, and many asks ask alike: counted in already.
        if resource is not last and resource != last:
            largest = self.largest
            for k, v in resource.items():
                if v > largest.get(k, 0):
                    self.largest = res.normalized(res.component_max(largest, resource))
                    break
            self.last = resource
        if start > self.latest_start:
            self.latest_start = start


def placed(bounds: dict[str, ContainerBounds], path: str, resource: Resource, start: float) -> None:
    """A guaranteed container of leaf queue ``path`` started on the node whose bounds these are."""
    entry = bounds.get(path)
    if entry is None:
        bounds[path] = ContainerBounds.first(resource, start)
    else:
        entry.include(resource, start)


def released(
    bounds: dict[str, ContainerBounds], path: str, start: float, remaining: Iterable[tuple[Resource, float]]
) -> None:
    """A guaranteed container of ``path`` that started at ``start`` left the node; ``remaining`` yields the
    resource and start of every guaranteed container of ``path`` still there (read only when the newest
    left, to recompute the bounds exactly)."""
    entry = bounds[path]
    if entry.count <= 1:
        del bounds[path]
        return
    if start < entry.latest_start:
        entry.count -= 1
        return
    fresh: ContainerBounds | None = None
    for resource, begun in remaining:
        if fresh is None:
            fresh = ContainerBounds.first(resource, begun)
        else:
            fresh.include(resource, begun)
    if fresh is None:
        del bounds[path]
    else:
        bounds[path] = fresh
