"""Placement constraints and allocation tags (YARN-6592's ``targetIn``, ``targetNotIn``, ``cardinality``).

An ask's containers carry its allocation ``tags``; its ``constraints`` say, for each candidate node,
how many containers carrying each listed tag the node's *scope* may hold: the node itself
(``scope: "node"``) or every node sharing its value of a node label (``scope: "rack"``). Each listed
tag is counted on its own and must be within the bounds. ``in`` (at least one) and ``not_in`` (none)
count the *other* containers in the scope, as YARN's ``targetIn`` and ``targetNotIn``; ``cardinality``
(between ``min`` and ``max``) counts the scope as it is once the container is placed: the container
being placed counts when it carries the tag (:attr:`Constraint.placed`), so ``max: 1`` on the ask's
own tag is one per scope (YARN's ``CARDINALITY`` counts only the containers already there: its
``max: n`` is ``max: n + 1`` here). ``namespace: "self"`` counts only the ask's own app's containers
(the one placed is always of it). A node without the scope's label has no scope: it never satisfies a
constraint that needs a tag present (``in``, ``cardinality`` with ``min`` above 0) and always
satisfies one that only bounds from above.

This module owns the rule (:func:`refusal`, :func:`allows`), its validation (:func:`malformed`, which
rejects only what no cluster can ever satisfy: nodes, labels and tags may come later) and the tag
count index (:class:`TagIndex`), kept by :class:`sniper.core.state.PartitionState` through ``apply`` only
(and, in the allocator's replica, through :func:`sniper.core.placing.hold_room` for containers in flight, so
a cycle's or a gang's own containers count each other; the cache checks a gang's members with those
checked before them passed as ``arriving``, the index untouched). Invariant: for every scope group and
(namespace, tag), the index holds the number of allocations (plus in-flight holds) carrying that tag
on the group's nodes, and apart the preemption reservations' promised containers (they count against
upper bounds only); a check costs O(constraints x tags), never a scan of nodes or allocations. An ask
without constraints costs one attribute test on the placement path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from sniper.messages.feed import PlacementConstraint

NODE = "node"
ALL = ""  # the namespace key of every app's containers (app names are never empty)
TagKey = tuple[str, str, bool]  # (app, or ALL; tag; promised: a preemption reservation's container)
Counts = dict[TagKey, int]


@dataclass(frozen=True, slots=True)
class Constraint:
    """One validated constraint: every tag's count in the scope within ``[low, high]`` (``high`` None:
    no upper bound); ``placed``: the tags the container being placed adds to the count (``cardinality``
    on tags the ask carries)."""

    scope: str
    op: str
    tags: tuple[str, ...]
    low: int
    high: int | None
    own_app: bool
    placed: frozenset[str] = frozenset()

    def raw(self) -> PlacementConstraint:
        """The constraint as the feed states it (snapshots carry it so)."""
        cardinality = self.op == "cardinality"
        return PlacementConstraint(
            scope=self.scope,
            op=self.op,  # type: ignore[arg-type]
            tags=list(self.tags),
            min=self.low if cardinality else 0,
            max=self.high if cardinality else None,
            namespace="self" if self.own_app else "all",
        )

    @property
    def needs_presence(self) -> bool:
        return self.low > 0

    def describe(self) -> str:
        bound = f"at least {self.low}" if self.high is None else f"{self.low}..{self.high}"
        if self.low == 0 and self.high == 0:
            bound = "none"
        whose = " of its own app" if self.own_app else ""
        counting = ", counting the one placed" if self.placed else ""
        return f"{bound} of {', '.join(self.tags)}{whose} per {self.scope}{counting}"


def bounds(c: PlacementConstraint) -> tuple[int, int | None]:
    """YARN's reading of each op: ``in`` is cardinality 1..inf, ``not_in`` 0..0."""
    if c.op == "in":
        return 1, None
    if c.op == "not_in":
        return 0, 0
    return c.min, c.max


