"""The independent checker's view of topology (architecture: invariant 16), from the feed and decisions.

It keeps, for every ask whose ``topology`` is ``required``, the level it names and the domains (values
of that level's node label) of its running containers, read from the nodes' labels as the feed gave
them; no code of ``sniper.core`` is called. A placement breaks invariant 16 when its node has no value
for the level, or when the ask already runs containers in another domain of it; a victim preempted for
such an ask breaks it when its node is in no domain of the level, in another domain than the ask's
running containers, or in another domain than a victim preempted for the ask at the same time.
"""

from __future__ import annotations

from collections.abc import Mapping

from sniper.messages import feed as f

AskKey = tuple[str, str]


class TopologyChecker:
    def __init__(self, labels: Mapping[str, Mapping[str, str]]) -> None:
        self.labels = labels  # node -> labels, kept by the model
        self.levels: dict[AskKey, str] = {}  # required asks -> their level
        self.running: dict[str, tuple[AskKey, str]] = {}  # allocation -> (ask, its domain)
        self.domains: dict[AskKey, dict[str, int]] = {}  # required ask -> domain -> containers running there
        self.kept = 0  # placements of required asks that stayed in their domain
        self.freeing: dict[AskKey, tuple[float, str]] = {}  # required ask -> (time, domain) of its last victim

    def _domain(self, node: str, level: str) -> str | None:
        """The domain of ``level`` that ``node`` is in, by the labels the feed gave it (None: none)."""
        return self.labels.get(node, {}).get(level)

    def ask_added(self, event: f.AskAdded) -> None:
        key = (event.app, event.ask)
        if event.topology is not None and event.topology.mode == "required":
            self.levels[key] = event.topology.level
        else:
            self.levels.pop(key, None)

    def allocated(self, allocation: str, app: str, ask: str, node: str) -> list[str]:
        """Record one placement and check it against its ask's domain; the breaches found."""
        key = (app, ask)
        level = self.levels.get(key)
        if level is None:
            return []
        domain = self._domain(node, level)
        if domain is None:
            return [f"{allocation} of {app}/{ask} on {node}, which has no {level} label"]
        held = self.domains.setdefault(key, {})
        elsewhere = sorted(d for d, n in held.items() if n and d != domain)
        self.running[allocation] = (key, domain)
        held[domain] = held.get(domain, 0) + 1
        if elsewhere:
            return [f"{allocation} of {app}/{ask} in {level} {domain}, its other containers in {', '.join(elsewhere)}"]
        self.kept += 1
        return []

    def victim(self, t: float, allocation: str, app: str, ask: str, node: str) -> list[str]:
        """Check one victim preempted for ``app``/``ask`` at ``t``; the breaches found."""
        key = (app, ask)
        level = self.levels.get(key)
        if level is None:
            return []
        domain = self._domain(node, level)
        if domain is None:
            return [f"victim {allocation} for {app}/{ask} on {node}, which has no {level} label"]
        running = sorted(d for d, n in self.domains.get(key, {}).items() if n)
        before = self.freeing.get(key)
        self.freeing[key] = (t, domain)
        if running and domain not in running:
            return [f"victim {allocation} for {app}/{ask} in {level} {domain}, its containers in {', '.join(running)}"]
        if before is not None and before[0] == t and before[1] != domain:
            return [
                f"victim {allocation} for {app}/{ask} in {level} {domain}, another victim of the round in {before[1]}"
            ]
        return []

    def gone(self, allocation: str) -> None:
        placed = self.running.pop(allocation, None)
        if placed is not None:
            key, domain = placed
            self.domains[key][domain] -= 1
