"""An app's asks that still want containers, in scheduling order: higher priority first, then the oldest.

Invariant: iteration yields exactly the asks added and not discarded since, ordered by ``Ask.sort_key``
(``(-priority, seq)``; asks of equal key in the order they were added). Asks are held in one
insertion-ordered bucket per priority, so adding the newest ask of its priority (the usual case: the
cache numbers asks in arrival order), removing any ask and testing membership cost O(1); an ask older
than the newest of its priority (one wanted again after its reservation ended) re-sorts its bucket.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar


class Waiting(Protocol):
    """What the list reads of an ask: its name (unique in its app) and ``sort_key``, ``(-priority, seq)``."""

    @property
    def name(self) -> str: ...

    @property
    def sort_key(self) -> tuple[int, int]: ...


Ask = TypeVar("Ask", bound=Waiting)


class PendingAsks(Generic[Ask]):
    __slots__ = ("_buckets", "_keys", "_newest", "_size")

    def __init__(self) -> None:
        self._buckets: dict[int, dict[str, Ask]] = {}  # -priority -> ask name -> ask, in seq order
        self._keys: list[int] = []  # the buckets' -priority, ascending: the highest priority first
        # Per bucket, at least the largest seq in it (a removal leaves it: an older ask then re-sorts).
        self._newest: dict[int, int] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __contains__(self, ask: object) -> bool:
        key = getattr(ask, "sort_key", None)
        if key is None:
            return False
        bucket = self._buckets.get(key[0])
        return bucket is not None and bucket.get(ask.name) is ask  # type: ignore[attr-defined]

    def __iter__(self) -> Iterator[Ask]:
        buckets = self._buckets
        for key in self._keys:
            yield from buckets[key].values()

    def add(self, ask: Ask) -> None:
        first, seq = ask.sort_key
        bucket = self._buckets.get(first)
        if bucket is None:
            self._buckets[first] = {ask.name: ask}
            bisect.insort(self._keys, first)
            self._newest[first] = seq
        elif self._newest[first] <= seq:
            bucket[ask.name] = ask
            self._newest[first] = seq
        else:
            ordered = sorted([*bucket.values(), ask], key=_seq)  # stable: ``ask`` after its equals
            bucket.clear()
            bucket.update((a.name, a) for a in ordered)
        self._size += 1

    def discard(self, ask: Ask) -> None:
        first = ask.sort_key[0]
        bucket = self._buckets.get(first)
        if bucket is None or bucket.get(ask.name) is not ask:
            return
        del bucket[ask.name]
        self._size -= 1
        if not bucket:
            del self._buckets[first]
            del self._newest[first]
            self._keys.remove(first)


def _seq(ask: Waiting) -> int:
    return ask.sort_key[1]
