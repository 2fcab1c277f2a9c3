"""The ``sniper`` command line through typer's CliRunner: simulate, check-config, scenario, and the wire
format ``sniper feed`` plays a trace in (on the bundled broker)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import anyio.to_thread
import msgspec
import pytest
import yaml
from typer.testing import CliRunner, Result

from sniper.cli import app
from sniper.cluster.logread import read_partition
from sniper.cluster.process import CoreOptions, CoreProcess
from sniper.messages.wire import CONTENT_TYPE
from sniper.transport.bus import FEED
from sniper.transport.kafka import KafkaSettings, kafka_partition
from tests.core_support import partition_raw, queue
from tests.simulation_support import REPORT_KEYS, TINY


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def _text(result: Result) -> str:
    """The output with rich's line wrapping undone."""
    return " ".join(result.output.split())


def _tiny_trace(tmp_path: Path, extra: list[str] | None = None) -> Path:
    path = tmp_path / "tiny.jsonl"
    lines = [msgspec.json.encode(e).decode() for e in TINY] + (extra or [])
    path.write_text("\n".join(lines) + "\n")
    return path


def test_simulate_writes_the_report(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = _invoke("simulate", str(_tiny_trace(tmp_path)), "--report", str(report))
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    assert set(data) >= REPORT_KEYS
    assert data["allocations"] == 3
    assert data["invariant_violations"] == 0
    assert data["pending_at_end"] == 0
    assert data["preemptions"] == {"victims": 0, "resources": {}, "cancelled": 0}
    assert data["sim_seconds"] == 5.0  # the three containers end at t=5, then nothing is left to do
    assert data["utilization"]["vcore"] == 0.0 < data["utilization"]["memory"]  # the asks want memory only
    assert "invariant_violations" in result.output


def test_simulate_reports_bad_lines_and_goes_on(tmp_path: Path) -> None:
    trace = _tiny_trace(tmp_path, extra=["{broken", '{"type":"app_added","app":"x"}'])
    report = tmp_path / "report.json"
    result = _invoke("simulate", str(trace), "--report", str(report))
    assert result.exit_code == 0, result.output
    text = _text(result)
    assert f"skipped {trace}:5" in text
    assert f"skipped {trace}:6" in text
    assert json.loads(report.read_text())["allocations"] == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["simulate", "no-such-scenario"], "unknown scenario 'no-such-scenario'"),
        (["simulate", "missing.jsonl"], "error: no such file: missing.jsonl"),
        (["simulate", "demo", "--policy", "shotgun"], "'shotgun' is not one of 'sniper', 'proportional', 'none'"),
        (["scenario", "no-such-scenario"], "unknown scenario"),
    ],
)
def test_bad_input_exits_2_with_the_reason(args: list[str], message: str) -> None:
    result = _invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in _text(result)


def test_check_config_accepts_a_good_file(tmp_path: Path) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text(yaml.safe_dump({"partitions": [partition_raw(queue("a"), queue("b", guaranteed={"memory": 1}))]}))
    result = _invoke("check-config", str(path))
    assert result.exit_code == 0, result.output
    assert "partition default" in result.output
    assert "    a: guaranteed none; no max;" in result.output
    assert "    b: guaranteed 1 MiB; no max;" in result.output


def test_check_config_speaks_of_every_amount_in_human_units_output_and_errors_alike(tmp_path: Path) -> None:
    """Ephemeral storage (bytes) prints in binary units like memory; an error about children's
    guarantees quotes both amounts the same way."""
    path = tmp_path / "queues.yaml"
    path.write_text(
        "partitions:\n  - queues:\n"
        "      - {name: a, resources: {guaranteed: {memory: 16Gi, ephemeral-storage: 100Gi}}}\n"
    )
    result = _invoke("check-config", str(path))
    assert result.exit_code == 0, result.output
    assert "a: guaranteed 16 GiB, ephemeral-storage 100 GiB;" in result.output
    path.write_text(
        "partitions:\n  - queues:\n      - name: p\n        resources: {guaranteed: {memory: 10Gi}}\n"
        "        queues: [{name: a, resources: {guaranteed: {memory: 6Gi}}},\n"
        "                 {name: b, resources: {guaranteed: {memory: 6Gi}}}]\n"
    )
    refused = _invoke("check-config", str(path))
    assert refused.exit_code == 2
    assert "children's guaranteed memory add up to 12 GiB, more than its own 10 GiB" in _text(refused)


