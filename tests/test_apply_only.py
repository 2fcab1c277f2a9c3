"""Every change to an allocation, a preemption reservation, a node reservation or a preemption contract
goes through ``PartitionState.apply`` (architecture: Actors; only the cache writes, and only through
its one mutation path): no module outside ``core/state.py`` assigns an attribute of one, read from the
source (an attribute write is caught whatever names the object). Nodes, queues, apps and asks likewise,
but for the allocator's in-flight ``allocating`` counters and ``domain`` (the topology domain its members
in flight went to), which only the allocator, :func:`sniper.core.placing.hold_room` and
:mod:`sniper.core.topology` write (the cache's checks, a gang's included, only read them)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sniper.core.state import Allocation, App, Ask, Contract, Node, NodeReservation, Queue, Reservation

ROOT = Path(__file__).resolve().parent.parent
FIELDS = {name for cls in (Allocation, Reservation, NodeReservation, Contract) for name in cls.__slots__}
HOLDERS = {name for cls in (Node, Queue, App, Ask) for name in cls.__slots__} - {"allocating", "domain"}
# Writes of those names to objects that are not the state's (checked by hand: the module, the target).
NOT_STATE = {
    ("sniper/cluster/process.py", "c.allocations"),  # a partition host's counters
    ("sniper/core/preemption/ideal.py", "q.pending"),  # the ideal assignment's own working queues
    # a node's container bounds, which only the state's apply keeps, through this module's functions
    ("sniper/core/container_bounds.py", "entry.count"),
    # a topology domain narrows an ask's selector for one synchronous placement and restores it (finally)
    ("sniper/core/topology.py", "ask.node_selector"),
}
SOURCES = sorted(
    path
    for path in (ROOT / "sniper").rglob("*.py")
    # the state itself, and the simulator's independent model (its allocations are its own, not the state's)
    if path not in (ROOT / "sniper" / "core" / "state.py", ROOT / "sniper" / "simulator" / "model.py")
)


def attribute_writes(source: str, fields: set[str]) -> list[str]:
    """``x.field = ...`` (plain, augmented or annotated, ``self`` aside) of one of ``fields``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if not isinstance(target, ast.Attribute) or target.attr not in fields:
                continue
            owner = target.value
            if not (isinstance(owner, ast.Name) and owner.id == "self"):
                found.append(f"{node.lineno}: {ast.unparse(target)}")
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_lifecycle_field_is_written_outside_apply(path: Path) -> None:
    assert attribute_writes(path.read_text(), FIELDS) == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_total_of_a_node_queue_app_or_ask_is_written_outside_apply(path: Path) -> None:
    module = str(path.relative_to(ROOT))
    writes = [w for w in attribute_writes(path.read_text(), HOLDERS) if (module, w.split(": ", 1)[1]) not in NOT_STATE]
    assert writes == []


ALLOCATING_WRITERS = {"sniper/core/placing.py", "sniper/core/allocator.py"}
MUTATORS = {"add_into", "sub_into"}  # core.resources' in-place arithmetic: its first argument is written


def allocating_writes(source: str) -> list[str]:
    """Writes of an ``allocating`` counter: assigned (``x.allocating = ...``, ``+=``), one of its items
    assigned (``x.allocating[k] = ...``), or passed as the target of in-place arithmetic."""
    found = attribute_writes(source, {"allocating"})
    for node in ast.walk(ast.parse(source)):
        written: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            written = [t.value for t in targets if isinstance(t, ast.Subscript)]
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in MUTATORS:
                written = [node.args[0]]
        found.extend(
            f"{node.lineno}: {ast.unparse(t)}"
            for t in written
            if isinstance(t, ast.Attribute)
            and t.attr == "allocating"
            and not (isinstance(t.value, ast.Name) and t.value.id == "self")
        )
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_allocator_writes_the_allocating_counters(path: Path) -> None:
    if str(path.relative_to(ROOT)) not in ALLOCATING_WRITERS:
        assert allocating_writes(path.read_text()) == []


def test_the_allocating_scan_catches_each_kind_of_write() -> None:
    source = (
        "def f(ask, node, q, out):\n"
        "    ask.allocating += 1\n"
        "    res.add_into(node.allocating, r)\n"
        "    q.allocating['memory'] = 0\n"
        "    res.add_into(out, node.allocating)\n"
    )
    assert allocating_writes(source) == ["2: ask.allocating", "4: q.allocating", "3: node.allocating"]


def test_the_scan_catches_a_write_whatever_names_the_object() -> None:
    source = "def f(a, rs):\n    a.killed = True\n    rs[0].deadline += 1\n    self.killed = False\n"
    assert attribute_writes(source, FIELDS) == ["2: a.killed", "3: rs[0].deadline"]
