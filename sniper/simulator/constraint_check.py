"""The independent checker's view of placement constraints (invariant 13), from the feed and decisions.

It keeps its own record of nodes' labels, asks' tags and constraints and the tags of every running
container, and for every container the scheduler places, records it, then recounts the state after
that placement in each constrained scope (the node, or the nodes sharing its value of the scope's
label) by scanning its own record: no code of ``sniper.core`` is called. A placement breaks invariant 13 when
a tag's count is outside the constraint's bounds: ``cardinality`` counts every container carrying the
tag in the scope, the one just placed included (``min`` to ``max``); ``in`` (at least one) and
``not_in`` (none) count the others, the one just placed excluded; ``namespace: self`` counts the ask's
app's containers only. Containers are counted in the order the decisions commit them, so a gang's
members count the members committed before them; promised containers (reservations) are not counted,
so this check is weaker than the scheduler's rule for upper bounds and exactly as strict for lower ones.
"""

from __future__ import annotations

from collections import defaultdict

from sniper.messages import feed as f

AskKey = tuple[str, str]


class ConstraintChecker:
    def __init__(self) -> None:
        self.labels: dict[str, dict[str, str]] = {}  # node -> labels
        self.tags: dict[AskKey, tuple[str, ...]] = {}
        self.constraints: dict[AskKey, list[f.PlacementConstraint]] = {}
        self.running: dict[str, tuple[str, str, tuple[str, ...]]] = {}  # allocation -> (app, node, tags)
        self.on_node: dict[str, set[str]] = defaultdict(set)  # node -> tagged allocations on it
        self.satisfied = 0  # placements of constrained asks that held every constraint

    def node_added(self, node: str, labels: dict[str, str]) -> None:
        self.labels[node] = dict(labels)

    def node_removed(self, node: str) -> None:
        self.labels.pop(node, None)

    def ask_added(self, event: f.AskAdded) -> None:
        key = (event.app, event.ask)
        self.tags[key] = tuple(event.tags)
        if event.constraints:
            self.constraints[key] = list(event.constraints)
        else:
            self.constraints.pop(key, None)

    def _count(self, node: str, scope: str, tag: str, app: str | None, placed: str) -> int | None:
        """Containers carrying ``tag`` (of ``app`` only, unless None) in ``node``'s scope, ``placed``
        left out unless it is ``""``; None: the node has no value for the scope's label."""
        if scope == "node":
            nodes = [node]
        else:
            value = self.labels.get(node, {}).get(scope)
            if value is None:
                return None
            nodes = [n for n, labels in self.labels.items() if labels.get(scope) == value]
        n = 0
        for name in nodes:
            for aid in self.on_node.get(name, ()):
                owner, _, tags = self.running[aid]
                if aid != placed and tag in tags and (app is None or owner == app):
                    n += 1
        return n

    def allocated(self, allocation: str, app: str, ask: str, node: str) -> list[str]:
        """Record one placement, then check the state after it against its ask's constraints; the
        breaches found."""
        key = (app, ask)
        tags = self.tags.get(key, ())
        if tags:
            self.running[allocation] = (app, node, tags)
            self.on_node[node].add(allocation)
        problems: list[str] = []
        wanted = self.constraints.get(key, [])
        for c in wanted:
            low, high = (1, None) if c.op == "in" else (0, 0) if c.op == "not_in" else (c.min, c.max)
            others = "" if c.op == "cardinality" else allocation  # in / not_in: the other containers
            for tag in c.tags:
                n = self._count(node, c.scope, tag, app if c.namespace == "self" else None, others)
                if n is None:
                    if low > 0:
                        problems.append(f"{allocation} on {node}: no {c.scope} label, {c.op} {tag} cannot hold")
                    continue
                if n < low or (high is not None and n > high):
                    counted = "with it" if c.op == "cardinality" else "besides it"
                    problems.append(
                        f"{allocation} on {node}: its {c.scope} holds {n} of {tag} {counted}, wanted {c.op} {c.tags}"
                    )
        if wanted and not problems:
            self.satisfied += 1
        return problems

    def gone(self, allocation: str) -> None:
        held = self.running.pop(allocation, None)
        if held is not None:
            self.on_node[held[1]].discard(allocation)
