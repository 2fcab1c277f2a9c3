"""Which nodes the waiting asks require by their node selectors (the node order of asks free to run anywhere).

:class:`SelectorDemand` counts, per distinct node selector, the guaranteed asks that carry it and still
wait for containers (those in their app's ``pending_asks``); :class:`sniper.core.state.PartitionState`
keeps it through ``apply`` only. Normal allocation places an ask without a node selector or required
node on a node no waiting ask requires when one fits (:class:`sniper.core.allocation.FreeRoomPlacer`), so
room that only some asks may use stays for them. Invariant: a selector is listed exactly while a waiting
ask carries it; a node's answer is remembered until the listed selectors or the node's labels change.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol

Selector = tuple[tuple[str, frozenset[str]], ...]


def selector_matches(selector: Mapping[str, Collection[str]], labels: Mapping[str, str]) -> bool:
    """The one node-selector rule (Kubernetes ``nodeSelector`` with a list of accepted values, YARN node
    labels): every key the selector names is on the node with one of its accepted values."""
    for key, accepted in selector.items():
        if labels.get(key) not in accepted:
            return False
    return True


class Labelled(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


class SelectorDemand:
    """The node selectors of the waiting asks, each with the number of waiting asks that carry it."""

    __slots__ = ("_counts", "_known", "_selectors")

    def __init__(self) -> None:
        self._counts: dict[Selector, int] = {}
        self._selectors: list[Mapping[str, frozenset[str]]] = []  # the listed selectors, in first-seen order
        self._known: dict[str, tuple[Mapping[str, str], bool]] = {}  # node -> (labels asked about, required)

    def __bool__(self) -> bool:
        return bool(self._counts)

    def counts(self) -> dict[Selector, int]:
        """Waiting asks per selector (a copy)."""
        return dict(self._counts)

    def add(self, selector: Mapping[str, frozenset[str]], times: int) -> None:
        """An ask carrying ``selector`` starts (``times`` 1) or stops (-1) waiting."""
        key: Selector = tuple(sorted(selector.items(), key=lambda item: item[0]))
        left = self._counts.get(key, 0) + times
        if left > 0:
            if key not in self._counts:
                self._selectors.append(dict(key))
                self._known.clear()
            self._counts[key] = left
        elif key in self._counts:
            del self._counts[key]
            self._selectors = [dict(k) for k in self._counts]
            self._known.clear()

    def requires(self, node: Labelled) -> bool:
        """Whether some waiting ask's node selector accepts ``node``."""
        labels = node.labels
        known = self._known.get(node.name)
        if known is not None and known[0] is labels:
            return known[1]
        required = any(selector_matches(s, labels) for s in self._selectors)
        self._known[node.name] = (labels, required)
        return required
