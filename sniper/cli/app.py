"""The ``sniper`` typer application and what every command shares: the app and its ``bench`` group,
the consoles (tables to stdout, progress and errors to stderr), logging set-up, the garbage collector
of a process that runs the core, the choices a flag
takes, how a trace or a bundled scenario is loaded, and the one place that turns an exception into
an exit code. Commands live in :mod:`sniper.cli.sim`, :mod:`sniper.cli.kafka` and
:mod:`sniper.cli.importing`.

Invariants: an operational error prints one line on stderr (what is wrong, what to do) and exits 2
(usage or input) or 3 (a runtime failure), never a traceback; exit 1 means an invariant was violated.
Names are data and may look like rich markup (``[/]``) or hold terminal control characters: text that
holds names is printed through :func:`literal`, never parsed as markup, its control characters escaped.
"""

from __future__ import annotations

import enum
import errno
import functools
import inspect
import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import msgspec
import typer
import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from sniper import collector
from sniper.core.config import ConfigError, SchedulerConfig, load_config, parse_partition
from sniper.core.printable import printable
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages.codec import BadInput, read_trace

EXIT_INVARIANT = 1
EXIT_INPUT = 2
EXIT_RUNTIME = 3


class CliError(Exception):
    """An operational error: one line for stderr and the exit code (2 input, 3 runtime)."""

    def __init__(self, message: str, code: int = EXIT_INPUT) -> None:
        super().__init__(message)
        self.code = code


class RunningFailure(Exception):
    """An error out of a command that was running (``sniper core`` serving its partitions), raised from
    it: bad records are dead-lettered there, never raised, so whatever escapes is an internal error,
    whatever its type (a ``ValueError`` inside is no bad input of the command)."""


def fail(message: str, code: int = EXIT_INPUT) -> NoReturn:
    raise CliError(message, code)


def _leaf(err: BaseException) -> BaseException:
    """The first real error inside (possibly nested) exception groups from task groups."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return err


def explain(err: BaseException) -> tuple[int, str]:
    """The exit code and the one line an operator sees for ``err``."""
    from aiokafka.errors import KafkaConnectionError

    from sniper.bench.cpulimit import CpuLimitUnavailable
    from sniper.cluster.obs import MetricsServeError
    from sniper.resource_manager.feed import NoAnswer
    from sniper.transport.broker import BrokerStartError
    from sniper.transport.kafka import KafkaConnectTimeout, KafkaSecurityFailure, KafkaTransportError
    from sniper.transport.layout import TopicLayoutError

    err = _leaf(err)
    if isinstance(err, RunningFailure) and err.__cause__ is not None:
        return _internal(_leaf(err.__cause__))
    if isinstance(err, CliError):
        return err.code, str(err)
    if isinstance(err, FileNotFoundError):
        return EXIT_INPUT, f"no such file: {err.filename or err}"
    if isinstance(err, IsADirectoryError | NotADirectoryError | PermissionError):
        return EXIT_INPUT, f"cannot use {err.filename}: {err.strerror}"
    if isinstance(err, CpuLimitUnavailable):  # --core-cpus on a machine that cannot cap: usage
        return EXIT_INPUT, str(err)
    if isinstance(err, ConfigError | msgspec.DecodeError | msgspec.ValidationError | yaml.YAMLError):
        return EXIT_INPUT, f"invalid input: {err}"
    if isinstance(err, KafkaSecurityFailure):
        return EXIT_RUNTIME, f"{err}; check --security-protocol, the TLS files and the SASL credentials"
    if isinstance(err, BrokerStartError | MetricsServeError | KafkaConnectTimeout | NoAnswer | TopicLayoutError):
        return EXIT_RUNTIME, str(err)
    if isinstance(err, KafkaTransportError):  # e.g. the broker lost its log (LogLost)
        return EXIT_RUNTIME, f"{err}; this process stops so that a supervisor restarts it"
    if isinstance(err, KafkaConnectionError | ConnectionError):
        return EXIT_RUNTIME, f"cannot reach Kafka: {err}; check --bootstrap / SNIPER_KAFKA_BOOTSTRAP"
    if isinstance(err, OSError) and err.errno == errno.EADDRINUSE:
        return EXIT_RUNTIME, f"address in use: {err}; choose another port"
    if isinstance(err, ValueError):
        return EXIT_INPUT, f"invalid input: {err}"
    if isinstance(err, OSError):
        return EXIT_RUNTIME, f"{err.strerror or err}" + (f": {err.filename}" if err.filename else "")
    return _internal(err)


def _internal(err: BaseException) -> tuple[int, str]:
    return (
        EXIT_RUNTIME,
        f"internal error ({type(err).__name__}: {err}); run it as `sniper -v COMMAND ...` for details and report it",
    )


def running_failure(err: BaseException) -> RunningFailure | None:
    """What to raise, from ``err``, for an error that escaped a running command: ``None`` when
    :func:`explain` calls it a runtime failure already, else a :class:`RunningFailure` (never bad input)."""
    return None if explain(err)[0] == EXIT_RUNTIME else RunningFailure()


class SniperGroup(TyperGroup):
    """The app's command group: every command runs inside :meth:`invoke`, so errors are mapped here."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        except Exception as err:  # the one place an exception becomes an exit code
            code, message = explain(err)
            # The details at DEBUG: shown with -v, never by a command that logs at INFO (a core).
            logging.getLogger("sniper.cli").debug("command failed", exc_info=err)
            console.print(literal(f"error: {message}", "red"))
            raise typer.Exit(code) from None


