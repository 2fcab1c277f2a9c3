"""Set-ups for the node reservation tests: a partition of two nodes full of one queue's containers, with a
large ask of another queue overtaken by smaller ones, and the churn that frees room on them in turn."""

from __future__ import annotations

from typing import Any

from sniper.messages import decisions as d
from tests.core_support import queue
from tests.preemption_support import PreemptHarness, preemption_raw


def raw(*leaves: dict[str, Any], policy: str = "sniper", enabled: bool = True, timeout: float = 60.0) -> dict[str, Any]:
    out = preemption_raw(*leaves, policy=policy)
    out["reservation"] = {"enabled": enabled, "timeout": timeout}
    return out


def reserved(h: PreemptHarness) -> list[d.NodeReserved]:
    return [x for x in h.decisions if isinstance(x, d.NodeReserved)]


def crowded(enabled: bool = True, timeout: float = 60.0) -> tuple[PreemptHarness, list[str], list[str]]:
    """n1 and n2 full of b's 10s, b asks for many more; a (below its guarantee) asks for one 60."""
    h = PreemptHarness(
        raw(
            queue("a", guaranteed={"memory": 100}),
            queue("b", guaranteed={"memory": 100}),
            enabled=enabled,
            timeout=timeout,
        )
    )
    h.nodes("n1", "n2")
    on_n1 = h.fill("b1", "root.b", "n1", [10] * 10)
    on_n2 = h.fill("b1", "root.b", "n2", [10] * 10, start=10)
    h.ask("b1", "more", 10, count=100)
    h.app("a1", "root.a")
    h.ask("a1", "big", 60)
    h.settle()
    return h, on_n1, on_n2


def churn(h: PreemptHarness, on_n1: list[str], on_n2: list[str], rounds: int) -> None:
    """Containers finish on both nodes in turn; the allocator runs after each."""
    for i in range(rounds):
        h.tick(h.now + 1)
        h.release((on_n1 if i % 2 == 0 else on_n2).pop(0))
        h.settle()