def malformed(raw: Sequence[PlacementConstraint], tags: Sequence[str] = (), opportunistic: bool = False) -> str | None:
    """Why the constraints of an ask carrying ``tags`` can never hold on any cluster, or ``None``: a
    ``min`` above its ``max``, no tags, ``min``/``max`` given to ``in``/``not_in``, a ``cardinality``
    ``max`` of 0 on a tag the ask carries (the container placed counts: the scope holds at least one),
    or two constraints on the same tag, scope and namespace whose bounds do not meet once both are read
    as counts after placement (``in`` with ``not_in``; ``not_in`` on the ask's own tag with
    ``cardinality`` ``min`` 2). Opportunistic asks take no constraints (their placement runs on room no
    guaranteed ask can use, outside this rule)."""
    if raw and opportunistic:
        return "an opportunistic ask takes no placement constraints"
    carried = frozenset(tags)
    seen: dict[tuple[str, str, str], tuple[int, int | None]] = {}  # (scope, namespace, tag) -> bounds after
    for n, c in enumerate(raw, 1):
        where = f"constraint {n} ({c.op} per {c.scope})"
        if not c.tags:
            return f"{where} names no tags"
        if c.op != "cardinality" and (c.min != 0 or c.max is not None):
            return f"{where}: min and max belong to cardinality only"
        low, high = bounds(c)
        if high is not None and low > high:
            return f"{where}: min {low} is above max {high}"
        for tag in dict.fromkeys(c.tags):
            after_low, after_high = low, high
            if tag in carried:  # the container placed is in the scope: at least one there
                if c.op != "cardinality":  # in / not_in count the others: shift to the count after
                    after_low, after_high = low + 1, None if high is None else high + 1
                elif high == 0:
                    return (
                        f"{where}: max 0 on {tag}, a tag the ask's own containers carry: the container "
                        "placed counts, so its scope always holds one (max 1 is one per scope)"
                    )
            key = (c.scope, c.namespace, tag)
            other = seen.get(key)
            if other is not None:
                after_low, after_high = max(after_low, other[0]), _min_bound(after_high, other[1])
                if after_high is not None and after_low > after_high:
                    return f"{where} contradicts an earlier one on {tag} in the same scope and namespace"
            seen[key] = (after_low, after_high)
    return None


