"""Fair share with memory (``fairshare.halflife``, Slurm's decayed usage): the past usage that orders
what competes above the guarantees inside a queue.

A queue with a half-life tracks, in feed time, the usage of each user of its apps (a leaf) or of each child
(a parent): seconds of dominant share of the partition's capacity, each second's weight halving every
half-life. The allocation cycle serves the lowest first (:func:`app_history`, :func:`child_history`);
guarantees are not touched (a child below its guarantee keeps going first). Invariants: a tracked value
changes only with feed time and the allocations committed; the state carries it through a snapshot
(the configuration change's ``fair_usage``), so replay orders as the live core did. Nothing is tracked, and
nothing costs, when no queue sets a half-life.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping

from sniper.core import resources as res
from sniper.core.config import PartitionConfig
from sniper.core.resources import Resource


@dataclasses.dataclass(slots=True)
class Decayed:
    """One tracked usage: ``value`` (share-seconds) as of ``at``, while ``held`` is running."""

    halflife: float
    value: float = 0.0
    at: float = 0.0
    held: Resource = dataclasses.field(default_factory=dict)
    share: float = 0.0  # the dominant share of ``held`` when it last changed

    def value_at(self, now: float) -> float:
        """The value at ``now``: the old one halved per half-life, plus the share held since, decayed."""
        elapsed = now - self.at
        if elapsed <= 0:
            return self.value
        kept = math.pow(0.5, elapsed / self.halflife)
        return self.value * kept + self.share * self.halflife / math.log(2) * (1.0 - kept)

    def change(self, now: float, resource: Resource, sign: int, capacity: Resource) -> None:
        """``resource`` starts (``sign`` 1) or stops (-1) being held at ``now``."""
        self.value = self.value_at(now)
        self.at = max(self.at, now)
        res.add_into(self.held, resource, sign)
        self.share = res.dominant_share(self.held, capacity) if capacity else 0.0


def user_key(leaf: str, user: str) -> str:
    return f"{leaf}@{user}"


def owner(key: str) -> str:
    """The queue whose half-life a tracked usage follows: the leaf of a user's, the parent of a child's."""
    return key.split("@", 1)[0] if "@" in key else key.rsplit(".", 1)[0]


def tracked(config: PartitionConfig) -> dict[str, float]:
    """The queues with a half-life, by path."""
    return {q.path: q.fairshare_halflife for q in config.queues() if q.fairshare_halflife > 0}


def keys_of(halflives: Mapping[str, float], leaf: str, user: str) -> Iterable[tuple[str, float]]:
    """The tracked usages a container of ``user`` in ``leaf`` counts in, with their half-lives: its user's
    in the leaf, and each queue of its path as a child of a parent with a half-life."""
    if leaf in halflives:
        yield user_key(leaf, user), halflives[leaf]
    parts = leaf.split(".")
    for depth in range(1, len(parts)):
        parent = ".".join(parts[:depth])
        if parent in halflives:
            yield ".".join(parts[: depth + 1]), halflives[parent]


def app_history(
    halflives: Mapping[str, float], usage: Mapping[str, Decayed], leaf: str, now: float
) -> Callable[[str], float] | None:
    """A user's decayed usage in ``leaf`` (``None``: the leaf has no half-life)."""
    if leaf not in halflives:
        return None

    def of(user: str) -> float:
        d = usage.get(user_key(leaf, user))
        return 0.0 if d is None else d.value_at(now)

    return of


def child_history(
    halflives: Mapping[str, float], usage: Mapping[str, Decayed], parent: str, child: str, now: float
) -> float | None:
    """A child's decayed usage in ``parent`` (``None``: the parent has no half-life)."""
    if parent not in halflives:
        return None
    d = usage.get(child)
    return 0.0 if d is None else d.value_at(now)


def snapshot(usage: Mapping[str, Decayed], now: float) -> dict[str, list[float]]:
    """Each tracked usage as ``[value, at, halflife]`` at ``now`` (what a snapshot's config change carries)."""
    return {k: [d.value_at(now), now, d.halflife] for k, d in usage.items()}


def ranked(
    key: tuple[object, ...],
    halflives: Mapping[str, float],
    usage: Mapping[str, Decayed],
    parent: str,
    child: str,
    now: float,
) -> tuple[object, ...]:
    """A child's place among its siblings (``key``: the allocation cycle's, below-guarantee first): in a
    parent with a half-life, a child above its guarantee ranks by its decayed usage before the rest of
    ``key``; one below it keeps its place."""
    history = child_history(halflives, usage, parent, child, now)
    if history is None:
        return key
    below, rest = key[0], key[1:]
    return (below, history if below else 0.0, *rest)