def test_check_config_prints_units_preemption_settings_and_warnings(tmp_path: Path) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text(
        "partitions:\n  - preemption: {policy: sniper, interval: 1}\n    queues:\n"
        "      - {name: team, properties: {preemption.policy: fence}, adminacl: admins,\n"
        "         resources: {guaranteed: {memory: 320Gi, vcore: 80}, max: {memory: 343597383680, vcores: 2}}}\n"
        "      - {name: '[/]x', properties: {preemption.policy: disabled}}\n"
    )
    result = _invoke("check-config", str(path))
    assert result.exit_code == 2  # '[/]x' is no queue name, and printing it does not trip rich
    assert "'[/]x' is not a queue name" in _text(result)
    path.write_text(path.read_text().replace("'[/]x'", "c"))
    result = _invoke("check-config", str(path))
    assert result.exit_code == 0, result.output
    assert "preemption: policy sniper, every 1 s, grace 15 s, at most 10% of the partition a round" in result.output
    assert "fenced: root.team" in result.output and "never victims (disabled): root.c" in result.output
    assert "team: guaranteed 320 GiB, 80 cores; max 320 GiB, vcores 2;" in result.output
    text = _text(result)
    assert "warning: queue root.team: adminacl not implemented by Sniper yet" in text
    assert "resource 'vcores' is not 'vcore' (did you mean 'vcore'?)" in text


def test_check_config_reads_a_config_map_and_prints_limits_and_maxapplications(tmp_path: Path) -> None:
    """The ConfigMap YuniKorn is configured with loads as it is; limits, maxapplications and the
    preemption delay are printed in human units."""
    queues_yaml = yaml.safe_dump(
        {
            "partitions": [
                {
                    "name": "default",
                    "queues": [
                        {
                            "name": "shared",
                            "maxapplications": 8,
                            "properties": {"preemption.delay": "45s"},
                            "limits": [
                                {"limit": "sue", "users": ["sue"], "maxresources": {"memory": "256Gi", "vcore": 64}},
                                {"groups": ["data"], "maxapplications": 6},
                            ],
                        }
                    ],
                }
            ]
        }
    )
    path = tmp_path / "yunikorn-configs.yaml"
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "yunikorn-configs"}}
    path.write_text(yaml.safe_dump({**config_map, "data": {"queues.yaml": queues_yaml, "log.level": "INFO"}}))
    result = _invoke("check-config", str(path))
    assert result.exit_code == 0, result.output
    text = _text(result)
    assert (
        "shared: guaranteed none; no max; sort fifo; priority 0; preemption default, after 45 s; at most 8 apps" in text
    )
    assert "limit 'sue': users sue: at most 256 GiB, 64 cores" in text
    assert "limit: groups data: at most 6 apps" in text
    assert "ConfigMap yunikorn-configs: data log.level not used by Sniper; ignored" in text


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            {"partitions": [partition_raw(queue("a", guaranteed={"memory": 8}, maximum={"memory": 4}))]},
            "queue root.a: max memory 4 MiB is below guaranteed memory 8 MiB",
        ),
        (
            {"partitions": [partition_raw(queue("a", application_sort_policy="random"))]},
            "'random' is not one of fifo, fair, priority",
        ),
        ({"partitions": [partition_raw(queue("a"), queue("a"))]}, "duplicate child queue name 'a'"),
        ({"partitions": [partition_raw(queue("a"), node_sort="random")]}, "'random' is not one of binpacking, fair"),
        ("partitions: [", "not valid YAML"),
    ],
)
def test_check_config_refuses_a_bad_file_with_exit_2(tmp_path: Path, content: object, message: str) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    result = _invoke("check-config", str(path))
    assert result.exit_code == 2, result.output
    assert "invalid:" in result.output
    assert message in _text(result)


