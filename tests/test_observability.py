"""Observability of a core process: the Prometheus endpoint and the state endpoint of an in-process
core, ``sniper status``, kills counted on a sped-up feed, and structured logs."""

from __future__ import annotations

import io
import json
import logging
import math
import re
import socket
import time
import urllib.request
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from typer.testing import CliRunner

from sniper.cli import app
from sniper.cluster.obs import CoreMetrics, MetricsServeError, StructuredFormatter
from sniper.cluster.process import CoreOptions, CoreProcess
from sniper.messages import decisions as d
from sniper.transport.bus import FEED
from sniper.transport.kafka import KafkaBus, KafkaSettings
from tests.core_process_support import read_decisions, workload


def scrape(port: int, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return str(response.read().decode())


def status(port: int, *args: str) -> Any:
    return CliRunner().invoke(app, ["status", "--url", f"http://127.0.0.1:{port}", *args], env={"COLUMNS": "250"})


@pytest.mark.kafka
async def test_the_metrics_endpoint_of_a_core(kafka_settings: KafkaSettings) -> None:
    with anyio.fail_after(60):
        async with KafkaBus(kafka_settings) as bus:
            reader = await read_decisions(bus)
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader.pump)
                process = CoreProcess(kafka_settings, CoreOptions(group="obs", tick=0.1))
                metrics = CoreMetrics(process)
                port = metrics.serve(0, addr="127.0.0.1")
                try:
                    await tg.start(process.run)
                    for event in workload("p1", 3):
                        await bus.publish(FEED, "p1", event)
                    await reader.until(lambda _: len(reader.of(d.Allocated)) == 3)
                    # The partition started on these (and replayed them); two more asks reach the running cache.
                    for event in workload("p1", 2, tag="late")[4:]:
                        await bus.publish(FEED, "p1", event)
                    await reader.until(lambda _: len(reader.of(d.Allocated)) == 5)
                    text = await anyio.to_thread.run_sync(scrape, port)
                    state = json.loads(await anyio.to_thread.run_sync(scrape, port, "/ws/v1/state"))
                    table = await anyio.to_thread.run_sync(status, port)
                    as_json = await anyio.to_thread.run_sync(status, port, "--json")
                finally:
                    metrics.close()
                tg.cancel_scope.cancel()
    lines = set(text.splitlines())
    assert 'sniper_allocations_total{partition="p1"} 5.0' in lines
    # Base units in the names: 20 MiB used and 64 MiB guaranteed, in bytes.
    assert 'sniper_queue_used_memory_bytes{partition="p1",queue="root.a"} 2.097152e+07' in lines
    assert 'sniper_queue_guaranteed_memory_bytes{partition="p1",queue="root.a"} 6.7108864e+07' in lines
    assert "sniper_partitions_hosted 1.0" in lines
    for name in (
        "sniper_queue_pending_memory_bytes",
        "sniper_queue_used_vcore_cores",
        "sniper_preemptions_total",
        "sniper_kills_total",
        "sniper_proposals_rejected_total",
        "sniper_consumer_lag",
        'sniper_inbox_depth{actor="cache",partition="p1"}',
        "sniper_dead_letters_total",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "python_gc_objects_collected_total",
        "python_info",
        'sniper_feed_to_decision_seconds_bucket{le="0.005",partition="p1"}',
        'sniper_allocation_cycle_seconds_bucket{le="0.005",partition="p1"}',
        "sniper_preemption_round_seconds_bucket",
        "sniper_event_loop_lag_seconds_bucket",
    ):
        assert name in text, name
    counts = {line.split()[0]: float(line.split()[1]) for line in lines if "_seconds_count" in line}
    assert counts['sniper_feed_to_decision_seconds_count{partition="p1"}'] == 2  # the two late asks
    assert counts['sniper_allocation_cycle_seconds_count{partition="p1"}'] >= 1
    assert "sniper_queue_usage" not in text  # no unit-less resource gauges for memory or vcore
    # The one app of root.a runs five containers and waits for nothing; no reservation, no preemption yet.
    assert 'sniper_queue_apps{partition="p1",queue="root.a",state="running"} 1.0' in lines
    assert 'sniper_queue_apps{partition="p1",queue="root.a",state="pending"} 0.0' in lines
    assert 'sniper_queue_state{partition="p1",queue="root.a",state="running"} 1.0' in lines
    assert 'sniper_queue_state{partition="p1",queue="root.a",state="draining"} 0.0' in lines
    assert 'sniper_queue_reservations{kind="preemption",partition="p1",queue="root.a"} 0.0' in lines
    assert 'sniper_missed_opportunities{partition="p1"} 0.0' in lines
    assert "sniper_queue_preempted_containers_total{" not in text
    (part,) = state["partitions"]
    assert state["units"] == {"memory": "bytes", "vcore": "cores", "gpu-milli": "GPUs", "other resources": "count"}
    queues = {q["queue"]: q for q in part["queues"]}
    assert queues["root.a"]["used"] == {"memory": 20 * 2**20} and queues["root.a"]["guaranteed"] == {"memory": 2**26}
    assert set(queues["root.a"]) == {"queue", "state", "guaranteed", "max", "used", "pending", "reserved", "ideal"}
    assert queues["root.a"]["state"] == "running"
    assert sorted(n["node"] for n in part["nodes"]) == ["n1", "n2"]
    assert part["reservations"] == [] and part["preemptions_in_flight"] == [] and part["recent_preemptions"] == []
    assert table.exit_code == 0, table.output
    assert "partition p1" in table.output and "root.a" in table.output
    row = next(line for line in table.output.splitlines() if "root.a" in line)
    assert [cell.strip() for cell in row.strip("│ ").split("│")][:4] == ["root.a", "running", "20 MiB", "64 MiB"]
    again = json.loads(as_json.stdout)
    assert again["partitions"][0]["queues"] == part["queues"] and again["units"] == state["units"]


