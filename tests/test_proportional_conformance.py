"""YARN proportional-preemption conformance: one test per case of tests/data/yarn_proportional/cases.json
(YARN's own test expectations; provenance in that folder's README).

Every expectation of a case is asserted: per-app mark counts (``"*"`` = no event of any kind), queue-state
figures, and the cumulative expectations of multi-round cases. The results come from
:func:`sniper.preview.preview_case` (the JSON the README fixes); events the JSON does not show (dropped
reservations) are checked on a direct run of the policy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sniper.core.yarn.conformance import ConformanceCase, parse_case
from sniper.core.yarn.proportional import ProportionalPolicy
from sniper.preview import QUEUE_FIELDS, preview, preview_case, render_table

CASES_PATH = Path(__file__).resolve().parent / "data" / "yarn_proportional" / "cases.json"


def _raw_cases() -> list[dict[str, Any]]:
    data = json.loads(CASES_PATH.read_text(encoding="utf-8"))
    cases: list[dict[str, Any]] = data["cases"]
    return cases


RAW_CASES = _raw_cases()


def _unreserved_events(case: ConformanceCase) -> list[int]:
    """Dropped-reservation events per round (not part of the preview JSON)."""
    assert case.snapshot is not None
    policy = ProportionalPolicy(case.config)
    return [len(policy.round(case.snapshot, clock).unreserved) for clock in case.clocks]


def _check_marks(expectations: list[dict[str, Any]], marked: dict[str, int], events: int, where: str) -> None:
    for exp in expectations:
        app, count = exp["app"], exp["count"]
        if app == "*":
            assert events == 0, f"{where}: expected no event at all, got {events} (marked {marked})"
        else:
            assert marked.get(app, 0) == count, f"{where}: {app} marked {marked.get(app, 0)}, expected {count}"


def _queue_value(figures: dict[str, list[int]], field: str, expected: object) -> object:
    values = figures[field]
    return values if isinstance(expected, list) else values[0]


@pytest.mark.parametrize("raw", RAW_CASES, ids=[c["id"] for c in RAW_CASES])
def test_conformance_case(raw: dict[str, Any]) -> None:
    case = parse_case(raw)
    result = preview_case(case)
    assert result["id"] == raw["id"]
    expected = raw["expected"]

    if case.snapshot is None:  # a unit case of the container sort
        assert result == {"id": raw["id"], "order": expected["order"]}
        return

    assert case.snapshot is not None
    apps = [app.id for app in case.snapshot.apps()]
    paths = [q.path for q in case.snapshot.queues]
    unreserved = _unreserved_events(case)
    rounds = result["rounds"]
    assert [r["clock_ms"] for r in rounds] == list(case.clocks)
    for rnd in rounds:
        assert list(rnd["marked"]) == apps, "every app appears in marked"
        assert list(rnd["killable"]) == apps, "every app appears in killable"
        assert list(rnd["queues"]) == paths, "every queue appears, in pre-order"
        for figures in rnd["queues"].values():
            assert set(figures) == set(QUEUE_FIELDS)
            assert all(len(figures[f]) == len(case.resource_types) for f in QUEUE_FIELDS)

    if "rounds" in expected:
        cumulative_marked: dict[str, int] = dict.fromkeys(apps, 0)
        cumulative_events = 0
        for i, (exp_round, rnd) in enumerate(zip(expected["rounds"], rounds, strict=True)):
            where = f"round {i} (clock {rnd['clock_ms']})"
            for app, n in rnd["marked"].items():
                cumulative_marked[app] += n
            cumulative_events += sum(rnd["marked"].values()) + sum(rnd["killable"].values()) + unreserved[i]
            _check_marks(
                exp_round.get("cumulative_mark_for_preemption", []), cumulative_marked, cumulative_events, where
            )
            if "cumulative_total_events" in exp_round:
                assert cumulative_events == exp_round["cumulative_total_events"], where
    else:
        (rnd,) = rounds
        events = sum(rnd["marked"].values()) + sum(rnd["killable"].values()) + unreserved[0]
        _check_marks(expected.get("mark_for_preemption", []), rnd["marked"], events, "round 0")

    for exp in expected.get("queue_state", []):
        figures = rounds[-1]["queues"][exp["queue"]]
        got = _queue_value(figures, exp["field"], exp["value"])
        assert got == exp["value"], f"{exp['queue']}.{exp['field']} = {got}, expected {exp['value']}"


def test_preview_reads_the_whole_file() -> None:
    results = preview(CASES_PATH)
    assert [r["id"] for r in results] == [c["id"] for c in RAW_CASES]
    json.dumps(results)  # plain JSON values only


def test_preview_reads_a_single_case_file(tmp_path: Path) -> None:
    raw = next(c for c in RAW_CASES if c["id"] == "classic/testExpireKill")
    path = tmp_path / "one.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    (result,) = preview(path)
    assert [r["clock_ms"] for r in result["rounds"]] == [0, 5000, 10001]
    assert [r["marked"]["app2"] for r in result["rounds"]] == [10, 0, 0]
    assert [r["killable"]["app2"] for r in result["rounds"]] == [0, 0, 10]


def test_preview_rejects_unknown_policy() -> None:
    with pytest.raises(ValueError, match="sniper"):
        preview(CASES_PATH, policy="sniper")


def test_render_table_names_cases_apps_and_queues() -> None:
    results = preview(CASES_PATH)
    text = render_table(results)
    for raw in RAW_CASES:
        assert raw["id"] in text
    assert "root.queueC" in text and "app2" in text
    assert "rm1 rm2 rm3 rm4 rm5" in text