def _min_bound(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def parse(raw: Iterable[PlacementConstraint], tags: Sequence[str] = ()) -> tuple[Constraint, ...]:
    """The validated constraints of an ask whose containers carry ``tags``."""
    out = []
    for c in raw:
        low, high = bounds(c)
        listed = tuple(dict.fromkeys(c.tags))
        placed = frozenset(listed).intersection(tags) if c.op == "cardinality" else frozenset()
        out.append(Constraint(c.scope, c.op, listed, low, high, c.namespace == "self", placed))
    return tuple(out)


class Node(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


class Placed(Protocol):
    """A running container as the rule sees it (:class:`sniper.core.state.Allocation`)."""

    @property
    def app(self) -> str: ...

    @property
    def node(self) -> str: ...

    @property
    def tags(self) -> tuple[str, ...]: ...


class _App(Protocol):
    @property
    def name(self) -> str: ...


class Constrained(Protocol):
    """An ask as the rule sees it (:class:`sniper.core.state.Ask`)."""

    @property
    def app(self) -> _App: ...

    @property
    def constraints(self) -> tuple[Constraint, ...]: ...


class Tagged(Protocol):
    """A partition state as the rule sees it (:class:`sniper.core.state.PartitionState`)."""

    @property
    def tags(self) -> TagIndex: ...

    @property
    def nodes(self) -> Mapping[str, Node]: ...


class TagIndex:
    """Tag counts per node and per (label key, value) group, per namespace, kept incrementally."""

    __slots__ = ("by_group", "by_node")

    def __init__(self) -> None:
        self.by_node: dict[str, Counts] = {}
        self.by_group: dict[tuple[str, str], Counts] = {}

    def add(self, node: Node, app: str, tags: Sequence[str], times: int, *, promised: bool = False) -> None:
        """Count (``times`` 1) or uncount (-1) one container of ``app`` carrying ``tags`` on ``node``
        (``promised``: a preemption reservation's, not running yet)."""
        counts = [self.by_node.setdefault(node.name, {})]
        counts.extend(self.by_group.setdefault(item, {}) for item in node.labels.items())
        for tag in tags:
            for key in ((ALL, tag, promised), (app, tag, promised)):
                for c in counts:
                    left = c.get(key, 0) + times
                    if left:
                        c[key] = left
                    else:
                        del c[key]

    def relabel(self, node: Node, old: Mapping[str, str], new: Mapping[str, str]) -> None:
        """Move the node's counts from the groups of its ``old`` labels to those of its ``new`` ones."""
        here = self.by_node.get(node.name)
        if not here or old == new:
            return
        for item, times in [*((i, -1) for i in old.items()), *((i, 1) for i in new.items())]:
            group = self.by_group.setdefault(item, {})
            for key, n in here.items():
                left = group.get(key, 0) + n * times
                if left:
                    group[key] = left
                else:
                    group.pop(key, None)

    def forget(self, node: str) -> None:
        """A node left (holding nothing): drop its empty entry."""
        if not self.by_node.get(node, True):
            del self.by_node[node]

    def scope_counts(self, node: Node, scope: str) -> Counts | None:
        """The counts of ``node``'s scope (``None``: the node has no value for the scope's label)."""
        if scope == NODE:
            return self.by_node.get(node.name) or {}
        value = node.labels.get(scope)
        if value is None:
            return None
        return self.by_group.get((scope, value)) or {}


def refusal(
    state: Tagged,
    ask: Constrained,
    node: Node,
    leaving: Iterable[Placed] = (),
    own: Placed | None = None,
    arriving: Sequence[Placed] = (),
) -> str | None:
    """Why one more container of ``ask`` breaks one of its constraints on ``node``, or ``None``.
    ``leaving``: containers counted gone (a victim set being chosen or checked); ``arriving``: containers
    counted running that the index does not hold (a gang's members checked before); ``own``: the ask's
    reservation being fulfilled (its promised container is the one placed, counted as such rather than
    as promised). A reservation's promised container counts against upper bounds only: a lower bound
    wants its tags running. ``cardinality`` adds the container placed to the count of the tags it
    carries; ``in`` and ``not_in`` count the others only."""
    index = state.tags
    app = ask.app.name
    gone = [a for a in leaving if a.tags]
    for c in ask.constraints:
        counts = index.scope_counts(node, c.scope)
        if counts is None:
            if c.needs_presence:
                return f"node {node.name} has no {c.scope} label: {c.describe()} cannot hold"
            continue
        who = app if c.own_app else ALL
        for tag in c.tags:
            n = counts.get((who, tag, False), 0)
            if c.high is not None:
                n += counts.get((who, tag, True), 0)
                if own is not None and tag in own.tags and _in_scope(state, own, node, c.scope):
                    n -= 1
            if tag in c.placed:
                n += 1  # the container placed: cardinality bounds the scope as it is after placement
            if arriving:
                n += sum(
                    1
                    for a in arriving
                    if tag in a.tags and (not c.own_app or a.app == app) and _in_scope(state, a, node, c.scope)
                )
            if gone:
                n -= sum(
                    1
                    for a in gone
                    if tag in a.tags and (not c.own_app or a.app == app) and _in_scope(state, a, node, c.scope)
                )
            if n < c.low or (c.high is not None and n > c.high):
                holds = "would hold" if tag in c.placed else "holds"
                return f"node {node.name}'s {c.scope} {holds} {n} of {tag}: the ask wants {c.describe()}"
    return None


def _in_scope(state: Tagged, alloc: Placed, node: Node, scope: str) -> bool:
    if scope == NODE:
        return alloc.node == node.name
    where = state.nodes.get(alloc.node)
    return where is not None and where.labels.get(scope) == node.labels.get(scope)


def allows(
    state: Tagged, ask: Constrained, node: Node, leaving: Iterable[Placed] = (), own: Placed | None = None
) -> bool:
    """Whether ``ask``'s constraints hold for one more container on ``node`` (true without constraints)."""
    return not ask.constraints or refusal(state, ask, node, leaving, own) is None
