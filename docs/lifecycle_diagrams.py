"""Draws the lifecycle tables of ``sniper/core/lifecycle.py`` into ``docs/architecture.md``, one Mermaid
``stateDiagram-v2`` a table, between the page's two marker comments: the diagrams are the tables, so they
cannot drift from what the state enforces.

Run ``python docs/lifecycle_diagrams.py`` after a table changes; ``--check`` only says whether the page is
up to date (exit 1 when stale). tests/test_lifecycle.py fails while the drawing is stale.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from sniper.core import lifecycle

PAGE = Path(__file__).resolve().parent / "architecture.md"
BEGIN = "<!-- lifecycle diagrams: drawn from sniper/core/lifecycle.py by python docs/lifecycle_diagrams.py -->"
END = "<!-- end of lifecycle diagrams -->"
COMMAND = "python docs/lifecycle_diagrams.py"


def _is_table(value: object) -> bool:
    """A transition table: phase -> (change type -> next phase), with the ``absent`` phase."""
    return (
        isinstance(value, Mapping)
        and lifecycle.ABSENT in value
        and all(isinstance(moves, Mapping) and all(isinstance(c, type) for c in moves) for moves in value.values())
    )


def tables() -> dict[str, lifecycle.Table]:
    """Every lifecycle table of :mod:`sniper.core.lifecycle`, by its name there, in the module's order."""
    return {name: value for name, value in vars(lifecycle).items() if name.isupper() and _is_table(value)}


def _phase(phase: str) -> str:
    """A phase as Mermaid names it: ``absent`` (not yet committed, or gone) is the start and end mark."""
    return "[*]" if phase == lifecycle.ABSENT else phase


def diagram(name: str, table: lifecycle.Table) -> str:
    """One table as a titled Mermaid state diagram; moves between the same two phases share one arrow."""
    arrows: dict[tuple[str, str], list[str]] = {}
    for phase, moves in table.items():
        for change, after in moves.items():
            arrows.setdefault((phase, after), []).append(change.__name__)
    lines = [f"### {name.replace('_', ' ').capitalize()}", "", "```mermaid", "stateDiagram-v2"]
    lines += [f"    {_phase(a)} --> {_phase(b)}: {', '.join(changes)}" for (a, b), changes in arrows.items()]
    return "\n".join([*lines, "```"])


def drawing(drawn: Mapping[str, lifecycle.Table]) -> str:
    """The text between the markers: every table's diagram."""
    return "\n\n".join(diagram(name, table) for name, table in drawn.items())


def refreshed(page: str, drawn: Mapping[str, lifecycle.Table]) -> str:
    """``page`` with the text between its markers replaced by the drawing of ``drawn``."""
    head, begin, rest = page.partition(BEGIN)
    _old, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"{PAGE.name} lacks the markers {BEGIN!r} and {END!r}")
    return f"{head}{BEGIN}\n\n{drawing(drawn)}\n\n{END}{tail}"


def main(argv: list[str]) -> int:
    page = PAGE.read_text(encoding="utf-8")
    try:
        new = refreshed(page, tables())
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if new == page:
        return 0
    if "--check" in argv:
        print(f"{PAGE.name}: the lifecycle diagrams are stale; run {COMMAND}", file=sys.stderr)
        return 1
    PAGE.write_text(new, encoding="utf-8")
    print(f"{PAGE.name}: lifecycle diagrams redrawn")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
