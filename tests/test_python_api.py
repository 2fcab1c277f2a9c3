"""The Python API (``sniper.simulate``, ``sniper.compare``): the documented example runs and prints what
docs/python-api.md says, and bad input raises a clear error instead of returning a partial report."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import msgspec
import pytest
import yaml

import sniper
from sniper.core.config import ConfigError
from sniper.messages.codec import encode_json_line
from sniper.simulator.scenarios import scenario

DOC = Path(__file__).resolve().parent.parent / "docs" / "python-api.md"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_the_documented_example_runs_and_prints_what_the_page_shows() -> None:
    (example,) = _blocks("python")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, str(DOC), "exec"), {})
    (shown,) = _blocks("text")
    assert printed.getvalue() == shown


def test_simulate_reads_a_trace_file_with_its_queues_file(tmp_path: Path) -> None:
    sc = scenario("large_containers")
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(b"".join(encode_json_line(e) for e in sc.events))
    queues = tmp_path / "q.yaml"
    queues.write_text(yaml.safe_dump(sc.queues))
    from_files = sniper.simulate(trace, queues=queues, policy="proportional")
    from_scenario = sniper.simulate("large_containers", queues=sc.queues, policy="proportional")
    assert from_files.policy == "proportional"
    assert from_files.preemptions.victims > 0
    assert msgspec.json.encode(from_files.preemption_log) == msgspec.json.encode(from_scenario.preemption_log)


def test_simulate_takes_events_and_stops_at_until() -> None:
    sc = scenario("large_containers")
    early = sniper.simulate(sc.events, queues=sc.config, until=30.0)
    assert early.sim_seconds <= 30.0
    assert early.preemptions.victims == 0  # the large asks arrive at t=60


def test_compare_keeps_the_order_of_the_policies() -> None:
    reports = sniper.compare("large_containers", policies=["none", "sniper"], until=100.0)
    assert list(reports) == ["none", "sniper"]
    assert reports["none"].preemptions.victims == 0 < reports["sniper"].preemptions.victims


@pytest.mark.parametrize(
    ("call", "error", "says"),
    [
        (lambda: sniper.simulate("no_such_scenario"), ValueError, "bundled"),
        (lambda: sniper.compare("large_containers", policies=["shotgun"]), ValueError, "shotgun"),
        (lambda: sniper.compare("large_containers", policies=[]), ValueError, "choose among"),
        (lambda: sniper.simulate("demo", queues={"partitions": [{"name": "default"}]}), ConfigError, "queues"),
        (lambda: sniper.simulate([]), ValueError, "configures no partition"),
    ],
)
def test_bad_input_raises_a_clear_error(call: object, error: type[Exception], says: str) -> None:
    with pytest.raises(error, match=says):
        call()  # type: ignore[operator]


def test_a_trace_with_bad_lines_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"type": "node_added", "t": "soon"}\n')
    with pytest.raises(ValueError, match="bad line"):
        sniper.simulate(trace, queues=scenario("large_containers").queues)


def test_version_is_the_installed_one() -> None:
    from importlib.metadata import version

    assert sniper.__version__ == version("sniper-scheduler")
