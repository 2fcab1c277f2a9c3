"""``sniper import``: other trace formats into a Sniper trace plus its queues.yaml (:mod:`sniper.importers`).

Every importer shares the window, time-scale, node-sample, guarantee and checkpoint-interval options, a
progress bar over the input bytes, the malformed-row report and the summary table. Exit code 2 on input that cannot be
imported at all, a trace without a job included; malformed rows are reported and skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sniper.cli.app import app, console, literal, out, print_bad, shared_options
from sniper.importers.common import ImportError_, ImportOptions, Workload, build_trace, queue_name, write_trace
from sniper.importers.pods_csv import Arrival, GpuShare, read_pods_csv
from sniper.importers.sls import read_sls

import_app = typer.Typer(no_args_is_help=True, help="Turn other trace formats into a Sniper trace and a queues.yaml.")
app.add_typer(import_app, name="import")

Out = Annotated[Path, typer.Option("--out", help="the Sniper trace to write (JSON Lines); its .yaml goes beside it")]
Start = Annotated[float, typer.Option(help="seconds after the first submission where the window starts")]
Span = Annotated[float | None, typer.Option(help="seconds of submissions to keep from --start (default: all)")]
TimeScale = Annotated[float, typer.Option(help="divide times and durations by this (10: ten times faster)")]
NodesSample = Annotated[
    int | None,
    typer.Option(help="keep this many nodes: each kind (GPU model, labels) in proportion, every needed kind"),
]
Guarantee = Annotated[
    list[str] | None, typer.Option(help="QUEUE=SHARE: QUEUE's guarantee as a share of the cluster (repeatable)")
]
Guarantees = Annotated[Path | None, typer.Option(help="YAML mapping queue -> share of the cluster")]
Partition = Annotated[str, typer.Option(help="partition name")]
CheckpointInterval = Annotated[
    float | None,
    typer.Option(help="every app checkpoints its containers' work this often (seconds, scaled like durations)"),
]


def _guarantees(flags: list[str] | None, mapping: Path | None) -> dict[str, float]:
    raw: dict[str, object] = {}
    if mapping is not None:
        loaded = yaml.safe_load(mapping.read_text())
        if not isinstance(loaded, dict):
            raise ImportError_(f"{mapping}: a mapping of queue name to share of the cluster")
        raw.update({str(k): v for k, v in loaded.items()})
    for flag in flags or []:
        name, sep, value = flag.partition("=")
        if not sep:
            raise ImportError_(f"--guarantee {flag!r}: expected QUEUE=SHARE, e.g. LS=0.5")
        raw[name] = value
    out: dict[str, float] = {}
    for name, share in raw.items():
        try:
            out[queue_name(name.removeprefix("root."))] = float(str(share))
        except ValueError:
            raise ImportError_(f"guarantee of {name}: {share!r} is not a number") from None
    return out


def _import_options(given: Mapping[str, Any]) -> ImportOptions:
    shares = _guarantees(given["guarantee"], given["guarantees"])
    return ImportOptions(
        given["start"],
        given["span"],
        given["time_scale"],
        given["nodes_sample"],
        shares,
        given["partition"],
        given["checkpoint_interval"],
    )


# The options every importer shares: the window, the time scale, the node sample, the guarantees, the
# apps' checkpoint interval.
with_import_options = shared_options(
    "options",
    [
        ("start", Start, 0.0),
        ("span", Span, None),
        ("time_scale", TimeScale, 1.0),
        ("nodes_sample", NodesSample, None),
        ("guarantee", Guarantee, None),
        ("guarantees", Guarantees, None),
        ("partition", Partition, "default"),
        ("checkpoint_interval", CheckpointInterval, None),
    ],
    _import_options,
)


def _run(
    inputs: list[Path],
    parse: Callable[[Callable[[int], None]], Workload],
    options: ImportOptions,
    trace: Path,
    title: str,
) -> None:
    for path in inputs:
        if not path.is_file():
            raise ImportError_(f"{path}: no such file")
    options.check()
    with Progress(
        TextColumn("[bold]import[/]"), BarColumn(), DownloadColumn(), TimeElapsedColumn(), console=console
    ) as bar:
        task = bar.add_task("read", total=sum(p.stat().st_size for p in inputs))
        work = parse(lambda n: bar.advance(task, n))
    print_bad(work.bad, "malformed")
    imported = build_trace(work, options)
    config = write_trace(imported, trace)
    s = imported.summary
    table = Table(title=literal(title))
    table.add_column("what")
    table.add_column("count", justify="right")
    for what, value in (
        ("nodes", s.nodes),
        ("queues", s.queues),
        ("apps", s.apps),
        ("asks", s.asks),
        ("containers", s.containers),
        ("span (s)", f"{s.span:,.1f}"),
        ("events", s.events),
        ("malformed rows skipped", s.malformed),
        ("jobs outside the window", s.outside_window),
        *s.notes.items(),
    ):
        table.add_row(literal(what), literal(value))
    out.print(table)
    console.print(literal(f"wrote {trace} and {config}; run it with: sniper simulate {trace}"), soft_wrap=True)


@import_app.command("sls")
@with_import_options
def import_sls(
    jobs: Annotated[Path, typer.Argument(help="SLS jobs file (SLS JSON input format, or a Rumen job trace)")],
    trace: Out,
    nodes: Annotated[Path | None, typer.Option(help="SLS topology file (racks of nodes)")] = None,
    *,
    options: ImportOptions,
) -> None:
    """Import YARN Scheduler Load Simulator jobs or Rumen jobs (queues from the jobs, SLS's resource defaults)."""
    inputs = [jobs] if nodes is None else [jobs, nodes]
    _run(inputs, lambda progress: read_sls(jobs, nodes, progress), options, trace, f"SLS import: {jobs}")


@import_app.command("pods-csv")
@with_import_options
def import_pods_csv(
    pods: Annotated[Path, typer.Option(help="pod list CSV (name, cpu_milli, memory_mib, num_gpu, gpu_milli, ...)")],
    nodes: Annotated[Path, typer.Option(help="node list CSV (sn, cpu_milli, memory_mib, gpu, model)")],
    trace: Out,
    queue_by: Annotated[
        str | None, typer.Option(help="pod column naming the queue, or 'none' (default: qos if the list has it)")
    ] = None,
    arrival: Annotated[
        str | None,
        typer.Option(
            help="when pods arrive: trace (creation_time), all (at once) or rate:N (N a second, in list order);"
            " default: trace if the list has creation_time and deletion_time, else all"
        ),
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(help="seconds every pod runs (default: deletion_time - scheduled_time, else to the end)"),
    ] = None,
    gpu_share: Annotated[
        GpuShare,
        typer.Option(
            help="a pod sharing part of a GPU asks its share (aggregate: may pack beyond single devices),"
            " its share rounded up to 1/8, 1/4, 1/2 or 1 GPU (device: always fits single devices), or a whole GPU"
        ),
    ] = GpuShare.AGGREGATE,
    *,
    options: ImportOptions,
) -> None:
    """Import a Kubernetes pod list (GPUs as gpu-milli, milli-GPUs; gpu_spec as a node selector on gpu_model)."""
    model = None if arrival is None else Arrival.parse(arrival)
    _run(
        [pods, nodes],
        lambda progress: read_pods_csv(pods, nodes, queue_by, progress, model, duration, gpu_share),
        options,
        trace,
        f"pod list import: {pods}",
    )
