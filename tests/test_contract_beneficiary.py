"""Room a contract app gives back reaches the beneficiary it was asked for (docs/feed.md, Preemption
contracts): whichever containers the application master releases, a request's beneficiary ends with its
container, never short of ``min(guarantee, demand)`` while the app's own re-asks or anyone else take
the room. Each scenario plays the application master by hand on the sans-IO harness: it releases
containers and asks for their work again at once (as the simulator's stand-in resource manager does),
and the allocator runs between every step; the independent model watches every decision.
"""

from __future__ import annotations

from core import resources as res
from messages import decisions as d
from messages import feed as f
from tests.core_support import consistency_problems
from tests.preemption_support import PreemptHarness, two_queues

GRACE = 15.0


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
    assert h.model.violations == [], h.model.violations
    assert consistency_problems(h.cache.state) == []


def borrowed(sizes: int = 25, *, b_guarantee: int = 50, a_guarantee: int = 150) -> PreemptHarness:
    """a (guarantee 150) and b (50) on n1, n2 (100 each); b's contract app b1 holds both nodes in
    containers of ``sizes``, n1's started first."""
    h = PreemptHarness(two_queues(a_guarantee, b_guarantee))
    h.nodes("n1", "n2")
    h.feed(f.AppAdded(app="b1", queue="root.b", preemption_contract=True))
    per_node = 100 // sizes
    h.fill("b1", "root.b", "n1", [sizes] * per_node)
    h.fill("b1", "root.b", "n2", [sizes] * per_node, start=per_node)
    h.app("a1", "root.a")
    return h


# ---------------------------------------------------------------------- the two shapes of the defect


def test_am_gives_back_other_containers_where_the_beneficiary_fits_and_it_gets_that_room() -> None:
    """(b): the request names two 25s on one node; the AM gives back two others of the same size on the
    other node, where a1's 50 fits, and asks for their work again at once. a1 gets that room; b1's
    re-asks do not; nothing is killed; the named containers keep running."""
    h = borrowed()
    h.ask("a1", "big", 50)
    h.starve()
    h.preempt_round(10.0)
    [req] = requests(h)
    named = {c.allocation for c in req.containers}
    [node] = {c.node for c in req.containers}
    other = "n2" if node == "n1" else "n1"
    h.tick(12.0)
    gives_back(h, *on_node(h, "b1", other)[:2])
    for t in (13.0, 14.0, 10.0 + GRACE, 10.0 + GRACE + 1):
        h.tick(t)
        h.settle()
    assert kills(h) == []
    big = [x for x in h.allocated() if x.app == "a1"]
    assert [x.node for x in big] == [other]
    assert queue_used(h, "root.a") == {"memory": 50}, "a reaches min(guarantee, demand)"
    assert named <= set(running(h, "b1")), "the named containers keep running"
    [end] = ended(h)
    assert end.outcome == "given_back" and end.released == {"memory": 50}
    assert h.cache.state.reservations == {} and h.cache.state.contracts == {}
    assert_clean(h)


def test_opportunistic_first_then_the_named_rest_given_back_the_beneficiary_gets_its_room() -> None:
    """(a): on n1 an opportunistic 25 and three contract 25s; a1 asks 50. The opportunistic one is
    killed at once, the request names one contract 25 for the rest; the AM gives back exactly what
    was named, and asks again for its work and the opportunistic one's: a1 runs on n1."""
    h = PreemptHarness(two_queues(150, 50))
    h.nodes("n1", "n2")
    h.feed(f.AppAdded(app="b1", queue="root.b", preemption_contract=True))
    h.feed(f.AppAdded(app="o1", queue="root.b"))
    h.fill("b1", "root.b", "n1", [25] * 3)
    h.feed(f.AskAdded(app="o1", ask="o", resource={"memory": 25}, execution_type="opportunistic"))
    h.tick(3.0)
    h.cache.allocate("o1", "o", "n1")
    h.pump()
    h.fill("b1", "root.b", "n2", [25] * 4, start=4)
    h.app("a1", "root.a")
    h.ask("a1", "big", 50)
    h.starve()
    h.preempt_round(10.0)
    [req] = requests(h)
    opportunistic = [k for k in kills(h) if k.app == "o1"]
    assert len(opportunistic) == 1 and len(req.containers) == 1
    h.release(*(k.allocation for k in opportunistic))
    h.feed(f.AskAdded(app="o1", ask="o-again", resource={"memory": 25}, execution_type="opportunistic"))
    h.settle()
    h.tick(12.0)
    gives_back(h, *(c.allocation for c in req.containers))
    for t in (13.0, 10.0 + GRACE, 10.0 + GRACE + 1):
        h.tick(t)
        h.settle()
    assert [k.app for k in kills(h)] == ["o1"]
    big = [x for x in h.allocated() if x.app == "a1"]
    assert [x.node for x in big] == [req.containers[0].node]
    assert queue_used(h, "root.a") == {"memory": 50}
    assert [x.outcome for x in ended(h)] == ["given_back"]
    assert_clean(h)
