"""Errors are clear and exit codes mean something: one line on stderr, 2 for input, 3 for a runtime
failure, never a traceback; names print literally; a run that decides nothing says so."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgspec
import pytest
from typer.testing import CliRunner, Result

from sniper.cli import app
from sniper.cli.app import EXIT_INPUT, EXIT_RUNTIME, PrintableFormatter, explain
from sniper.core.config import ConfigError
from sniper.transport.broker import free_port
from sniper.transport.kafka import KafkaSettings
from tests.core_support import partition_raw, queue
from tests.simulation_support import TINY


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def _trace(tmp_path: Path, events: list[object], name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((e if isinstance(e, str) else msgspec.json.encode(e).decode()) + "\n" for e in events))
    return path


def _one_error_line(result: Result) -> str:
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines, result.output
    return lines[-1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["simulate", "--until", "-5"], "Invalid value for '--until'"),
        (["simulate", "--seed", "x"], "Invalid value for '--seed'"),
        (["simulate", "--seed", "-1"], "Invalid value for '--seed'"),
        (["bench", "allocate", "--nodes", "0"], "Invalid value for '--nodes'"),
        (["bench", "preempt", "--running", "0"], "Invalid value for '--running'"),
        (["core", "--role", "boss"], "'all', 'cache', 'allocator', 'policy'"),
        (["core", "--log-format", "xml"], "'kv', 'json'"),
        (["simulate", "--transport", "pigeon"], "'memory', 'kafka'"),
        (["simulate", "contract", "--am-release-gap", "-1"], "Invalid value for '--am-release-gap'"),
        (["compare", "contract", "--am-release-gap", "soon"], "Invalid value for '--am-release-gap'"),
        (["feed", "t.jsonl", "--format", "xml"], "'msgpack', 'json'"),
        (["compare", "demo", "--policies", "sniper,shotgun"], "choose among sniper, proportional, none"),
        (["simulate", "missing.jsonl"], "error: no such file: missing.jsonl"),
        (["preview", "missing.json"], "error: no such file: missing.json"),
    ],
)
def test_bad_usage_or_input_exits_2_in_one_line(args: list[str], message: str) -> None:
    result = _invoke(*args)
    assert result.exit_code == EXIT_INPUT, result.output
    assert message in _one_error_line(result)


def test_choices_are_listed_in_help() -> None:
    result = _invoke("core", "--help")
    text = " ".join(result.output.split())
    assert "<all|cache|allocator|policy>" in text and "<kv|json>" in text


def test_a_trace_without_config_and_without_queues_is_refused(tmp_path: Path) -> None:
    trace = _trace(tmp_path, TINY[1:])
    result = _invoke("simulate", str(trace))
    assert result.exit_code == EXIT_INPUT, result.output
    assert "configures no partition" in _one_error_line(result) and "--queues" in result.stderr


def test_a_run_whose_every_decision_is_a_rejection_lists_them_and_exits_2(tmp_path: Path) -> None:
    events = [TINY[0], {"t": 1, "type": "app_added", "app": "a1", "queue": "root.nowhere"}]
    report = tmp_path / "report.json"
    result = _invoke("simulate", str(_trace(tmp_path, events)), "--report", str(report), "--show-rejections")
    assert result.exit_code == EXIT_INPUT, result.output
    assert "every decision for 2 events was a rejection" in _one_error_line(result)
    assert "rejected" in result.stderr and "app=a1" in result.stderr and "root.nowhere" in result.stderr
    rejections = json.loads(report.read_text())["rejections"]
    assert len(rejections) == 1 and rejections[0]["app"] == "a1" and "root.nowhere" in rejections[0]["reason"]


def _nested(levels: int) -> dict[str, object]:
    top: dict[str, object] = {"name": "q0"}
    level = top
    for i in range(levels):
        child: dict[str, object] = {"name": f"q{i + 1}"}
        level["queues"] = [child]
        level = child
    return top


NODE = {"t": 0, "type": "node_added", "node": "n1", "capacity": {"memory": 8192, "vcore": 8000}}
TWO_QUEUES = {"t": 0, "type": "partition_config", "config": partition_raw(queue("a"), queue("b"))}


@pytest.mark.parametrize(
    ("events", "reason"),
    [
        ([TINY[0], NODE, {"t": 1, "type": "app_added", "app": "a1", "queue": "root.nowhere"}], "unknown queue"),
        (
            [
                TWO_QUEUES,
                NODE,
                {"t": 1, "type": "app_added", "app": "a1", "queue": "root.a"},
                {"t": 1, "type": "app_added", "app": "a1", "queue": "root.b"},
            ],
            "already runs in root.a",
        ),
        (
            [
                TINY[0],
                NODE,
                {"t": 1, "type": "app_added", "app": "a1", "queue": "root.a"},
                {
                    "t": 1,
                    "type": "ask_added",
                    "app": "a1",
                    "ask": "g",
                    "resource": {"memory": 6000},
                    "count": 2,
                    "gang_min": 2,
                },
            ],
            "can never fit",
        ),
        (
            [
                {
                    "t": 0,
                    "type": "partition_config",
                    "config": {"name": "default", "queues": [{"name": "root", "queues": [_nested(120)]}]},
                },
                NODE,
            ],
            "nested more than",
        ),
    ],
    ids=["bad-name", "duplicate-app", "gang-never-fits", "config-too-deep"],
)
def test_a_trace_whose_events_are_all_rejected_is_bad_input(tmp_path: Path, events: list[object], reason: str) -> None:
    result = _invoke("simulate", str(_trace(tmp_path, events)))
    assert result.exit_code == EXIT_INPUT, result.output
    assert "was a rejection" in _one_error_line(result)
    assert reason in result.stderr  # listed without --show-rejections


def test_a_run_that_decides_nothing_at_all_is_a_runtime_failure(tmp_path: Path) -> None:
    result = _invoke("simulate", str(_trace(tmp_path, [TINY[0], NODE])))
    assert result.exit_code == EXIT_RUNTIME, result.output
    assert "nothing was decided for 2 events" in _one_error_line(result)


@pytest.mark.parametrize("command", ["simulate", "compare"])
def test_a_trace_whose_events_all_repeat_one_id_is_bad_input(tmp_path: Path, command: str) -> None:
    events = [{**e, "id": "same"} for e in [*TINY, *TINY[1:], *TINY[1:]]]
    result = _invoke(command, str(_trace(tmp_path, events)))
    assert result.exit_code == EXIT_INPUT, result.output
    assert "9 events ignored as repeats of an earlier id" in _one_error_line(result)


def test_repeats_are_counted_per_partition_and_forgotten_at_partition_removed() -> None:
    from sniper.cli.app import repeated_ids
    from sniper.messages import feed as fe

    events = [
        fe.NodeAdded(id="x", node="n", capacity={}),
        fe.NodeAdded(id="x", partition="other", node="n", capacity={}),  # another partition's ids
        fe.NodeAdded(id="x", node="n", capacity={}),  # a repeat
        fe.PartitionRemoved(id="r"),
        fe.NodeAdded(id="x", node="n", capacity={}),  # x named nothing once the partition was removed
        fe.NodeAdded(node="n", capacity={}),  # no id: never a repeat
        fe.NodeAdded(node="n", capacity={}),
    ]
    assert repeated_ids(events) == 1


def test_the_simulate_summary_goes_to_stdout(tmp_path: Path) -> None:
    result = _invoke("simulate", str(_trace(tmp_path, TINY)))
    assert result.exit_code == 0, result.output
    assert "invariant_violations" in result.stdout and "invariant_violations" not in result.stderr


def test_names_that_look_like_markup_print_literally(tmp_path: Path) -> None:
    # queue names follow YuniKorn's rule (no brackets); node, app and event names are free text
    config = partition_raw(queue("q", guaranteed={"memory": 4096}))
    events = [
        {"t": 0, "type": "partition_config", "config": config},
        {"t": 0, "type": "node_added", "node": "[/]", "capacity": {"memory": 8192, "vcore": 8000}},
        {"t": 1, "type": "app_added", "app": "[red]", "queue": "root.q"},
        {"t": 1, "type": "ask_added", "app": "[red]", "ask": "k", "resource": {"memory": 2048}, "count": 1},
        {"t": 1, "type": "app_added", "app": "[/]x", "queue": "root.[/]"},
        {"t": 2, "type": "[/]"},
    ]
    source = _trace(tmp_path, events, name="[bold].jsonl")
    result = _invoke("simulate", str(source), "--show-rejections")
    assert result.exit_code == 0, result.output
    assert "[/]" in result.stderr and "[bold].jsonl" in result.stderr  # the bad line, as written
    assert "rejected partition=default app=[/]x: " in result.stderr and "root.[/] is an unknown queue" in result.stderr
    assert "[bold].jsonl" in " ".join(result.stdout.split())  # the summary's title


def test_names_with_terminal_control_characters_print_escaped_in_rejections_and_errors(tmp_path: Path) -> None:
    """An app in an unknown queue, both named with ESC and BEL, is listed escaped among the rejections;
    a missing trace whose name holds ESC is named escaped in the one error line."""
    config = partition_raw(queue("q", guaranteed={"memory": 4096}))
    events = [
        {"t": 0, "type": "partition_config", "config": config},
        {"t": 0, "type": "node_added", "node": "n1", "capacity": {"memory": 8192, "vcore": 8000}},
        {"t": 1, "type": "app_added", "app": "a\x1b[2J", "queue": "root.q\x07"},
        {"t": 1, "type": "app_added", "app": "ok", "queue": "root.q"},
        {"t": 1, "type": "ask_added", "app": "ok", "ask": "k", "resource": {"memory": 2048}},
    ]
    result = _invoke("simulate", str(_trace(tmp_path, events)), "--show-rejections")
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "app=a\\x1b[2J" in result.stderr and "root.q\\x07" in result.stderr
    missing = _invoke("simulate", str(tmp_path / "gone\x1b]0;title\x07.jsonl"))
    assert missing.exit_code == EXIT_INPUT
    line = _one_error_line(missing)
    assert line.isprintable() and "gone\\x1b]0;title\\x07.jsonl" in line


def test_the_verbose_log_writes_names_escaped_and_keeps_a_tracebacks_lines() -> None:
    """``-v`` logs plain lines: a name with ESC in a message is escaped, a traceback after it keeps its lines."""
    try:
        raise ZeroDivisionError("boom")
    except ZeroDivisionError as err:
        record = logging.LogRecord("sniper.cli", logging.INFO, __file__, 1, "app %s failed", ("a\x1b[2J",), None)
        record.exc_info = (type(err), err, err.__traceback__)
    line = PrintableFormatter("%(levelname)s %(message)s").format(record)
    first, *rest = line.splitlines()
    assert first == "INFO app a\\x1b[2J failed" and "\x1b" not in line
    assert rest[0] == "Traceback (most recent call last):" and rest[-1] == "ZeroDivisionError: boom"


def test_a_huge_pending_count_is_refused_with_the_admission_bound_and_simulate_goes_on(tmp_path: Path) -> None:
    events = [*TINY, {**TINY[3], "ask": "huge", "count": 10_000_000, "duration": None}]
    report = tmp_path / "report.json"
    result = _invoke("simulate", str(_trace(tmp_path, events)), "--report", str(report), "--show-rejections")
    assert result.exit_code == 0, result.output
    assert json.loads(report.read_text())["pending_at_end"] == 0
    assert "over admission.max_pending_per_ask (100000)" in " ".join(result.stderr.split())


def test_simulate_refuses_an_ask_over_the_pending_bound_with_the_bound_it_passed(tmp_path: Path) -> None:
    """A count of ten million is refused at once with the bound it passed (nothing allocated,
    nothing pending), so the run is all rejections: bad input, exit 2, the bound named."""
    events = [*TINY[:3], {**TINY[3], "count": 10_000_000, "duration": None}]
    report = tmp_path / "report.json"
    result = _invoke("simulate", str(_trace(tmp_path, events)), "--report", str(report))
    assert result.exit_code == EXIT_INPUT, result.output
    assert "over admission.max_pending_per_ask (100000)" in result.stderr
    summary = json.loads(report.read_text())
    assert summary["pending_at_end"] == 0 and summary["allocations"] == 0


def test_the_pending_bound_is_configurable_in_the_partition(tmp_path: Path) -> None:
    config = {**partition_raw(queue("a", guaranteed={"memory": 4096})), "admission": {"max_pending_per_ask": 3}}
    events = [
        {"t": 0, "type": "partition_config", "config": config},
        *TINY[1:],
        {**TINY[3], "ask": "k4", "count": 4},
    ]
    report = tmp_path / "report.json"
    result = _invoke("simulate", str(_trace(tmp_path, events)), "--report", str(report), "--show-rejections")
    assert result.exit_code == 0, result.output
    rejections = json.loads(report.read_text())["rejections"]
    assert [(r["ask"], r["reason"]) for r in rejections] == [
        ("k4", "ask a1/k4 (count 4): over admission.max_pending_per_ask (3)")
    ]


def test_errors_inside_task_groups_and_unknown_ones_map_to_one_line() -> None:
    nested = ExceptionGroup("tg", [ExceptionGroup("inner", [ConfigError("queue root.x: bad")])])
    assert explain(nested) == (EXIT_INPUT, "invalid input: queue root.x: bad")
    code, line = explain(ZeroDivisionError("boom"))
    assert code == EXIT_RUNTIME and "internal error" in line and "\n" not in line


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections and never answers (a wrong, unresponsive bootstrap)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_an_unanswering_bootstrap_gives_up_within_the_connect_timeout(silent_port: int, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    result = _invoke("record", "--bootstrap", f"127.0.0.1:{silent_port}", "--connect-timeout", "0.5", "--out", str(out))
    assert result.exit_code == EXIT_RUNTIME, result.output
    line = _one_error_line(result)
    assert f"no Kafka broker answered at 127.0.0.1:{silent_port} within 0.5 s" in line


def test_a_core_with_no_broker_listening_keeps_trying_for_the_connect_timeout_then_exits_3_without_a_traceback() -> (
    None
):
    """A refused connection is no reason to give up before ``--connect-timeout`` (a broker may be starting
    after the core); past it, one error line, exit 3, and no traceback in the core's INFO log."""
    port = free_port()  # bound and released: nothing listens there
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        result = _invoke("core", "--bootstrap", f"127.0.0.1:{port}", "--connect-timeout", "1.5", "--metrics-port", "0")
    finally:  # the core installed its log handler on this runner's stderr: later tests log elsewhere
        root.handlers[:] = handlers
        root.setLevel(level)
    assert result.exit_code == EXIT_RUNTIME, result.output
    assert "Traceback" not in result.output
    assert result.output.count("yet; trying again for up to 1.5 s") == 1  # said once, not at every attempt
    assert "Unable connect" not in result.output  # nor aiokafka's line for each attempt
    assert f"no Kafka broker answered at 127.0.0.1:{port} within 1.5 s" in _one_error_line(result)