app = typer.Typer(
    cls=SniperGroup,
    rich_markup_mode=None,  # usage errors as two plain lines, not a box
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Sniper: a scheduler core with sniper preemption. Exit codes: 0 fine, 1 an invariant was violated, "
    "2 bad input or usage, 3 a runtime failure.",
)
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (print figures; never assert).")
app.add_typer(bench_app, name="bench")


def _print_version(given: bool) -> None:
    if given:
        from sniper import __version__

        sys.stdout.write(f"sniper {__version__}\n")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="print the version and exit"),
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="log details on stderr, a failed command's traceback among them")
    ] = False,
) -> None:
    """Options of ``sniper`` itself (before the command)."""
    if verbose:
        setup_logging(True)


console = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False)


def literal(text: object, style: str = "") -> Text:
    """``text`` as rich prints it, character for character, control characters escaped
    (:func:`~sniper.core.printable.printable`): queue, node, app and event names are data."""
    return Text(printable(str(text)), style=style)


class Policy(enum.StrEnum):
    sniper = "sniper"
    proportional = "proportional"
    none = "none"


class Role(enum.StrEnum):
    all = "all"
    cache = "cache"
    allocator = "allocator"
    policy = "policy"


class LogFormat(enum.StrEnum):
    kv = "kv"
    json = "json"


class WireFormat(enum.StrEnum):
    msgpack = "msgpack"
    json = "json"


class SchemaKind(enum.StrEnum):
    feed = "feed"
    decisions = "decisions"


class LogLevel(enum.StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"

    @property
    def level(self) -> int:
        return logging.getLevelNamesMapping()[self.value.upper()]


class Transport(enum.StrEnum):
    memory = "memory"
    kafka = "kafka"


def tune_gc() -> None:
    """Garbage collection for a process that runs the core (``sniper core``, the simulator, the benches):
    :func:`sniper.collector.tune`. The simulator and the benches run the same core, so they run it the
    same way."""
    collector.tune()


class PrintableFormatter(logging.Formatter):
    """A log line whose message is written with its control characters escaped (names are data); a
    traceback after it keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))


def setup_logging(verbose: bool) -> None:
    """Log records on stderr: from INFO with ``verbose``, and a failed command's traceback (DEBUG on
    ``sniper.cli``); else from WARNING."""
    level = logging.INFO if verbose else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(PrintableFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    logging.getLogger().setLevel(level)  # also when something configured logging already
    logging.getLogger("sniper.cli").setLevel(logging.DEBUG if verbose else logging.NOTSET)


T = TypeVar("T")


def shared_options(
    target: str, options: Sequence[tuple[str, Any, Any]], fold: Callable[[Mapping[str, Any]], Any]
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Give a command options that several commands share, declared once.

    ``options`` are ``(parameter, Annotated typer option, default)``; the command declares only its own
    parameters plus a keyword-only ``target``, which receives ``fold({parameter: value})``.
    """

    def decorate(command: Callable[..., T]) -> Callable[..., T]:
        own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != target]
        added = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=option)
            for name, option, default in options
        ]

        @functools.wraps(command)
        def wrapper(**params: Any) -> T:
            folded = fold({name: params.pop(name) for name, _, _ in options})
            return command(**params, **{target: folded})

        wrapper.__signature__ = inspect.Signature([*own, *added])  # type: ignore[attr-defined]
        return wrapper

    return decorate


def print_bad(bad: Sequence[BadInput], kind: str) -> None:
    """Report skipped input lines (the first 20, then how many more)."""
    for problem in bad[:20]:
        console.print(literal(f"skipped {problem}", "yellow"))
    if len(bad) > 20:
        console.print(literal(f"... and {len(bad) - 20} more {kind} lines", "yellow"))