def test_the_metrics_endpoint_listens_on_loopback_by_default_and_names_a_port_in_use() -> None:
    metrics = CoreMetrics(CoreProcess(KafkaSettings(bootstrap="127.0.0.1:1")))
    try:
        port = metrics.serve(0)
        assert metrics._server is not None and metrics._server.server_address[0] == "127.0.0.1"
        with pytest.raises(MetricsServeError, match=f"metrics port {port} on 127.0.0.1"):
            CoreMetrics(CoreProcess(KafkaSettings(bootstrap="127.0.0.1:1"))).serve(port)
    finally:
        metrics.close()


def test_status_of_nothing_listening_exits_3() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        result = status(port)
    assert result.exit_code == 3, result.output
    assert "cannot reach" in result.output and "Traceback" not in result.output


@pytest.mark.kafka
async def test_a_sped_up_feed_kills_victims_after_their_grace(
    kafka_settings: KafkaSettings, caplog: pytest.LogCaptureFixture
) -> None:
    """The core keeps the feed's time base: at ten times speed a 15 s grace ends after 1.5 wall seconds,
    so victims that ignore the preempt signal are killed, and the kills are counted. Every preemption
    and kill is on the audit trail with its victim, beneficiary, node and reason, and the per-queue
    preemption metrics add up to the decisions published."""
    from sniper.resource_manager.feed import PlayOptions, play
    from sniper.simulator.scenarios import scenario

    sc = scenario("demo", 0)
    caplog.set_level(logging.INFO, logger="sniper.audit")
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            process = CoreProcess(kafka_settings, CoreOptions(group="kills", tick=0.1))
            metrics = CoreMetrics(process)
            port = metrics.serve(0)
            try:
                async with anyio.create_task_group() as core:
                    await core.start(process.run)
                    played = await play(kafka_settings, sc.events, PlayOptions(speed=20, until=200), config=sc.config)
                    text = await anyio.to_thread.run_sync(scrape, port)  # the partitions' live figures
                    core.cancel_scope.cancel()  # rounds run on after the feed ends: stop them, then count
                counted = await anyio.to_thread.run_sync(scrape, port)
            finally:
                metrics.close()
            tg.cancel_scope.cancel()
    assert played.summary.invariant_violations == 0
    killed = played.summary.counts.get("Kill", 0)
    assert killed > 0
    kills = [line for line in text.splitlines() if line.startswith("sniper_kills_total{")]
    assert kills and sum(float(line.split()[1]) for line in kills) >= killed
    assert "sniper_preemption_round_seconds_count" in text
    decisions = played.checker.decisions()
    preempts = [x for x in decisions if isinstance(x, d.Preempt) and not x.observe_only]
    kill_decisions = [x for x in decisions if isinstance(x, d.Kill)]
    assert preempts and kill_decisions
    values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line[:1] != "#"}
    final = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in counted.splitlines() if line[:1] != "#"}

    def total(name: str, role: str, queue: str | None = None) -> float:
        return sum(
            v
            for k, v in final.items()
            if k.startswith(name + "{") and f'role="{role}"' in k and (queue is None or f'queue="{queue}"' in k)
        )

    # The player stops reading at the feed's end; the core, stopped after it, may have preempted more:
    # the metrics add up to the audit trail, which holds every preemption the core made.
    audited = [r for r in caplog.records if r.name == "sniper.audit" and r.action == "preempt"]  # type: ignore[attr-defined]
    assert len(audited) >= len(preempts)
    assert total("sniper_queue_preempted_containers_total", "victim") == len(audited)
    assert total("sniper_queue_preempted_containers_total", "beneficiary") == len(audited)
    for queue in {x.queue for x in preempts}:
        taken = [x for x in preempts if x.queue == queue]
        assert total("sniper_queue_preempted_containers_total", "victim", queue) >= len(taken)
        memory = sum(x.resource.get("memory", 0) for x in taken) * 2**20
        assert total("sniper_queue_preempted_memory_bytes_total", "victim", queue) >= memory
    assert sum(v for k, v in values.items() if k.startswith("sniper_preemption_rounds_total{")) > 0
    assert 'sniper_masked_asks{partition="default",policy="sniper"}' in values
    assert any(k.startswith("sniper_asks_masked_total{") for k in values)
    audit = [r for r in caplog.records if r.name == "sniper.audit"]
    logged = [(r.action, r.victim, r.node, getattr(r, "beneficiary", ""), r.reason) for r in audit]  # type: ignore[attr-defined]
    causes: dict[str, d.Preempt] = {}  # an allocation can be preempted, spared, and preempted again
    for x in decisions:
        if isinstance(x, d.Preempt) and not x.observe_only:
            causes[x.allocation] = x
            assert ("preempt", x.allocation, x.node, f"{x.for_app}/{x.for_ask}", x.reason) in logged
        elif isinstance(x, d.Kill):
            cause = causes[x.allocation]
            assert ("kill", x.allocation, x.node, f"{cause.for_app}/{cause.for_ask}", x.reason) in logged
    assert all(r.levelno == logging.INFO for r in audit)
    for record in (r for r in audit if r.action == "kill"):  # type: ignore[attr-defined]
        line = StructuredFormatter("kv").format(record)
        assert "\n" not in line and f"victim={record.victim}" in line and "beneficiary=" in line  # type: ignore[attr-defined]


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord("sniper.actors", logging.WARNING, __file__, 1, "view gap after seq %d", (7,), None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_structured_logs_carry_partition_and_actor() -> None:
    line = StructuredFormatter("kv").format(_record(partition="p1", actor="allocator"))
    assert "partition=p1" in line and "actor=allocator" in line and 'msg="view gap after seq 7"' in line
    parsed = json.loads(StructuredFormatter("json").format(_record(partition="p 2", actor="cache")))
    assert parsed["partition"] == "p 2" and parsed["actor"] == "cache" and parsed["level"] == "warning"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _core_log(settings: KafkaSettings, port: int, *options: str) -> str:
    """Run ``sniper core`` (with ``options``) until its metrics endpoint answers on ``port``, stop it, and
    return its log."""
    from sniper.bench.e2e import start_core

    process = await start_core(settings, "levels", "--metrics-port", str(port), *options)
    stderr = process.stderr
    assert stderr is not None
    log = bytearray()

    async def read() -> None:
        async for chunk in stderr:
            log.extend(chunk)

    async with process, anyio.create_task_group() as tg:
        tg.start_soon(read)
        try:
            with anyio.fail_after(60):
                while True:  # the endpoint is up once the process has set up its logs and listens
                    try:
                        await anyio.to_thread.run_sync(scrape, port)
                        break
                    except OSError:
                        assert process.returncode is None, log.decode()
                        await anyio.sleep(0.05)
        finally:
            process.terminate()
            with anyio.fail_after(30):
                await process.wait()
    return log.decode()


@pytest.mark.kafka
async def test_the_log_level_is_a_flag_and_an_environment_variable(
    kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = _free_port()
    monkeypatch.setenv("SNIPER_LOG_LEVEL", "debug")
    chatty = await _core_log(kafka_settings, port)
    assert "level=debug" in chatty and "log_level=debug" in chatty  # the options, logged at start
    assert f"metrics on http://127.0.0.1:{port}/metrics" in chatty  # an INFO line
    quiet = await _core_log(kafka_settings, port, "--log-level", "warning")  # the flag wins over the variable
    assert "level=debug" not in quiet and "level=info" not in quiet


def test_a_bad_log_level_is_refused_from_the_flag_and_the_variable() -> None:
    runner = CliRunner()
    for args, env in ((["--log-level", "loud"], {}), ([], {"SNIPER_LOG_LEVEL": "loud"})):
        result = runner.invoke(app, ["core", *args], env={"COLUMNS": "200", **env})
        assert result.exit_code == 2, result.output
        assert "'debug', 'info', 'warning', 'error'" in result.output


def test_status_reads_the_port_a_core_serves_by_default() -> None:
    import typer

    group: Any = typer.main.get_command(app)
    core_port = next(p for p in group.commands["core"].params if p.name == "metrics_port").default
    status_url = next(p for p in group.commands["status"].params if p.name == "url").default
    assert core_port == 9101 and status_url == "http://127.0.0.1:9101"


def test_the_operations_page_names_every_metric_a_core_exports() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text(encoding="utf-8")
    metrics = CoreMetrics(CoreProcess(KafkaSettings(bootstrap="127.0.0.1:1")))
    families = [family for family in metrics.registry.collect() if family.name.startswith("sniper_")]
    assert len(families) > 30
    for family in families:
        exported = family.name + ("_total" if family.type == "counter" else "")
        assert re.search(rf"`{exported}[`{{]", page), exported


def test_the_metrics_port_is_checked_from_the_flag_and_the_variable() -> None:
    runner = CliRunner()
    for args, env in ((["--metrics-port", "70000"], {}), ([], {"SNIPER_METRICS_PORT": "70000"})):
        result = runner.invoke(app, ["core", *args], env={"COLUMNS": "200", **env})
        assert result.exit_code == 2, result.output
        assert "--metrics-port" in result.output and "65535" in result.output


@pytest.mark.kafka
async def test_many_concurrent_state_scrapes_share_one_build_per_interval_and_lists_are_capped_with_totals(
    kafka_settings: KafkaSettings,
) -> None:
    scrapes = 16
    with anyio.fail_after(60):
        async with KafkaBus(kafka_settings) as bus:
            reader = await read_decisions(bus)
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader.pump)
                process = CoreProcess(kafka_settings, CoreOptions(group="obs-state", tick=0.1))
                metrics = CoreMetrics(process, state_interval=3600.0, state_limit=2)
                port = metrics.serve(0, addr="127.0.0.1")
                bodies: list[str] = []
                try:
                    await tg.start(process.run)
                    for event in workload("p1", 3):
                        await bus.publish(FEED, "p1", event)
                    await reader.until(lambda _: len(reader.of(d.Allocated)) == 3)

                    async def scrape_state() -> None:
                        bodies.append(await anyio.to_thread.run_sync(scrape, port, "/ws/v1/state"))

                    async with anyio.create_task_group() as scrapers:
                        for _ in range(scrapes):
                            scrapers.start_soon(scrape_state)
                    builds_in_one_interval = metrics.state.builds
                    table = await anyio.to_thread.run_sync(status, port)
                    metrics.state.interval = 0.0  # the document is now always stale: the next request builds
                    await anyio.to_thread.run_sync(scrape, port, "/ws/v1/state")
                finally:
                    metrics.close()
                tg.cancel_scope.cancel()
    assert len(bodies) == scrapes and len(set(bodies)) == 1
    assert builds_in_one_interval == 1 and metrics.state.builds == 2
    document = json.loads(bodies[0])
    (part,) = document["partitions"]
    assert document["limit"] == 2
    assert [q["queue"] for q in part["queues"]] == ["root", "root.a"]  # three queues, two rows
    assert len(part["nodes"]) == 2
    assert part["totals"] == {
        "queues": 3,
        "nodes": 2,
        "reservations": 0,
        "node_reservations": 0,
        "preemptions_in_flight": 0,
        "recent_preemptions": 0,
    }
    assert part["queues"][1]["ideal"] is not None  # computed off the loop, filled in the rows served
    assert table.exit_code == 0, table.output
    assert "queues (first 2 of 3)" in table.output


def test_status_tables_are_in_human_units_and_keep_long_names_whole() -> None:
    """A GPU partition's state (base units, as the endpoint serves it) on a wide screen: every figure in
    human units, long names whole on their row whatever the width; a queue whose containers wait on a
    preemption reservation shows them pending, and on reservations."""
    from rich.console import Console

    from sniper.cli.kafka import render_state

    gib, long_name = 2**30, "root.research.vision-" + "x" * 150
    queue = {
        "queue": long_name,
        "state": "draining",
        "used": {"memory": 96 * gib, "vcore": 12.5, "gpu": 4},
        "guaranteed": {"memory": 320 * gib, "vcore": 48, "gpu": 8},
        "ideal": {"memory": 1536 * 2**20, "vcore": 0.5, "gpu-milli": 1.46},  # GPUs, as served
        "pending": {"gpu": 1},
        "reserved": {"memory": 4 * gib},  # containers waiting on a preemption reservation
        "max": None,
    }
    document = {
        "partitions": [
            {
                "name": "gpu",
                "epoch": 3,
                "now": 12.0,
                "capacity": {"memory": 2 * 2**40, "vcore": 256, "gpu": 16},
                "queues": [queue],
                "nodes": [{"node": "g1", "schedulable": True, "capacity": {"gpu": 8}, "allocated": {}}],
                "reservations": [],
                "node_reservations": [
                    {"reservation": "nr-1", "app": "a", "ask": "k", "node": "g1", "resource": {"gpu": 1}, "expires": 40}
                ],
                "preemptions_in_flight": [],
                "recent_preemptions": [],
            }
        ]
    }
    screen = Console(width=100_000, file=io.StringIO(), highlight=False)
    for table in render_state(document, 50):
        screen.print(table)
    text = screen.file.getvalue()  # type: ignore[attr-defined]
    assert "capacity 2 TiB, 256 cores, 16 GPUs" in text
    row = next(line for line in text.splitlines() if long_name in line)
    cells = [cell.strip() for cell in row.strip("│ ").split("│")]
    assert cells == [
        long_name,
        "draining",
        "96 GiB, 12.5 cores, 4 GPUs",
        "320 GiB, 48 cores, 8 GPUs",
        "1.5 GiB, 0.5 cores, 1.46 GPUs",
        "4 GiB, 1 GPU",  # pending counts what waits on a reservation too
        "4 GiB",
        "-",
    ]
    assert next(line for line in text.splitlines() if "│ g1 " in line).split("│")[4].strip() == "0"
    assert "nr-1" in text and "a/k" in text and "40.0" in text


def test_milli_gpus_are_exported_in_gpus_under_a_valid_metric_name() -> None:
    """``gpu-milli`` (a hyphen, no valid Prometheus name) is a gauge in GPUs; the count ``gpu`` keeps its label."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.registry import Collector

    from sniper.cluster.obs import METRIC_SUFFIXES, _QueueFamilies

    assert METRIC_SUFFIXES == {"memory": "_memory_bytes", "vcore": "_vcore_cores", "gpu-milli": "_gpu_milli_gpus"}
    used = _QueueFamilies("used", "Committed usage of a queue")
    used.add("p1", "root.a", {"gpu-milli": 1460, "gpu": 2})

    class Queues(Collector):
        def collect(self) -> Any:
            return used.families()

    registry = CollectorRegistry()
    registry.register(Queues())
    lines = set(generate_latest(registry).decode().splitlines())
    assert 'sniper_queue_used_gpu_milli_gpus{partition="p1",queue="root.a"} 1.46' in lines
    assert 'sniper_queue_used{partition="p1",queue="root.a",resource="gpu"} 2.0' in lines


def test_status_prints_names_with_control_characters_escaped() -> None:
    """A queue, node and reason holding ESC, BEL and a right-to-left override reach the status screen as
    escapes: not one control character is printed, and the names are still readable."""
    from rich.console import Console

    from sniper.cli.kafka import render_state

    document = {
        "partitions": [
            {
                "name": "p\x1b[2J",
                "epoch": 1,
                "now": 1.0,
                "capacity": {"memory": 2**30},
                "queues": [
                    {"queue": "root.\x1b[31mred", "used": {}, "guaranteed": {}, "ideal": {}, "pending": {}, "max": None}
                ],
                "nodes": [{"node": "n\x07", "schedulable": True, "capacity": {}, "allocated": {}}],
                "reservations": [],
                "preemptions_in_flight": [],
                "recent_preemptions": [
                    {
                        "t": 1.0,
                        "allocation": "a\u202e",
                        "queue": "root.q",
                        "node": "n",
                        "for_app": "b",
                        "for_queue": "root.b",
                        "reason": "x\x1bc",
                    }
                ],
            }
        ]
    }
    screen = Console(width=400, file=io.StringIO(), highlight=False, color_system=None)
    for table in render_state(document, 50):
        screen.print(table)
    text = screen.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "root.\\x1b[31mred" in text and "n\\x07" in text and "a\\u202e" in text and "x\\x1bc" in text


def test_a_log_value_with_control_characters_is_quoted_and_escaped() -> None:
    line = StructuredFormatter("kv").format(_record(partition="p\x1b[2J", actor="cache"))
    assert line.isprintable() and 'partition="p\\u001b[2J"' in line


async def test_the_loop_lag_histogram_counts_a_step_that_held_the_event_loop() -> None:
    from prometheus_client import CollectorRegistry

    from sniper.cluster.timings import CoreHistograms, watch_loop_lag

    registry = CollectorRegistry()
    lag = CoreHistograms(registry).loop_lag

    def sample(name: str) -> float:
        return registry.get_sample_value(f"sniper_event_loop_lag_seconds_{name}") or 0.0

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_loop_lag, lag, 0.001)
            await anyio.wait_all_tasks_blocked()  # the probe waits on its timer
            time.sleep(0.3)  # noqa: ASYNC251 - the step that holds the loop, what the probe must see
            while sample("count") < 1:
                await anyio.lowlevel.checkpoint()
            tg.cancel_scope.cancel()
    assert sample("sum") >= 0.29  # the probe woke at least that late


async def test_the_longest_hold_is_kept_in_cpu_seconds_of_the_step_that_held_the_loop() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from sniper.bench.bigpartition import longest_hold_cpu
    from sniper.cluster.timings import CoreHistograms, watch_loop_lag

    registry = CollectorRegistry()
    timings = CoreHistograms(registry)
    assert longest_hold_cpu(generate_latest(registry).decode()) == 0.0  # no hold yet
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_loop_lag, timings.loop_lag, 0.001, timings.longest_hold_cpu)
            await anyio.wait_all_tasks_blocked()  # the probe waits on its timer
            began = time.process_time()
            while time.process_time() - began < 0.3:  # a step that holds the loop for 0.3 CPU seconds
                pass
            while (registry.get_sample_value("sniper_event_loop_lag_seconds_count") or 0.0) < 1:
                await anyio.lowlevel.checkpoint()
            tg.cancel_scope.cancel()
    assert longest_hold_cpu(generate_latest(registry).decode()) >= 0.3


def test_the_big_partition_bench_reads_the_loop_lag_p99_and_the_highest_bucket_from_a_core_page() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from sniper.bench.bigpartition import loop_lag
    from sniper.cluster.timings import CoreHistograms

    registry = CollectorRegistry()
    lag = CoreHistograms(registry).loop_lag
    assert all(math.isnan(x) for x in loop_lag(generate_latest(registry).decode()))  # nothing observed yet
    for _ in range(980):
        lag.observe(0.0004)
    for _ in range(19):
        lag.observe(0.2)
    lag.observe(3.0)
    assert loop_lag(generate_latest(registry).decode()) == (0.25, 5.0)
