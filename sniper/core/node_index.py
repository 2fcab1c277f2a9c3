"""Incremental node ordering for placement (``binpacking`` or ``fair``), like YuniKorn's node B-tree.

The index holds every schedulable node keyed by its free memory (the primary resource) and is
updated in O(log n) whenever a node's free room changes, so placement never sorts all nodes.
``binpacking`` walks nodes from the least free room that can hold the request upward (best fit);
``fair`` walks from the most free room downward (spread). Invariant: a node's key always equals
its free primary resource at the time of its last :meth:`NodeIndex.update`.
"""

from __future__ import annotations

from collections.abc import Iterator

from sortedcontainers import SortedList

from sniper.core.resources import MEMORY, ResourceLike


class NodeIndex:
    def __init__(self, policy: str) -> None:
        if policy not in ("binpacking", "fair"):
            raise ValueError(f"unknown node sort policy {policy!r}")
        self.policy = policy
        self._sign = 1 if policy == "binpacking" else -1
        self._sorted: SortedList = SortedList()
        self._keys: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, node: str) -> bool:
        return node in self._keys

    def update(self, node: str, free_primary: int) -> None:
        """Insert ``node`` or move it to its new free room."""
        key = self._sign * free_primary
        old = self._keys.get(node)
        if old == key:
            return
        if old is not None:
            self._sorted.remove((old, node))
        self._sorted.add((key, node))
        self._keys[node] = key

    def discard(self, node: str) -> None:
        old = self._keys.pop(node, None)
        if old is not None:
            self._sorted.remove((old, node))

    def candidates(self, request: ResourceLike) -> Iterator[str]:
        """Node names in placement order; nodes that cannot hold the request's memory come last or never."""
        need = request.get(MEMORY, 0)
        ordered = self._sorted
        if self._sign > 0:
            start, stop = ordered.bisect_left((need, "")), len(ordered)
        else:
            start, stop = 0, ordered.bisect_right((-need, "\U0010ffff"))
        if start >= stop:
            return
        yield ordered[start][1]  # the first by position: most placements look no further
        for _, name in ordered.islice(start + 1, stop):
            yield name

    def ordered(self) -> list[str]:
        return [name for _, name in self._sorted]