def test_a_broker_port_in_use_is_named(silent_port: int) -> None:
    result = _invoke("broker", "--port", str(silent_port))
    assert result.exit_code == EXIT_RUNTIME, result.output
    assert f"broker port {silent_port} on 127.0.0.1 is in use" in _one_error_line(result)


@pytest.mark.parametrize("command", ["core", "feed", "record"])
def test_every_feed_facing_command_takes_every_kafka_connection_flag(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for flag in (
        "--prefix",
        "--kafka-partitions",
        "--security-protocol",
        "--sasl-mechanism",
        "--username",
        "--password",
        "--ssl-cafile",
        "--ssl-certfile",
        "--ssl-keyfile",
        "--max-message-bytes",
        "--session-timeout-ms",
        "--connect-timeout",
    ):
        assert flag in result.output, (command, flag)


def test_a_tls_file_flag_reaches_the_settings_as_text(silent_port: int, tmp_path: Path) -> None:
    """``--ssl-cafile`` names a missing file: the settings refuse it (a path object would not be checked)."""
    result = _invoke(
        "record",
        "--bootstrap",
        f"127.0.0.1:{silent_port}",
        "--connect-timeout",
        "0.5",
        "--ssl-cafile",
        str(tmp_path / "missing.pem"),
        "--security-protocol",
        "SSL",
        "--out",
        str(tmp_path / "o.jsonl"),
    )
    assert result.exit_code != 0
    assert "missing.pem" in _one_error_line(result)


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--security-protocol", "SSL"], "completed no TLS handshake"),
        (
            [
                "--security-protocol",
                "SASL_PLAINTEXT",
                "--sasl-mechanism",
                "PLAIN",
                "--username",
                "u",
                "--password",
                "p",
            ],
            "SASL PLAIN authentication of 'u'",
        ),
    ],
    ids=["tls-to-a-plaintext-listener", "sasl-to-a-broker-without-sasl"],
)
def test_a_tls_or_sasl_failure_is_named_in_one_line(
    kafka_bootstrap: str, tmp_path: Path, flags: list[str], named: str
) -> None:
    """The bundled broker listens in plaintext without SASL: a TLS client and a SASL client fail there, and
    the error names the TLS or SASL failure, not an unreachable broker."""
    result = _invoke(
        "record", "--bootstrap", kafka_bootstrap, "--connect-timeout", "1", *flags, "--out", str(tmp_path / "o.jsonl")
    )
    assert result.exit_code == EXIT_RUNTIME, result.output
    line = _one_error_line(result)
    assert named in line and "no Kafka broker answered" not in line and "Unable to bootstrap" not in line