def test_check_config_of_a_missing_file_exits_2(tmp_path: Path) -> None:
    result = _invoke("check-config", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2
    assert "No such file" in _text(result)


def test_scenario_files_are_accepted_by_simulate(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _invoke("scenario", "demo", "--out", str(out))
    assert result.exit_code == 0, result.output
    trace, queues = out / "demo.jsonl", out / "demo.yaml"
    assert trace.exists() and queues.exists()
    assert _invoke("check-config", str(queues)).exit_code == 0
    first = json.loads(trace.read_text().splitlines()[0])
    assert first["type"] == "partition_config"
    report = tmp_path / "report.json"
    result = _invoke("simulate", str(trace), "--until", "60", "--report", str(report))
    assert result.exit_code == 0, result.output
    assert "skipped" not in result.output
    data = json.loads(report.read_text())
    assert data["invariant_violations"] == 0
    assert data["allocations"] > 0
    assert data["sim_seconds"] == 60.0


def test_bench_e2e_refuses_a_nonsense_cpu_cap_before_starting_anything() -> None:
    result = _invoke("bench", "e2e", "--core-cpus", "0")
    assert result.exit_code != 0
    assert "--core-cpus must be at least 0.01" in result.output


def test_compare_runs_policies_in_parallel_and_plots_the_resource_asked(tmp_path: Path) -> None:
    report, plot = tmp_path / "compare.json", tmp_path / "compare.png"
    trace = str(_tiny_trace(tmp_path))
    args = ["compare", trace, "--policies", "sniper,none", "--jobs", "2", "--resource", "memory", "--markdown"]
    result = _invoke(*args, "--report", str(report), "--plot", str(plot))
    assert result.exit_code == 0, result.output
    assert "| utilization memory |" in result.output and "| stranded memory |" in result.output
    data = json.loads(report.read_text())
    assert list(data) == ["sniper", "none"] and data["none"]["allocations"] == 3
    assert plot.stat().st_size > 0


def test_compare_reports_each_policys_rejections_as_simulate_does(tmp_path: Path) -> None:
    """An app in an unknown queue is rejected under every policy: each policy's report lists it in
    ``rejections``, with the fields and reason ``simulate --report`` gives."""
    unknown = '{"t": 1, "type": "app_added", "app": "lost", "queue": "root.nowhere"}'
    trace = str(_tiny_trace(tmp_path, [unknown]))
    compared, simulated = tmp_path / "compare.json", tmp_path / "simulate.json"
    result = _invoke("compare", trace, "--policies", "sniper,none", "--report", str(compared))
    assert result.exit_code == 0, result.output
    assert _invoke("simulate", trace, "--report", str(simulated)).exit_code == 0
    expected = json.loads(simulated.read_text())["rejections"]
    assert [r["app"] for r in expected] == ["lost"]
    data = json.loads(compared.read_text())
    assert data["sniper"]["rejections"] == data["none"]["rejections"] == expected


def test_compare_refuses_fewer_than_one_job(tmp_path: Path) -> None:
    result = _invoke("compare", str(_tiny_trace(tmp_path)), "--jobs", "0")
    assert result.exit_code == 2
    assert "--jobs" in _text(result) and "greater than or equal to 1" in _text(result)


def test_simulate_plots_the_scarcest_resource_by_default(tmp_path: Path) -> None:
    plot = tmp_path / "usage.png"
    result = _invoke("simulate", str(_tiny_trace(tmp_path)), "--plot", str(plot))
    assert result.exit_code == 0, result.output
    assert plot.stat().st_size > 0


def test_bench_simulate_prints_its_rates_as_json() -> None:
    result = _invoke(
        "bench", "simulate", "--nodes", "3", "--days", "0.05", "--pods", "30", "--policy", "none", "--json"
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["bench"] == "simulate" and data["allocations"] > 0 and data["invariant_violations"] == 0
    assert data["sim_seconds_per_wall_s"] > 0 and data["events_per_s"] > 0


def test_bench_opportunistic_prints_its_cycle_cost_as_json() -> None:
    result = _invoke("bench", "opportunistic", "--nodes", "4", "--opportunistic", "40", "--starving", "3", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["bench"] == "opportunistic" and data["opportunistic"] == 40 and data["cycle_ms"] > 0
    args = ("--nodes", "4", "--opportunistic", "40", "--starving", "3", "--gang", "2", "--users", "3", "--json")
    result = _invoke("bench", "opportunistic", *args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["gang"] == 2 and data["users"] == 3 and data["cycle_ms"] > 0


def test_bench_scenarios_prints_one_markdown_row_per_scenario_with_a_cell_per_policy() -> None:
    result = _invoke("bench", "scenarios", "--names", "fragmented", "--policies", "sniper,none", "--until", "60")
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if line.startswith("| `fragmented`")]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert len(cells) == 9 and all(c.count(" / ") == 1 for c in cells[1:])
    assert cells[-1] == "0 / 0"  # no invariant violated under either policy


def test_the_simulate_summary_speaks_human_units_and_the_report_base_ones(tmp_path: Path) -> None:
    """large_containers preempts 2 GiB, half-core containers: the table says GiB and cores, shares in
    percent; the JSON report keeps MiB and millicores."""
    report = tmp_path / "report.json"
    result = _invoke("simulate", "large_containers", "--policy", "sniper", "--report", str(report))
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    victims, preempted = data["preemptions"]["victims"], data["preemptions"]["resources"]
    assert preempted == {"memory": victims * 2048, "vcore": victims * 500}
    rows = {
        cells[0]: cells[1]
        for line in result.stdout.splitlines()
        if len(cells := [c.strip() for c in line.strip("│┃ ").split("│")]) == 2
    }
    assert rows["preempted"] == f"{victims * 2} GiB, {victims // 2:g} cores"
    assert re.fullmatch(r"[0-9.]+%", rows["utilization memory"]), rows
    assert re.fullmatch(r"[0-9.]+%", rows["stranded vcore"]), rows


def test_queues_reads_a_config_map_as_its_queues_yaml(tmp_path: Path) -> None:
    """``--queues`` takes the ConfigMap YuniKorn is configured with, as check-config does."""
    queues_yaml = (Path(__file__).resolve().parent.parent / "compose" / "demo.yaml").read_text()
    path = tmp_path / "yunikorn-configs.yaml"
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "yunikorn-configs"}}
    path.write_text(yaml.safe_dump({**config_map, "data": {"queues.yaml": queues_yaml, "log.level": "INFO"}}))
    report = tmp_path / "report.json"
    result = _invoke("simulate", "demo", "--queues", str(path), "--until", "30", "--report", str(report))
    assert result.exit_code == 0, result.output
    assert "ConfigMap yunikorn-configs: data log.level not used by Sniper; ignored" in _text(result)
    assert json.loads(report.read_text())["allocations"] > 0


def test_feed_and_bench_e2e_encode_the_feed_in_msgpack_unless_told_otherwise() -> None:
    for command in (["feed"], ["bench", "e2e"]):
        result = _invoke(*command, "--help")
        assert result.exit_code == 0, result.output
        option = _text(result).split("--format <msgpack|json>", 1)[1].split(" --", 1)[0]
        assert "content-type header" in option and "[default: msgpack]" in option, (command, option)


@pytest.mark.kafka
async def test_feed_format_json_plays_json_records(kafka_settings: KafkaSettings, tmp_path: Path) -> None:
    args = ["feed", str(_tiny_trace(tmp_path)), "--bootstrap", kafka_settings.bootstrap, "--format", "json"]
    args += ["--prefix", kafka_settings.prefix, "--kafka-partitions", str(kafka_settings.partitions)]
    args += ["--speed", "20", "--drain", "1", "--json"]
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            await tg.start(CoreProcess(kafka_settings, CoreOptions(group="feed", tick=0.1)).run)
            result = await anyio.to_thread.run_sync(lambda: _invoke(*args))
            tg.cancel_scope.cancel()
        records = await read_partition(kafka_settings, FEED, kafka_partition("default", kafka_settings.partitions))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["allocations"] == 3  # the core read every record
    assert records and all(r.headers == ((CONTENT_TYPE, b"application/json"),) for r in records)
    played = [json.loads(r.value or b"") for r in records]
    assert [x["type"] for x in played[: len(TINY)]] == [e["type"] for e in TINY]
    assert played[-1]["type"] == "sync" and all(x["partition"] == "default" for x in played)
