"""Soft opt-outs through shifts of the cluster: a node lost while the victims chosen to spare an opted-out
app are in their grace, and gangs whose members need victims: the opted-out app stays spared while a set
without it exists after the shift, and gives once none does."""

from __future__ import annotations

from sniper.messages import feed as f
from tests.core_support import consistency_problems
from tests.preemption_support import PreemptHarness, two_queues


def spared_db_beside_etl(*, etl_nodes: tuple[str, ...]) -> PreemptHarness:
    """b's database (opted out) fills n1 with four 25s; b's etl tasks fill each of ``etl_nodes`` with four
    25s; a (guarantee 100) holds nothing and asks for a 50."""
    h = PreemptHarness(two_queues(100, 50))
    h.nodes("n1", *etl_nodes)
    h.feed(f.AppAdded(app="db", queue="root.b", allow_preemption=False), f.AppAdded(app="etl", queue="root.b"))
    h.fill("db", "root.b", "n1", [25, 25, 25, 25])
    for node in etl_nodes:
        h.fill("etl", "root.b", node, [25, 25, 25, 25])
    h.app("a1", "root.a")
    return h


def taken(h: PreemptHarness, app: str) -> list[str]:
    return [x.allocation for x in h.preempts() if x.app == app and not x.observe_only]


def healthy(h: PreemptHarness) -> None:
    assert not h.model.violations, h.model.violations
    assert not consistency_problems(h.cache.state)


def test_a_node_lost_mid_grace_leaves_the_opted_out_app_spared_while_other_tasks_can_still_give() -> None:
    h = spared_db_beside_etl(etl_nodes=("n2", "n3"))
    h.ask("a1", "w", 50)
    h.starve(2)
    h.preempt_round(10.0)
    first = taken(h, "etl")
    assert len(first) == 2 and not taken(h, "db")
    lost = h.alloc(first[0]).node
    h.feed(f.NodeRemoved(node=lost))  # the victims go with their node, mid-grace
    h.starve(2)
    h.preempt_round(12.0)
    assert not taken(h, "db"), "etl on the other node can still give"
    again = [a for a in taken(h, "etl") if a not in first]
    assert len(again) == 2 and {h.alloc(a).node for a in again} == ({"n2", "n3"} - {lost})
    healthy(h)


def test_a_node_lost_mid_grace_with_no_other_tasks_left_takes_the_opted_out_app() -> None:
    h = spared_db_beside_etl(etl_nodes=("n2",))
    h.ask("a1", "w", 50)
    h.starve(2)
    h.preempt_round(10.0)
    assert len(taken(h, "etl")) == 2 and not taken(h, "db")
    h.feed(f.NodeRemoved(node="n2"))
    h.starve(2)
    h.preempt_round(12.0)
    db = taken(h, "db")
    assert len(db) == 2 and {h.alloc(a).node for a in db} == {"n1"}
    healthy(h)


def test_a_gang_takes_other_tasks_for_every_member_and_spares_the_opted_out_app() -> None:
    h = spared_db_beside_etl(etl_nodes=("n2", "n3"))
    h.feed(f.AskAdded(app="a1", ask="g", resource={"memory": 50}, count=2, gang_min=2))
    h.starve(2)
    h.preempt_round(10.0)
    etl = taken(h, "etl")
    assert not taken(h, "db")
    assert len(etl) == 4 and {h.alloc(a).node for a in etl} <= {"n2", "n3"}
    healthy(h)


def test_a_gang_whose_second_member_only_the_opted_out_app_could_serve_takes_it() -> None:
    h = PreemptHarness(two_queues(100, 50))
    h.nodes("n1", "n2")
    h.feed(f.AppAdded(app="db", queue="root.b", allow_preemption=False), f.AppAdded(app="etl", queue="root.b"))
    h.fill("db", "root.b", "n1", [25, 25, 25, 25])
    h.fill("etl", "root.b", "n2", [25, 25])
    h.fill("db", "root.b", "n2", [25, 25], start=10)
    h.app("a1", "root.a")
    h.feed(f.AskAdded(app="a1", ask="g", resource={"memory": 50}, count=2, gang_min=2))
    h.starve(2)
    h.preempt_round(20.0)
    assert len(taken(h, "etl")) == 2, "one member's room from the tasks"
    assert len(taken(h, "db")) == 2, "the other member's: no set without the database exists"
    healthy(h)
