"""Which nodes' room or eligibility changed, in order: the log a failed placement is re-checked against.

Every change that can let a node take a container it could not take before (its free room, its
capacity, labels or schedulability, a node reservation on it ending) touches the node here with the
next sequence number. Invariant: a node not touched since sequence ``s`` has the same room and
eligibility it had at ``s``, or less. The log keeps one entry per node, its latest, most recent last.
"""

from __future__ import annotations


class NodeChanges:
    __slots__ = ("_last", "seq")

    def __init__(self) -> None:
        self.seq = 0  # the sequence number of the latest touch
        self._last: dict[str, int] = {}  # node name -> its latest touch, in touch order

    def touch(self, node: str) -> None:
        self.seq += 1
        last = self._last
        last.pop(node, None)
        last[node] = self.seq

    def forget(self, node: str) -> None:
        """The node left: nothing can be placed on it any more."""
        self._last.pop(node, None)

    def since(self, seq: int) -> list[str]:
        """The nodes touched after ``seq``, the most recent first."""
        last = self._last
        out: list[str] = []
        for node in reversed(last):
            if last[node] <= seq:
                break
            out.append(node)
        return out