@pytest.mark.parametrize(
    "flags", [["--username", "u", "--password", "p"], ["--security-protocol", "SSL", "--username", "u"]]
)
def test_credentials_without_a_sasl_protocol_are_refused(flags: list[str], tmp_path: Path) -> None:
    """A username or password with PLAINTEXT or SSL would be silently ignored: refused before connecting."""
    result = _invoke("record", "--bootstrap", "127.0.0.1:9", *flags, "--out", str(tmp_path / "o.jsonl"))
    assert result.exit_code == EXIT_INPUT, result.output
    line = _one_error_line(result)
    assert "does not authenticate" in line and "SASL_SSL" in line


def test_connect_timeout_defaults_to_30_seconds() -> None:
    assert KafkaSettings(bootstrap="h:1").connect_timeout == 30.0


@pytest.mark.kafka
def test_feed_with_no_core_answering_fails(kafka_settings: KafkaSettings, tmp_path: Path) -> None:
    trace = _trace(tmp_path, TINY)
    args = ["feed", str(trace), "--bootstrap", kafka_settings.bootstrap, "--prefix", kafka_settings.prefix]
    result = _invoke(*args, "--answer-timeout", "1", "--speed", "100")
    assert result.exit_code == EXIT_RUNTIME, result.output
    assert "no core answered" in _one_error_line(result)