def print_table(title: str, rows: dict[str, Any]) -> None:
    """A two-column table (key, value) on stdout: what ``bench`` and ``feed`` print without ``--json``."""
    import json

    table = Table(title=literal(title))
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in rows.items():
        table.add_row(literal(key), literal(json.dumps(value) if isinstance(value, dict | list) else value))
    out.print(table)


def rejections(decisions: Iterable[d.DecisionMsg]) -> list[dict[str, str]]:
    """The rejected events and asks of a run, with their reasons (the report's ``rejections``)."""
    return [
        {"partition": x.partition, "event": x.event, "app": x.app, "ask": x.ask, "reason": x.reason}
        for x in decisions
        if isinstance(x, d.Rejected)
    ]


def show_rejections(items: list[dict[str, str]], show: bool) -> None:
    """List the rejections on stderr (``--show-rejections``), or say how to see them."""
    if not items:
        return
    if not show:
        console.print(literal(f"{len(items)} event(s) rejected: --show-rejections lists them with their reasons"))
        return
    for item in items:
        what = " ".join(f"{k}={v}" for k, v in item.items() if v and k != "reason")
        console.print(literal(f"rejected {what}: {item['reason']}", "yellow"))


def repeated_ids(events: Iterable[f.Feed]) -> int:
    """How many of ``events`` a partition ignores as repeats of an earlier event's ``id`` (de-duplication:
    ids are per partition, and a ``partition_removed`` forgets those before it, as the cache does)."""
    seen: dict[str, set[str]] = {}
    repeats = 0
    for event in events:
        if not event.id:
            continue
        ids = seen.setdefault(event.partition, set())
        if event.id in ids:
            repeats += 1
        elif isinstance(event, f.PartitionRemoved):
            seen[event.partition] = {event.id}
        else:
            ids.add(event.id)
    return repeats


def decided_nothing(
    decisions: Iterable[d.DecisionMsg], events: Sequence[f.Feed], rejected: list[dict[str, str]], shown: bool
) -> None:
    """Fail when a run of ``events`` decided nothing but rejections: bad input (exit 2) when Sniper
    rejected what it was given, the rejections listed (``shown``: already listed), or ignored it as
    repeats of an earlier ``id``; a runtime failure (exit 3) when nothing at all was decided."""
    if any(not isinstance(x, d.Rejected) for x in decisions):
        return
    repeats = repeated_ids(events)
    ignored = f"; {repeats} events ignored as repeats of an earlier id" if repeats else ""
    if rejected:
        if not shown:
            show_rejections(rejected, True)
        fail(
            f"every decision for {len(events)} events was a rejection (listed above){ignored}: "
            "nothing could be scheduled"
        )
    if repeats:
        fail(f"nothing was decided for {len(events)} events: {repeats} events ignored as repeats of an earlier id")
    fail(f"nothing was decided for {len(events)} events", EXIT_RUNTIME)


def load_inputs(trace: Path | None, queues: Path | None, seed: int) -> tuple[list[f.Feed], SchedulerConfig | None, str]:
    """The events, the configuration (``--queues`` or the scenario's) and a description of the source.

    A trace that configures no partition, given without ``--queues``, is refused: nothing would be
    decided. The configuration's warnings (YuniKorn keys Sniper does not implement, misspelt resource
    names) are printed, whether it comes from ``--queues`` or from the trace's ``partition_config``.
    """
    from sniper.simulator.scenarios import scenario

    if trace is None:
        trace = Path("demo")
    config = load_config(queues) if queues is not None else None
    if not trace.exists() and not trace.suffix:
        sc = scenario(str(trace), seed)  # a bundled scenario by name
        events, source = sc.events, f"bundled scenario '{sc.name}' (seed {seed})"
        config = config or sc.config
    else:
        events, bad = read_trace(trace)
        print_bad(bad, "bad")
        source = str(trace)
        if config is None and not any(isinstance(e, f.PartitionConfigEvent) for e in events):
            fail(f"{trace} configures no partition (no partition_config event): pass --queues FILE")
    print_config_warnings(config, events)
    return events, config, source


def print_config_warnings(config: SchedulerConfig | None, events: Sequence[f.Feed]) -> None:
    """Each warning of the configuration in force once on stderr (an invalid ``partition_config`` is
    the cache's to reject, with its reason, so it is skipped here)."""
    warnings: list[str] = list(config.warnings) if config is not None else []
    if config is None:
        for event in events:
            if isinstance(event, f.PartitionConfigEvent):
                try:
                    warnings.extend(parse_partition(event.config, f"partition_config {event.partition}").warnings)
                except ConfigError:
                    continue
    for warning in dict.fromkeys(warnings):
        console.print(literal(f"warning: {warning}", "yellow"))
