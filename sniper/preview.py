"""``sniper preview``: what a preemption policy would do to a cluster state right now, without acting on it.

Owns :func:`preview` (a file of the conformance format: one case or ``{"cases": [...]}``), :func:`preview_case`
and :func:`render_table`. Each snapshot case yields exactly the JSON object the conformance README fixes::

    {"id": ..., "rounds": [{"clock_ms": 0, "marked": {app: n}, "killable": {app: n},
                            "queues": {path: {"ideal_assigned": [..], "to_be_preempted": [..],
                                              "preemptable_extra": [..], "untouchable_extra": [..]}}}]}

and a ``unit_sort`` case yields ``{"id": ..., "order": [names]}``.

Invariants: nothing is sent anywhere and no clock is read; one fresh policy instance per case, run once per
listed ``clock_ms`` (one round at 0 otherwise); every app of the snapshot appears in ``marked`` and
``killable`` (0 when none); every queue appears, in pre-order; resource lists follow the case's
``resource_types`` order.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sniper.core.yarn.conformance import ConformanceCase, load_cases
from sniper.core.yarn.proportional import ProportionalPolicy, preemption_order

POLICIES: tuple[str, ...] = ("proportional",)
QUEUE_FIELDS: tuple[str, ...] = ("ideal_assigned", "to_be_preempted", "preemptable_extra", "untouchable_extra")


def preview(path: Path, policy: str = "proportional") -> list[dict[str, Any]]:
    """One result object per case of the file at ``path`` (see the module docstring for the shape)."""
    _check_policy(policy)
    return [preview_case(case, policy) for case in load_cases(path)]


def preview_case(case: ConformanceCase, policy: str = "proportional") -> dict[str, Any]:
    """The result object of one parsed case."""
    _check_policy(policy)
    if case.snapshot is None:
        return {"id": case.id, "order": [c.id for c in preemption_order(case.sort_input)]}
    snapshot = case.snapshot
    apps = [app.id for app in snapshot.apps()]
    engine = ProportionalPolicy(case.config)
    rounds: list[dict[str, Any]] = []
    for clock in case.clocks:
        result = engine.round(snapshot, clock)
        rounds.append(
            {
                "clock_ms": clock,
                "marked": result.marked_per_app(apps),
                "killable": result.killable_per_app(apps),
                "queues": {
                    path: {
                        "ideal_assigned": case.to_list(fig.ideal_assigned),
                        "to_be_preempted": case.to_list(fig.to_be_preempted),
                        "preemptable_extra": case.to_list(fig.preemptable_extra),
                        "untouchable_extra": case.to_list(fig.untouchable_extra),
                    }
                    for path, fig in result.queues.items()
                },
            }
        )
    return {"id": case.id, "rounds": rounds}


def _check_policy(policy: str) -> None:
    if policy not in POLICIES:
        raise ValueError(f"preview supports the policies {', '.join(POLICIES)}; got {policy!r}")


def render_table(results: Sequence[dict[str, Any]], width: int = 120) -> str:
    """A human-readable rendering of :func:`preview`'s results (rich tables as plain text)."""
    buffer = io.StringIO()
    # Names are data: no markup, so a queue or app called "[/]" prints as it is.
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None, highlight=False, markup=False)
    for result in results:
        if "order" in result:
            console.print(f"{result['id']}  order: {' '.join(map(str, result['order']))}")
            continue
        for rnd in result.get("rounds", []):
            console.print(f"{result['id']}  clock {rnd['clock_ms']} ms")
            apps = Table("app", "marked", "killable", title="containers", title_justify="left")
            for app, count in rnd["marked"].items():
                apps.add_row(str(app), str(count), str(rnd["killable"].get(app, 0)))
            console.print(apps)
            queues = Table("queue", *QUEUE_FIELDS, title="queues", title_justify="left")
            for path, figures in rnd["queues"].items():
                queues.add_row(str(path), *(" ".join(map(str, figures[f])) for f in QUEUE_FIELDS))
            console.print(queues)
    return buffer.getvalue()