@pytest.mark.kafka
async def test_feed_reports_the_unanswered_partition_before_the_violations_a_dead_core_left(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """A core answers the first record with a wrong decision and dies: the run has violations, but what
    went unanswered is the cause, so it is what the command reports (exit 3)."""
    from sniper.messages import decisions as dm
    from sniper.transport.bus import DECISIONS, FEED
    from sniper.transport.kafka import KafkaBus, KafkaSubscription

    trace = _trace(tmp_path, TINY)
    args = ["feed", str(trace), "--bootstrap", kafka_settings.bootstrap, "--prefix", kafka_settings.prefix]
    args += ["--kafka-partitions", str(kafka_settings.partitions), "--speed", "50", "--drain", "1"]

    async def answer_once_then_die(bus: KafkaBus, feed: KafkaSubscription) -> None:
        _kp, offset, _event, _value = await feed.receive_record()
        wrong = dm.PreemptCancelled(
            allocation="never-placed", app="a1", queue="root.a", node="n1", reservation="r", reason="x"
        )
        await bus.publish(DECISIONS, "default", msgspec.structs.replace(wrong, seq=1, epoch=1, feed_offset=offset))
        await feed.aclose()

    with anyio.fail_after(120):
        async with KafkaBus(kafka_settings) as bus, anyio.create_task_group() as tg:
            feed = await bus.subscribe_ready(FEED, group="dead-core")
            tg.start_soon(answer_once_then_die, bus, feed)
            result = await anyio.to_thread.run_sync(lambda: _invoke(*args))
    assert result.exit_code == EXIT_RUNTIME, result.output
    assert "invariant violation" not in result.output
    assert "no core answered partition(s) default" in _one_error_line(result)


class _Lines:
    """A file handle for ``record``'s copy loop that says when it holds ``want`` lines."""

    def __init__(self, want: int) -> None:
        self.lines: list[bytes] = []
        self.want = want
        self.full = anyio.Event()

    async def write(self, data: bytes) -> None:
        self.lines.append(data)
        if len(self.lines) >= self.want:
            self.full.set()

    async def flush(self) -> None:
        return None


@pytest.mark.kafka
async def test_record_keeps_one_time_base(kafka_settings: KafkaSettings) -> None:
    """A feed played ten times faster is recorded in trace seconds: times and durations agree."""
    from sniper.messages import feed as f
    from sniper.resource_manager.feed import _copy
    from sniper.transport.bus import FEED
    from sniper.transport.kafka import KafkaBus

    events = [
        f.AppAdded(t=100.0, partition="p", app="a1", queue="root.a"),
        f.AskAdded(t=130.0, partition="p", app="a1", ask="k", resource={"memory": 1}, duration=30.0),
    ]
    handle = _Lines(2)
    with anyio.fail_after(60):
        async with KafkaBus(kafka_settings) as bus:
            sub = await bus.subscribe_ready(FEED, group=kafka_settings.prefix + "record")
            await bus.publish_many(FEED, [("p", e) for e in events])
            async with anyio.create_task_group() as tg:
                tg.start_soon(_copy, sub, handle, [0])
                await handle.full.wait()
                tg.cancel_scope.cancel()
    recorded = [json.loads(line) for line in handle.lines]
    assert [r["t"] for r in recorded] == [0.0, 30.0]  # 30 trace seconds apart, whatever the wall took
    assert recorded[1]["duration"] == 30.0


def test_preview_tables_print_names_literally() -> None:
    from sniper.preview import render_table

    assert "[/] order: a [bold]" in " ".join(render_table([{"id": "[/]", "order": ["a", "[bold]"]}]).split())


def test_bench_prints_a_table_or_json() -> None:
    args = ["bench", "preempt", "--nodes", "4", "--running", "8", "--starving", "2"]
    table = _invoke(*args)
    assert table.exit_code == 0, table.output
    assert "victims_per_s" in table.stdout and "┃ metric" in table.stdout
    as_json = _invoke(*args, "--json")
    assert json.loads(as_json.stdout)["nodes"] == 4


@pytest.mark.kafka
async def test_feed_prints_a_table_or_json_with_the_rejections(kafka_settings: KafkaSettings, tmp_path: Path) -> None:
    from sniper.cluster.process import CoreOptions, CoreProcess

    bad_app = {"t": 1, "type": "app_added", "app": "x[/]", "queue": "root.nowhere"}
    trace = _trace(tmp_path, [*TINY, bad_app])
    args = ["feed", str(trace), "--bootstrap", kafka_settings.bootstrap, "--prefix", kafka_settings.prefix]
    args += ["--kafka-partitions", str(kafka_settings.partitions), "--speed", "20", "--drain", "1", "--show-rejections"]
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            await tg.start(CoreProcess(kafka_settings, CoreOptions(group="feed", tick=0.1)).run)
            as_json = await anyio.to_thread.run_sync(lambda: _invoke(*args, "--json"))
            # The second run asks anew (the first run's ask is done; its decisions are all read by now).
            again = [*TINY[:3], {**TINY[3], "ask": "k2"}, bad_app]
            args[1] = str(_trace(tmp_path, again, "again.jsonl"))
            table = await anyio.to_thread.run_sync(lambda: _invoke(*args))
            tg.cancel_scope.cancel()
    assert as_json.exit_code == 0, as_json.output
    report = json.loads(as_json.stdout)
    assert report["allocations"] == 3
    assert [r["app"] for r in report["rejections"]] == ["x[/]"] and "root.nowhere" in report["rejections"][0]["reason"]
    assert "rejected" in as_json.stderr and "app=x[/]" in as_json.stderr
    assert table.exit_code == 0, table.output
    assert "┃ metric" in table.stdout and "allocations" in table.stdout


def test_simulate_prints_the_warnings_of_a_traces_partition_config(tmp_path: Path) -> None:
    config = partition_raw(queue("q", guaranteed={"memory": 4096}))
    config["queues"][0]["maxapplications"] = 3  # a YuniKorn key Sniper only warns about
    config["queues"][0]["resources"] = {"guaranteed": {"memory": "4Gi", "vcores": 2}}
    events = [{"t": 0, "type": "partition_config", "config": config}, *TINY[1:]]
    result = _invoke("simulate", str(_trace(tmp_path, events)))
    assert "warning:" in result.stderr and "vcores" in result.stderr


def test_an_internal_error_names_a_verbose_flag_that_shows_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("boom")

    monkeypatch.setattr("sniper.resource_manager.feed.play", broken)
    trace = str(_trace(tmp_path, TINY))
    for args in (["-v", "feed", trace], ["feed", trace, "-v"]):
        caplog.clear()
        result = _invoke(*args, "--bootstrap", "127.0.0.1:9")
        line = _one_error_line(result)
        assert result.exit_code == EXIT_RUNTIME and "internal error (ZeroDivisionError: boom)" in line
        assert "`sniper -v COMMAND ...`" in line
        [failed] = [r for r in caplog.records if r.getMessage() == "command failed"]
        assert failed.exc_info is not None and failed.exc_info[0] is ZeroDivisionError


def test_an_error_out_of_a_running_core_is_an_internal_error_never_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        async def run(self) -> None:
            raise ExceptionGroup("tg", [ValueError("list.remove(x): x not in list")])

    monkeypatch.setattr("sniper.cluster.roles.core_process", lambda settings, options: Broken())
    result = _invoke("core", "--bootstrap", "127.0.0.1:9", "--metrics-port", "0")
    line = result.stderr.splitlines()[-1]
    assert result.exit_code == EXIT_RUNTIME, line
    assert "internal error (ValueError: list.remove(x): x not in list)" in line and "invalid input" not in line
