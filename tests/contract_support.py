"""The preemption-contract scenario the contract tests share, and what they read off its decisions.

:func:`borrowed` is queue a (guarantee 150) and b (50) on n1 and n2 (100 each), b's contract app b1
holding both nodes (:func:`mixed_starving`: b1 beside an app b2 without one, a1 starving for a whole
node); :func:`gives_back` plays b1's application master as the simulator's stand-in resource manager
does (it releases containers and asks for their work again at once).
"""

from __future__ import annotations

from typing import Any

from sniper.core import resources as res
from sniper.messages import decisions as d
from sniper.messages import feed as f
from tests.core_support import consistency_problems
from tests.preemption_support import PreemptHarness, two_queues


def kills(h: PreemptHarness) -> list[d.Kill]:
    return [x for x in h.decisions if isinstance(x, d.Kill)]


def requests(h: PreemptHarness) -> list[d.PreemptRequest]:
    return [x for x in h.decisions if isinstance(x, d.PreemptRequest)]


def ended(h: PreemptHarness) -> list[d.PreemptRequestEnded]:
    return [x for x in h.decisions if isinstance(x, d.PreemptRequestEnded)]


def running(h: PreemptHarness, app: str) -> list[str]:
    state = h.cache.state
    return sorted(a for a in state.apps[app].allocations if not state.allocations[a].killed)


def on_node(h: PreemptHarness, app: str, node: str) -> list[str]:
    """``app``'s running containers on ``node``, newest first."""
    state = h.cache.state
    held = [state.allocations[a] for a in running(h, app) if state.allocations[a].node == node]
    return [a.id for a in sorted(held, key=lambda a: (-a.start, -int(a.id.split("-")[1])))]


def queue_used(h: PreemptHarness, path: str) -> res.Resource:
    return res.normalized(h.cache.state.queues[path].allocated)


def gives_back(h: PreemptHarness, *aids: str, again: bool = True) -> None:
    """The application master releases ``aids``; their work is asked for again at once (one ask of one
    container each, as the stand-in resource manager does), then the allocator runs."""
    state = h.cache.state
    shapes = [(state.allocations[a].app, dict(state.allocations[a].resource)) for a in aids]
    h.release(*aids)
    if again:
        for n, (app, resource) in enumerate(shapes):
            h.feed(f.AskAdded(app=app, ask=f"again-{h.cache.state.now}-{n}-{aids[n]}", resource=resource))
    h.settle()


def assert_clean(h: PreemptHarness) -> None:
    """The independent model saw no violation and the cache's state is consistent."""
    assert h.model.violations == [], h.model.violations
    assert consistency_problems(h.cache.state) == []


def borrowed(
    sizes: int = 25, *, b_guarantee: int = 50, a_guarantee: int = 150, contract: bool = True, **preemption: Any
) -> PreemptHarness:
    """a (guarantee 150) and b (50) on n1, n2 (100 each); b's app b1 (with a preemption contract unless
    ``contract`` is false) holds both nodes in containers of ``sizes``, n1's started first; a's app a1
    asks for nothing yet. ``preemption``: the partition's preemption settings (the sniper policy by
    default)."""
    h = PreemptHarness(two_queues(a_guarantee, b_guarantee, **preemption))
    h.nodes("n1", "n2")
    h.feed(f.AppAdded(app="b1", queue="root.b", preemption_contract=contract))
    per_node = 100 // sizes
    h.fill("b1", "root.b", "n1", [sizes] * per_node)
    h.fill("b1", "root.b", "n2", [sizes] * per_node, start=per_node)
    h.app("a1", "root.a")
    return h


def mixed_starving() -> PreemptHarness:
    """b1 (a contract app) and b2 (none) share n1 and n2 in containers of 25, alternating, n1's first; a1
    asks for 100, a whole node, and starves."""
    h = PreemptHarness(two_queues(150, 50))
    h.nodes("n1", "n2")
    h.feed(f.AppAdded(app="b1", queue="root.b", preemption_contract=True))
    h.app("b2", "root.b")
    for node, start in (("n1", 0), ("n2", 4)):
        for i, app in enumerate(["b1", "b2", "b1", "b2"]):
            h.run(app, 25, node, at=start + i)
    h.app("a1", "root.a")
    h.ask("a1", "whole", 100)
    h.starve()
    return h


def asked(*, contract: bool = True, sizes: int = 25, **preemption: Any) -> PreemptHarness:
    """:func:`borrowed`, and a1 asks for one 50 container and starves (a preemption round would serve it)."""
    h = borrowed(sizes, contract=contract, **preemption)
    h.ask("a1", "big", 50)
    h.starve()
    return h


def reserved_for_a1() -> tuple[PreemptHarness, d.PreemptRequest, str, str]:
    """:func:`asked` with a1's 50 reserved on one node (two of b1's 25s named in one request at 10 s):
    the harness, the request, that node and the other one."""
    h = asked()
    h.preempt_round(10.0)
    [req] = requests(h)
    [node] = {c.node for c in req.containers}
    return h, req, node, "n2" if node == "n1" else "n1"
