"""An app's pending asks in scheduling order (:class:`AskOrder`): priority high first, then the oldest.

One plain list kept sorted by each ask's ``sort_key`` (fixed for the ask's life): an app has a handful
of asks, and a partition holds an order per app in each of its replicas, so the order is one object the
garbage collector tracks, not a tree of lists. Invariant: the list is sorted by ``sort_key``, and holds
each ask at most once (asks are found by identity; equal keys keep their insertion order).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Protocol, TypeVar, cast


class Ordered(Protocol):
    @property
    def sort_key(self) -> tuple[int, int]: ...


T = TypeVar("T", bound=Ordered)


def _key(item: Ordered) -> tuple[int, int]:
    return item.sort_key


class AskOrder(list[T]):
    """Asks sorted by ``sort_key``: :meth:`add`, :meth:`discard` and ``in`` by bisection."""

    __slots__ = ()

    def add(self, item: T) -> None:
        """Insert ``item`` after those of an equal key (it must not be in already); the newest ask of the
        lowest priority, the usual arrival, is appended after one comparison."""
        key = item.sort_key
        if not self or self[-1].sort_key <= key:
            self.append(item)
        else:
            self.insert(bisect_right(self, key, key=_key), item)

    def _find(self, item: T) -> int:
        """The index of ``item`` itself, or -1; the first ask, the one a placement usually fills, without a search."""
        if self and self[0] is item:
            return 0
        key = item.sort_key
        at = bisect_left(self, key, key=_key)
        while at < len(self) and self[at].sort_key == key:
            if self[at] is item:
                return at
            at += 1
        return -1

    def discard(self, item: T) -> None:
        """Remove ``item`` if it is here."""
        at = self._find(item)
        if at >= 0:
            del self[at]

    def __contains__(self, item: object) -> bool:
        return self._find(cast(T, item)) >= 0
