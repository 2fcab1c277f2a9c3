"""The ``sniper`` typer application and what every command shares: the app and its ``bench`` group,
the consoles (tables to stdout, progress and errors to stderr), logging set-up, and how a trace or a
bundled scenario is loaded. Commands live in :mod:`sniper.cli.sim`, :mod:`sniper.cli.kafka` and
:mod:`sniper.cli.importing`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import typer
from rich.console import Console

from sniper.core.config import SchedulerConfig, load_config
from sniper.messages import feed as f
from sniper.messages.codec import BadInput, read_trace

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Sniper: a scheduler core with sniper preemption.")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (print figures; never assert).")
app.add_typer(bench_app, name="bench")
console = Console(stderr=True)
out = Console()


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )


def print_bad(bad: Sequence[BadInput], kind: str) -> None:
    """Report skipped input lines (the first 20, then how many more)."""
    for problem in bad[:20]:
        console.print(f"[yellow]skipped[/] {problem}")
    if len(bad) > 20:
        console.print(f"[yellow]... and {len(bad) - 20} more {kind} lines[/]")


def load_inputs(trace: Path | None, queues: Path | None, seed: int) -> tuple[list[f.Feed], SchedulerConfig | None, str]:
    from sniper.simulator.scenarios import scenario

    if trace is None:
        trace = Path("demo")
    if not trace.exists() and not trace.suffix:
        sc = scenario(str(trace), seed)  # a bundled scenario by name
        config = load_config(queues) if queues is not None else sc.config
        return sc.events, config, f"bundled scenario '{sc.name}' (seed {seed})"
    events, bad = read_trace(trace)
    print_bad(bad, "bad")
    return events, (load_config(queues) if queues is not None else None), str(trace)
