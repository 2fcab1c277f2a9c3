"""The Kafka commands of the ``sniper`` CLI: broker, core, feed, record and ``bench e2e``.

They register on the main typer app of :mod:`sniper.cli.app`. A thin shell like the rest of the
CLI: it parses flags, builds :class:`~sniper.transport.kafka.KafkaSettings` (flags, then ``SNIPER_KAFKA_*``),
starts the embedded broker when no bootstrap is given and runs the asyncio program on uvloop. Errors
become exit codes in :mod:`sniper.cli.app` (1 invariant violated, 2 bad input, 3 a runtime failure:
no broker within ``--connect-timeout``, a port in use, no core answering the feed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import msgspec
import typer

from sniper.cli.app import (
    EXIT_INVARIANT,
    EXIT_RUNTIME,
    LogFormat,
    LogLevel,
    Role,
    WireFormat,
    app,
    bench_app,
    console,
    decided_nothing,
    fail,
    literal,
    load_inputs,
    print_config_warnings,
    print_table,
    rejections,
    running_failure,
    setup_logging,
    shared_options,
    show_rejections,
    tune_gc,
)

if TYPE_CHECKING:
    from sniper.transport.kafka import KafkaSettings

T = TypeVar("T")
_UNWRAPPED = 100_000  # columns of a table printed to a pipe or a file: as wide as its rows
DEFAULT_METRICS_PORT = 9101  # what ``sniper core`` serves metrics and state on, and ``sniper status`` reads

Bootstrap = Annotated[
    str | None,
    typer.Option(help="Kafka bootstrap HOST:PORT (default: $SNIPER_KAFKA_BOOTSTRAP, else an embedded broker)"),
]
Prefix = Annotated[str | None, typer.Option(help="topic name prefix (default sniper.; env SNIPER_KAFKA_PREFIX)")]
Partitions = Annotated[int | None, typer.Option("--kafka-partitions", help="partitions of topics it creates")]
SecurityProtocol = Annotated[
    str | None, typer.Option(help="PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL (env SNIPER_KAFKA_SECURITY_PROTOCOL)")
]
SaslMechanism = Annotated[str | None, typer.Option(help="PLAIN|SCRAM-SHA-256|SCRAM-SHA-512")]
Username = Annotated[str | None, typer.Option(help="SASL user (env SNIPER_KAFKA_USERNAME)")]
Password = Annotated[str | None, typer.Option(help="SASL password (prefer env SNIPER_KAFKA_PASSWORD)")]
CaFile = Annotated[Path | None, typer.Option(help="TLS CA bundle")]
CertFile = Annotated[Path | None, typer.Option(help="TLS client certificate")]
KeyFile = Annotated[Path | None, typer.Option(help="TLS client key")]
MaxMessage = Annotated[int | None, typer.Option(help="largest record in bytes (topics and clients)")]
SessionTimeout = Annotated[int | None, typer.Option(help="consumer-group session timeout (ms)")]
ConnectTimeout = Annotated[
    float | None, typer.Option(min=0.1, help="give up when no broker answers within this many seconds (default 30)")
]
AsJson = Annotated[bool, typer.Option("--json", help="one JSON object on stdout instead of a table")]
FeedFormat = Annotated[
    WireFormat,
    typer.Option(
        "--format",
        case_sensitive=False,
        help="how the feed's records are encoded (each record's content-type header names it)",
    ),
]


# The Kafka connection flags every feed-facing command takes (parameter, its option, KafkaSettings field).
_KAFKA_FLAGS: tuple[tuple[str, Any, str], ...] = (
    ("prefix", Prefix, "prefix"),
    ("kafka_partitions", Partitions, "partitions"),
    ("security_protocol", SecurityProtocol, "security_protocol"),
    ("sasl_mechanism", SaslMechanism, "sasl_mechanism"),
    ("username", Username, "username"),
    ("password", Password, "password"),
    ("ssl_cafile", CaFile, "ssl_cafile"),
    ("ssl_certfile", CertFile, "ssl_certfile"),
    ("ssl_keyfile", KeyFile, "ssl_keyfile"),
    ("max_message_bytes", MaxMessage, "max_message_bytes"),
    ("session_timeout_ms", SessionTimeout, "session_timeout_ms"),
    ("connect_timeout", ConnectTimeout, "connect_timeout"),
)


def _settings_fields(given: Mapping[str, Any]) -> dict[str, Any]:
    """The Kafka flags given (not None), keyed by KafkaSettings field; paths as text."""
    fields = {field: given[name] for name, _, field in _KAFKA_FLAGS if given[name] is not None}
    return {k: str(v) if isinstance(v, Path) else v for k, v in fields.items()}


with_kafka_flags = shared_options("kafka_flags", [(n, option, None) for n, option, _ in _KAFKA_FLAGS], _settings_fields)


@contextlib.asynccontextmanager
async def _connect(bootstrap: str | None, flags: Mapping[str, Any]) -> AsyncIterator[KafkaSettings]:
    """The command's settings: flags, then ``SNIPER_KAFKA_*``; an embedded broker for the duration if no
    bootstrap is given or set."""
    from sniper.cluster.kafka_env import bootstrap_or_embedded, build_settings

    async with bootstrap_or_embedded(bootstrap, announce=lambda text: console.print(literal(text))) as (
        address,
        embedded,
    ):
        yield build_settings(address, embedded=embedded, **flags)


def _run(main: Any) -> Any:
    import anyio

    return anyio.run(main, backend="asyncio", backend_options={"use_uvloop": True})


async def _until_signal() -> None:
    """Return on SIGINT or SIGTERM."""
    import anyio

    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return


async def _until_signal_or(work: Callable[[], Awaitable[T]]) -> T | None:
    """What ``work()`` returns, or None if SIGINT or SIGTERM cancelled it first."""
    import anyio

    result: T | None = None
    async with anyio.create_task_group() as tg:

        async def stop_on_signal() -> None:
            await _until_signal()
            tg.cancel_scope.cancel()

        tg.start_soon(stop_on_signal)
        result = await work()
        tg.cancel_scope.cancel()
    return result


@app.command("broker")
def broker(
    port: Annotated[int | None, typer.Option(help="port to listen on (default: a free one)")] = None,
    host: Annotated[str, typer.Option(help="address to listen on and advertise")] = "127.0.0.1",
    prefix: Prefix = None,
    kafka_partitions: Partitions = None,
) -> None:
    """Run the embedded Kafka-compatible broker (tansu, in-memory) in the foreground until Ctrl-C.

    Sniper's topics are created (``--prefix``, ``--kafka-partitions`` or ``SNIPER_KAFKA_*``, as the cores
    read them) before the address is printed: a producer that would auto-create the feed with the
    broker's own partition count finds it made already.
    """
    from sniper.cluster.kafka_env import build_settings
    from sniper.transport.broker import EmbeddedBroker
    from sniper.transport.kafka import KafkaBus

    async def main() -> None:
        async with EmbeddedBroker(host=host, port=port) as embedded:
            settings = build_settings(embedded.bootstrap, embedded=True, prefix=prefix, partitions=kafka_partitions)
            async with KafkaBus(settings) as bus:
                await bus.ensure_topics()
            sys.stdout.write(f"{embedded.bootstrap}\n")
            sys.stdout.flush()
            console.print(
                literal(
                    f"embedded broker listening on {embedded.bootstrap} (storage in memory), topics "
                    f"{settings.prefix}* created with {settings.partitions} partitions; Ctrl-C stops it\n"
                    f"  export SNIPER_KAFKA_BOOTSTRAP={embedded.bootstrap}"
                )
            )
            await _until_signal()

    with contextlib.suppress(KeyboardInterrupt):
        _run(main)


@app.command("core")
@with_kafka_flags
def core(
    bootstrap: Bootstrap = None,
    role: Annotated[Role, typer.Option(help="which actors this process runs")] = Role.all,
    group: Annotated[str, typer.Option(help="consumer group of the core processes")] = "sniper-core",
    queues: Annotated[Path | None, typer.Option(help="queues.yaml: partitions configured up front")] = None,
    metrics_port: Annotated[
        int,
        typer.Option(
            min=0,
            max=65535,
            envvar="SNIPER_METRICS_PORT",
            help="serve Prometheus metrics and /ws/v1/state on this port (0: no endpoint)",
        ),
    ] = DEFAULT_METRICS_PORT,
    metrics_address: Annotated[str, typer.Option(help="address the metrics endpoint listens on")] = "127.0.0.1",
    state_interval: Annotated[
        float,
        typer.Option(min=0.0, help="seconds /ws/v1/state serves one document before the next request builds another"),
    ] = 2.0,
    state_limit: Annotated[
        int, typer.Option(min=1, help="rows of each list of /ws/v1/state (totals count them all)")
    ] = 500,
    tick: Annotated[float, typer.Option(help="seconds between clock ticks")] = 0.5,
    snapshot_interval: Annotated[float, typer.Option(help="seconds between snapshots of a busy partition")] = 5.0,
    snapshot_every: Annotated[int, typer.Option(help="decisions between snapshots (at least the state's size)")] = 1000,
    max_partitions: Annotated[
        int,
        typer.Option(
            help="scheduler partitions this process hosts at most (records of more are dead-lettered; one that "
            "holds nothing, retired or never configured, gives its place)"
        ),
    ] = 256,
    decisions_format: Annotated[
        WireFormat,
        typer.Option(
            case_sensitive=False,
            envvar="SNIPER_DECISIONS_FORMAT",
            help="how decisions are published (each record's content-type header names it); feed records are "
            "read in either format",
        ),
    ] = WireFormat.msgpack,
    log_format: Annotated[LogFormat, typer.Option(help="log line format")] = LogFormat.kv,
    log_level: Annotated[
        LogLevel,
        typer.Option(
            case_sensitive=False,
            envvar="SNIPER_LOG_LEVEL",
            help="least severe log records written (info: the audit trail of preemptions and kills)",
        ),
    ] = LogLevel.info,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="the same as --log-level debug")] = False,
    *,
    kafka_flags: Mapping[str, Any],
) -> None:
    """Run one scheduler-core process: it joins the group and hosts the partitions Kafka assigns it."""
    from sniper.cluster.obs import CoreMetrics, setup_logging
    from sniper.cluster.process import CoreOptions
    from sniper.cluster.roles import core_process
    from sniper.core.config import load_config

    setup_logging(log_format.value, logging.DEBUG if verbose else log_level.level)
    config = load_config(queues) if queues is not None else None
    print_config_warnings(config, ())
    options = CoreOptions(
        group=group,
        role=role.value,
        config=config,
        tick=tick,
        snapshot_interval=snapshot_interval,
        snapshot_every=snapshot_every,
        max_partitions=max_partitions,
    )
    logging.getLogger("sniper.core").debug(
        "core options: %s", options, extra={"log_level": "debug" if verbose else log_level.value}
    )

    async def main() -> None:
        tune_gc()
        async with _connect(bootstrap, kafka_flags) as connected:
            settings = dataclasses.replace(connected, decisions_format=decisions_format.value)
            process = core_process(settings, options)
            metrics = None
            if metrics_port:
                metrics = CoreMetrics(process, state_interval=state_interval, state_limit=state_limit)
                port = metrics.serve(metrics_port, addr=metrics_address)
                logging.getLogger("sniper.core").info(
                    "metrics on http://%s:%d/metrics, state on /ws/v1/state", metrics_address, port
                )
            try:
                await _until_signal_or(process.run)
            except Exception as err:
                failure = running_failure(err)
                if failure is None:
                    raise
                raise failure from err
            finally:
                if metrics is not None:
                    metrics.close()

    with contextlib.suppress(KeyboardInterrupt):
        _run(main)


@app.command("feed")
@with_kafka_flags
def feed(
    trace: Annotated[Path, typer.Argument(help="JSON Lines trace, or a bundled scenario name")],
    bootstrap: Bootstrap = None,
    speed: Annotated[float, typer.Option(help="trace seconds per wall second")] = 1.0,
    queues: Annotated[Path | None, typer.Option(help="queues.yaml the cores use (for the report)")] = None,
    report: Annotated[Path | None, typer.Option(help="write the JSON report here")] = None,
    until: Annotated[float | None, typer.Option(help="stop at this trace second")] = None,
    drain: Annotated[float, typer.Option(help="after the trace, stop after this many quiet wall seconds")] = 10.0,
    seed: Annotated[int, typer.Option(min=0, help="seed of a bundled scenario")] = 0,
    answer_timeout: Annotated[
        float, typer.Option(min=0.1, help="fail when no core decides anything within this many wall seconds")
    ] = 30.0,
    show: Annotated[bool, typer.Option("--show-rejections", help="list every rejected event with its reason")] = False,
    feed_format: FeedFormat = WireFormat.msgpack,
    as_json: AsJson = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="log details on stderr")] = False,
    *,
    kafka_flags: Mapping[str, Any],
) -> None:
    """Replay a trace onto the feed in scaled real time and play the resource manager (exit 1 on a violation)."""
    from sniper.resource_manager.feed import PlayOptions, play
    from sniper.simulator.ideal_view import ideal_for_model

    if verbose:
        setup_logging(True)

    events, config, source = load_inputs(trace, queues, seed)
    options = PlayOptions(speed=speed, until=until, drain=drain, answer_timeout=answer_timeout)

    async def main() -> Any:
        async with _connect(bootstrap, {**kafka_flags, "feed_format": feed_format.value}) as settings:
            console.print(literal(f"feeding {source}: {len(events)} events at x{speed:g} to {settings.bootstrap}"))
            return await play(settings, events, options, config=config, ideal_fn=ideal_for_model)

    result = _run(main)
    decisions = result.checker.decisions()
    summary = result.summary
    summary.rejections = rejected = rejections(decisions)
    if as_json:
        sys.stdout.write(msgspec.json.encode(summary).decode() + "\n")
    else:
        rows = {
            "published": summary.extra.get("published"),
            "decisions": summary.decisions,
            "allocations": summary.allocations,
            "preemptions": summary.preemptions.victims,
            "kills": summary.counts.get("Kill", 0),
            "rejected": summary.rejected,
            "pending_at_end": summary.pending_at_end,
            "invariant_violations": summary.invariant_violations,
        }
        print_table(f"sniper feed: {source}", rows)
    show_rejections(rejected, show)
    if report is not None:
        report.write_bytes(msgspec.json.format(msgspec.json.encode(summary), indent=2) + b"\n")
        console.print(literal(f"report written to {report}"))
    if result.unanswered:  # first: what went unanswered explains the violations it leaves behind
        lost = sum(result.unanswered.values())
        parts = ", ".join(sorted(result.unanswered))
        fail(
            f"no core answered partition(s) {parts} within --drain {drain:g}s ({lost} event(s) published to them)",
            EXIT_RUNTIME,
        )
    if result.violations:
        console.print(literal(f"{result.violations} invariant violation(s)", "red"))
        raise typer.Exit(EXIT_INVARIANT)
    decided_nothing(decisions, events, rejected, show)


@app.command("record")
@with_kafka_flags
def record(
    bootstrap: Bootstrap = None,
    out: Annotated[Path, typer.Option("--out", help="JSON Lines trace to write")] = Path("recorded.jsonl"),
    duration: Annotated[float | None, typer.Option(help="stop after this many wall seconds")] = None,
    from_beginning: Annotated[bool, typer.Option(help="start at the oldest record, not the next one")] = False,
    *,
    kafka_flags: Mapping[str, Any],
) -> None:
    """Write the feed as it passes to a JSON Lines trace (trace seconds from the first event's ``t``)."""
    from sniper.resource_manager.feed import record as run_record

    async def main() -> int:
        async with _connect(bootstrap, kafka_flags) as settings:
            count = await _until_signal_or(
                lambda: run_record(settings, out, duration=duration, from_beginning=from_beginning)
            )
            return count or 0

    count = _run(main)
    console.print(literal(f"recorded {count} events to {out}"))


@bench_app.command("e2e")
def bench_e2e(
    bootstrap: Bootstrap = None,
    events: Annotated[int, typer.Option(help="asks to publish")] = 20_000,
    rate: Annotated[float, typer.Option(help="events/s to publish at (0: as fast as possible)")] = 0.0,
    partitions: Annotated[int, typer.Option(help="scheduler partitions")] = 8,
    cores: Annotated[int, typer.Option(help="core processes of the scale-out run (1: no scale-out run)")] = 2,
    kafka_partitions: Annotated[int, typer.Option(help="Kafka partitions per topic")] = 8,
    core_cpus: Annotated[
        float | None, typer.Option(help="cap each core process at this many CPUs (a cgroup; Linux, root)")
    ] = None,
    feed_format: FeedFormat = WireFormat.msgpack,
    decisions_format: Annotated[
        WireFormat, typer.Option(case_sensitive=False, help="how the cores publish their decisions")
    ] = WireFormat.msgpack,
    as_json: AsJson = False,
    connect_timeout: ConnectTimeout = None,
) -> None:
    """Feed-event-to-decision latency and events/s through the broker; scale-out with more core processes."""
    kafka_flags: dict[str, Any] = {"feed_format": feed_format.value, "decisions_format": decisions_format.value}
    if connect_timeout is not None:
        kafka_flags["connect_timeout"] = connect_timeout
    import json

    from sniper.bench.e2e import bench_e2e as run_bench

    if events < 1 or partitions < 1 or cores < 1 or rate < 0:
        fail("events, partitions and cores must be at least 1, rate at least 0")
    if core_cpus is not None and core_cpus < 0.01:
        fail("--core-cpus must be at least 0.01")

    async def main() -> Any:
        async with _connect(bootstrap, kafka_flags) as settings:
            return await run_bench(
                settings, events=events, rate=rate, partitions=partitions, cores=cores, core_cpus=core_cpus
            )

    result = _run(main)
    if as_json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        print_table("bench e2e", result)


@bench_app.command("bigpartition")
@with_kafka_flags
def bench_bigpartition(
    bootstrap: Bootstrap = None,
    apps: Annotated[int, typer.Option(min=1, help="apps, each with one single-container ask")] = 100_000,
    nodes: Annotated[int, typer.Option(min=1, help="nodes, with room for every ask")] = 100,
    limit: Annotated[float, typer.Option(min=1.0, help="seconds to wait for every placement")] = 900.0,
    as_json: AsJson = False,
    *,
    kafka_flags: Mapping[str, Any],
) -> None:
    """One partition of many apps built through a core subprocess: placement time, loop lag p99, RSS."""
    import json

    from sniper.bench.bigpartition import bench_bigpartition as run_bench

    async def main() -> Any:
        async with _connect(bootstrap, kafka_flags) as settings:
            return await run_bench(settings, apps=apps, nodes=nodes, limit=limit)

    result = _run(main)
    if as_json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        print_table("bench bigpartition", result)


def _human(value: Mapping[str, float] | None) -> str:
    """A resource of the state document (base units) in human units."""
    from sniper.core.units import from_base_units, human_resource

    if value is None:
        return "-"
    return human_resource({name: from_base_units(name, amount) for name, amount in value.items()}, empty="0")


def _waiting(queue: Mapping[str, Any]) -> dict[str, float]:
    """What a queue's asks wait for: pending, and the containers waiting on a preemption reservation."""
    waiting = dict(queue["pending"] or {})
    for name, amount in (queue.get("reserved") or {}).items():
        waiting[name] = waiting.get(name, 0) + amount
    return waiting


def _rows_table(title: str, columns: list[str], rows: list[list[str]], limit: int, total: int | None = None) -> Any:
    """A table of the first ``limit`` rows; ``total``: how many the core counted (it may serve fewer)."""
    from rich.table import Table

    whole = max(len(rows), total or 0)
    shown = min(limit, len(rows))
    table = Table(title=literal(title if shown == whole else f"{title} (first {shown} of {whole})"))
    for column in columns:
        table.add_column(column)
    for row in rows[:limit]:
        table.add_row(*map(literal, row))
    return table


def render_state(document: Mapping[str, Any], limit: int) -> list[Any]:
    """The tables ``sniper status`` prints for a ``/ws/v1/state`` document, resources in human units."""
    tables: list[Any] = []
    for part in document["partitions"]:
        totals = part.get("totals") or {}
        name = f"partition {part['name']} (epoch {part['epoch']}, time {part['now']:.1f} s)"
        name += f", capacity {_human(part['capacity'])}"
        queue_rows = [
            [
                q["queue"],
                q.get("state", "running"),
                *(_human(q[k]) for k in ("used", "guaranteed", "ideal")),
                _human(_waiting(q)),
                _human(q.get("reserved")),
                _human(q["max"]),
            ]
            for q in part["queues"]
        ]
        node_rows = [
            [n["node"], "yes" if n["schedulable"] else "no", *(_human(n[k]) for k in ("capacity", "allocated"))]
            for n in part["nodes"]
        ]
        reservation_rows = [
            [r["reservation"], f"{r['app']}/{r['ask']}", r["node"], _human(r["resource"]), str(len(r["victims"]))]
            for r in part["reservations"]
        ]
        node_reservation_rows = [
            [r["reservation"], f"{r['app']}/{r['ask']}", r["node"], _human(r["resource"]), f"{r['expires']:.1f}"]
            for r in part.get("node_reservations", [])
        ]
        flight_rows = [
            [a["allocation"], a["queue"], a["node"], _human(a["resource"]), f"{a['deadline']:.1f}"]
            for a in part["preemptions_in_flight"]
        ]
        recent_rows = [
            [f"{x['t']:.1f}", x["allocation"], x["queue"], x["node"], f"{x['for_app']} ({x['for_queue']})", x["reason"]]
            for x in reversed(part["recent_preemptions"])
        ]
        tables += [
            _rows_table(
                f"{name}: queues",
                ["queue", "state", "used", "guaranteed", "ideal", "pending", "on reservations", "max"],
                queue_rows,
                limit,
                totals.get("queues"),
            ),
            _rows_table(
                "nodes", ["node", "schedulable", "capacity", "allocated"], node_rows, limit, totals.get("nodes")
            ),
            _rows_table(
                "reservations",
                ["reservation", "for", "node", "resource", "victims"],
                reservation_rows,
                limit,
                totals.get("reservations"),
            ),
            _rows_table(
                "node reservations",
                ["reservation", "for", "node", "resource", "expires"],
                node_reservation_rows,
                limit,
                totals.get("node_reservations"),
            ),
            _rows_table(
                "preemptions in flight",
                ["allocation", "queue", "node", "resource", "deadline"],
                flight_rows,
                limit,
                totals.get("preemptions_in_flight"),
            ),
            _rows_table(
                "last preemptions",
                ["t", "allocation", "queue", "node", "for", "reason"],
                recent_rows,
                limit,
                totals.get("recent_preemptions"),
            ),
        ]
    return tables


@app.command("status")
def status(
    url: Annotated[
        str, typer.Option(help="a core's metrics endpoint; /ws/v1/state is added when the URL has no path")
    ] = f"http://127.0.0.1:{DEFAULT_METRICS_PORT}",
    limit: Annotated[int, typer.Option(min=1, help="rows shown per table")] = 50,
    timeout: Annotated[float, typer.Option(min=0.1, help="seconds to wait for the answer")] = 10.0,
    as_json: AsJson = False,
) -> None:
    """Print a core's state (queues, nodes, reservations, preemptions) from its /ws/v1/state endpoint.

    Tables use the terminal's whole width (piped, they are never wrapped), resources in human units;
    ``--json`` prints the document as the core serves it, in base units (bytes, cores, counts).
    """
    import json
    import urllib.error
    import urllib.parse
    import urllib.request

    from rich.console import Console

    from sniper.cli.app import EXIT_RUNTIME, out
    from sniper.cluster.obs import STATE_PATH

    target = url if urllib.parse.urlsplit(url).path not in ("", "/") else url.rstrip("/") + STATE_PATH
    if urllib.parse.urlsplit(target).scheme not in ("http", "https"):
        fail(f"--url {url!r} is not an http(s) URL")
    try:
        with urllib.request.urlopen(target, timeout=timeout) as response:
            document = json.loads(response.read())
    except urllib.error.HTTPError as err:
        fail(f"{target} answered {err.code} {err.reason}", EXIT_RUNTIME)
    except (urllib.error.URLError, TimeoutError) as err:
        reason = err.reason if isinstance(err, urllib.error.URLError) else err
        fail(
            f"cannot reach {target}: {reason}; is a `sniper core` serving metrics there (--metrics-port)?", EXIT_RUNTIME
        )
    except ValueError:
        fail(f"{target} did not answer with JSON: is it a Sniper core's metrics port?", EXIT_RUNTIME)
    if not isinstance(document, dict) or not isinstance(document.get("partitions"), list):
        fail(f"{target} did not answer with a Sniper state document", EXIT_RUNTIME)
    if as_json:
        sys.stdout.write(json.dumps(document) + "\n")
        return
    if not document["partitions"]:
        console.print("the core hosts no partition yet")
    screen = out if out.is_terminal else Console(highlight=False, width=_UNWRAPPED)
    for table in render_state(document, limit):
        screen.print(table)
