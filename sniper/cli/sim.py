"""The simulation commands of ``sniper``: simulate, compare, scenario, preview, check-config, bench
allocate/preempt/simulate.

A thin shell: it parses arguments, loads files, shows progress and tables, writes reports and plots.
Errors become exit codes in :mod:`sniper.cli.app` (0 fine, 1 invariant violated, 2 bad input, 3 a
runtime failure such as a run that decided nothing).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import msgspec
import typer
import yaml
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sniper.cli.app import (
    EXIT_INVARIANT,
    Policy,
    SchemaKind,
    Transport,
    app,
    bench_app,
    console,
    decided_nothing,
    fail,
    literal,
    load_inputs,
    out,
    print_table,
    rejections,
    setup_logging,
    show_rejections,
    tune_gc,
)
from sniper.core.config import ConfigError, LimitConfig, PartitionConfig, load_config
from sniper.core.units import human_resource, percent
from sniper.messages import feed as f
from sniper.messages.codec import encode_json_line
from sniper.simulator.report import Report

if TYPE_CHECKING:
    from sniper.simulator.scenarios import Scenario

ShowRejections = Annotated[
    bool, typer.Option("--show-rejections", help="list every rejected event and ask with its reason")
]
Seed = Annotated[int, typer.Option(min=0, help="seed of a bundled scenario")]
Until = Annotated[float | None, typer.Option(min=0.0, help="stop at this simulated second")]
AmResponse = Annotated[
    float | None,
    typer.Option(
        min=0.0,
        help="seconds simulated contract AMs take to answer a preempt_request (default: half the grace)",
    ),
]
AmReleaseGap = Annotated[
    float,
    typer.Option(
        min=0.0,
        help="seconds between the containers a simulated contract AM gives back in one answer (0: all at once)",
    ),
]


def _print_summary(report: Report, title: str) -> None:
    """The report for people: counts, seconds, resources in human units, shares in percent. The title
    is a line of its own (a table's title wraps at the table's width, and a trace's path is long)."""
    table = Table(show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("policy", literal(report.policy))
    table.add_row("sim_seconds", str(report.sim_seconds))
    table.add_row("wall_seconds", str(report.wall_seconds))
    table.add_row("allocations", str(report.allocations))
    table.add_row("preemptions", str(report.preemptions.victims))
    table.add_row("preempted", literal(human_resource(report.preemptions.resources)))
    for key in (
        "wasted_preemptions",
        "ping_pong",
        "lost_work_seconds",
        "running_time_lost_seconds",
        "fairness_gap",
        "pending_at_end",
    ):
        table.add_row(key, str(getattr(report, key)))
    for key in ("utilization", "fairness", "stranded"):
        shares: dict[str, float] = getattr(report, key)
        for resource, share in sorted(shares.items()):
            table.add_row(literal(f"{key} {resource}"), percent(share))
    for key in ("rejected", "proposals_rejected", "invariant_violations"):
        table.add_row(key, str(getattr(report, key)))
    for queue, ttg in report.time_to_guarantee.items():
        table.add_row(
            literal(f"time_to_guarantee {queue}"),
            f"episodes {ttg.episodes} unmet {ttg.unmet} p50 {ttg.p50} max {ttg.max}",
        )
    out.print(literal(title), soft_wrap=True)
    out.print(table)


@app.command()
def simulate(
    trace: Annotated[
        Path | None, typer.Argument(help="JSON Lines trace, or a bundled scenario name; default: the demo")
    ] = None,
    queues: Annotated[Path | None, typer.Option(help="queues.yaml (defaults to the scenario's own)")] = None,
    report: Annotated[Path | None, typer.Option(help="write the JSON report here")] = None,
    plot: Annotated[Path | None, typer.Option(help="write a PNG of per-queue usage against guarantee")] = None,
    resource: Annotated[str | None, typer.Option(help="resource to plot; default: the scarcest, measured")] = None,
    until: Until = None,
    seed: Seed = 0,
    policy: Annotated[Policy | None, typer.Option(help="override the preemption policy")] = None,
    transport: Annotated[Transport, typer.Option(help="the links between the actors")] = Transport.memory,
    bootstrap: Annotated[str | None, typer.Option(help="Kafka bootstrap for --transport kafka")] = None,
    show: ShowRejections = False,
    am_response: AmResponse = None,
    am_release_gap: AmReleaseGap = 0.0,
    full_check: Annotated[
        bool, typer.Option("--full-check", help="check every node's room at every step, not what the step touched")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Replay a trace in virtual time through the real actors and report (exit 1 on an invariant violation)."""
    from sniper.simulator.ideal_view import ideal_for_model
    from sniper.simulator.plot import plot_usage
    from sniper.simulator.run import SimulationSettings, run_simulation

    setup_logging(verbose)
    tune_gc()
    events, config, source = load_inputs(trace, queues, seed)
    settings = SimulationSettings(
        until=until,
        seed=seed,
        policy=None if policy is None else policy.value,
        am_response=am_response,
        am_release_gap=am_release_gap,
        full_check=full_check,
    )
    console.print(literal(f"simulating {source}: {len(events)} events"))
    with Progress(
        TextColumn("sim"),
        BarColumn(),
        TextColumn("{task.fields[now]:>8.1f}s"),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task("sim", total=1.0, now=0.0)

        def progress(now: float, end: float | None) -> None:
            bar.update(task, completed=min(1.0, now / end) if end else 0.0, now=now)

        if transport is Transport.kafka:
            from sniper.simulator.kafka_run import run_simulation_kafka

            result = run_simulation_kafka(
                events, config, settings, progress=progress, ideal_fn=ideal_for_model, bootstrap=bootstrap
            )
        else:
            result = run_simulation(events, config, settings, progress=progress, ideal_fn=ideal_for_model)
        bar.update(task, completed=1.0)
    result.summary.rejections = rejected = rejections(result.decisions)
    _print_summary(result.summary, f"Sniper simulation: {source}")
    show_rejections(rejected, show)
    if report is not None:
        report.write_bytes(msgspec.json.format(msgspec.json.encode(result.summary), indent=2) + b"\n")
        console.print(literal(f"report written to {report}"))
    if plot is not None:
        for name, metrics in result.metrics.items():
            target = plot if len(result.metrics) == 1 else plot.with_name(f"{plot.stem}-{name}{plot.suffix}")
            plot_usage(metrics, target, f"{source} [{name}] policy={result.summary.policy}", resource)
            console.print(literal(f"plot written to {target}"))
    if result.violations:
        console.print(literal(f"{result.violations} invariant violation(s)", "red"))
        raise typer.Exit(EXIT_INVARIANT)
    decided_nothing(result.decisions, events, rejected, show)


@app.command()
def compare(
    trace: Annotated[Path, typer.Argument(help="JSON Lines trace, or a bundled scenario name")],
    queues: Annotated[Path | None, typer.Option(help="queues.yaml (defaults to the scenario's own)")] = None,
    policies: Annotated[str, typer.Option(help="comma-separated policies")] = "sniper,proportional,none",
    report: Annotated[Path | None, typer.Option(help="write {policy: report} as JSON here")] = None,
    plot: Annotated[Path | None, typer.Option(help="write a PNG comparing the policies")] = None,
    until: Until = None,
    seed: Seed = 0,
    jobs: Annotated[int, typer.Option(min=1, help="run the policies in this many parallel processes")] = 1,
    resource: Annotated[str | None, typer.Option(help="resource to plot; default: the scarcest, measured")] = None,
    as_markdown: Annotated[bool, typer.Option("--markdown", help="print the table as Markdown")] = False,
    am_response: AmResponse = None,
    am_release_gap: AmReleaseGap = 0.0,
) -> None:
    """Run the same trace under several policies and print the metrics side by side (a bundled scenario
    that shows a queue property, given without --queues: each policy on the same trace without it too)."""
    from sniper.simulator.compare import compare as run_compare
    from sniper.simulator.compare import plot_compare, table_rows
    from sniper.simulator.run import SimulationSettings

    names = [x.strip() for x in policies.split(",") if x.strip()]
    known = [p.value for p in Policy]
    bad = [x for x in names if x not in known]
    if bad or not names:
        fail(f"unknown policies {bad or policies!r}: choose among {', '.join(known)}")
    tune_gc()
    events, config, source = load_inputs(trace, queues, seed)
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console) as bar:
        tasks = {name: bar.add_task(name, total=1.0) for name in names}

        def progress(policy: str, now: float, end: float | None) -> None:
            bar.update(tasks[policy], completed=min(1.0, now / end) if end else 0.0)

        settings = SimulationSettings(until=until, seed=seed, am_response=am_response, am_release_gap=am_release_gap)
        results = run_compare(events, config, names, settings, progress, jobs=jobs)
        control = scenario_control(trace, queues, seed)
        if control is not None:
            shown, plain = control
            runs = run_compare(plain.events, plain.config, names, settings, jobs=jobs)
            results.update({f"{name} without {shown}": run for name, run in runs.items()})
    columns = list(results)
    for run in results.values():
        run.summary.rejections = rejections(run.decisions)
    rows = table_rows(results)
    if as_markdown:
        out.print(literal("| metric | " + " | ".join(columns) + " |"), soft_wrap=True)
        out.print(literal("|---|" + "---:|" * len(columns)), soft_wrap=True)
        for row in rows:
            out.print(literal("| " + " | ".join(row) + " |"), soft_wrap=True)
    else:
        table = Table(title=literal(f"{source}: policies compared"))
        table.add_column("metric")
        for name in columns:
            table.add_column(name, justify="right")
        for row in rows:
            table.add_row(*map(literal, row))
        out.print(table)
    if report is not None:
        encoded = msgspec.json.encode({k: r.summary for k, r in results.items()})
        report.write_bytes(msgspec.json.format(encoded, indent=2) + b"\n")
        console.print(literal(f"report written to {report}"))
    if plot is not None:
        plot_compare(results, plot, source, resource)
        console.print(literal(f"plot written to {plot}"))
    if any(r.violations for r in results.values()):
        raise typer.Exit(EXIT_INVARIANT)
    first = results[names[0]].decisions  # every policy was given the same events
    decided_nothing(first, events, rejections(first), False)


def scenario_control(trace: Path, queues: Path | None, seed: int) -> tuple[str, Scenario] | None:
    """For ``compare``: the property a bundled scenario shows and the scenario without it, when ``trace``
    names one that shows a property and no ``--queues`` replaces its configuration (``None`` otherwise)."""
    from sniper.simulator.scenarios import scenario

    if queues is not None or trace.exists() or trace.suffix:
        return None
    sc = scenario(str(trace), seed)
    return None if sc.shows is None else (sc.shows, sc.without_property())


@app.command("scenario")
def write_scenario(
    name: Annotated[str, typer.Argument(help="bundled scenario name")],
    out_dir: Annotated[Path, typer.Option("--out", help="directory for NAME.jsonl and NAME.yaml")] = Path("."),
    seed: Seed = 0,
) -> None:
    """Write a bundled scenario as a trace file and a queues.yaml."""
    from sniper.simulator.scenarios import scenario

    sc = scenario(name, seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    partition = sc.queues["partitions"][0]
    config_event = f.PartitionConfigEvent(t=0.0, partition=partition["name"], config=partition)
    with open(out_dir / f"{name}.jsonl", "wb") as handle:
        handle.write(encode_json_line(config_event))
        for event in sc.events:
            handle.write(encode_json_line(event))
    (out_dir / f"{name}.yaml").write_text(yaml.safe_dump(sc.queues, sort_keys=False))
    console.print(literal(f"wrote {out_dir / (name + '.jsonl')} and {out_dir / (name + '.yaml')}: {sc.description}"))


@app.command()
def preview(
    snapshot: Annotated[Path, typer.Argument(help="queue-state snapshot (conformance format)")],
    policy: Annotated[Policy, typer.Option(help="policy to preview")] = Policy.proportional,
    as_json: Annotated[bool, typer.Option("--json", help="JSON Lines, one object per case")] = False,
) -> None:
    """What would preemption do to this cluster state right now? (observe-only, one round per case)."""
    from sniper.preview import preview as run_preview
    from sniper.preview import render_table

    try:
        results = run_preview(snapshot, policy.value)
    except KeyError as err:  # a field the snapshot lacks: input, not a failure of ours
        fail(f"{snapshot}: missing field {err}")
    if as_json:
        for item in results:
            sys.stdout.write(json.dumps(item) + "\n")
    else:
        out.print(literal(render_table(results)))


@bench_app.command("allocate")
def bench_allocate_cmd(
    nodes: Annotated[int, typer.Option(min=1)] = 5000,
    queues: Annotated[int, typer.Option(min=1)] = 100,
    asks: Annotated[int, typer.Option(min=1)] = 100_000,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object on stdout")] = False,
) -> None:
    """Committed allocations per second through the actors on the memory transport."""
    from sniper.bench.inprocess import bench_allocate

    tune_gc()
    result = bench_allocate(nodes, queues, asks)
    if as_json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        print_table("bench allocate", result)


@bench_app.command("chain")
def bench_chain_cmd(
    events: Annotated[int, typer.Option(min=1, help="asks fed to the partition")] = 20_000,
    batch: Annotated[int, typer.Option(min=1, help="events the cache takes before each cycle")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object on stdout")] = False,
) -> None:
    """The decision work of one partition's chain: µs of CPU per event in each phase (exit 1 if an ask
    was not allocated as the feed implies)."""
    from sniper.bench.chain import bench_chain

    tune_gc()
    result = bench_chain(events, batch)
    if as_json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        print_table("bench chain", result)
    if result["problems"]:
        sys.stderr.write(f"bench chain: {result['problems'][0]}\n")
        raise typer.Exit(EXIT_INVARIANT)


@bench_app.command("preempt")
def bench_preempt_cmd(
    nodes: Annotated[int, typer.Option(min=1)] = 10_000,
    running: Annotated[int, typer.Option(min=1)] = 100_000,
    starving: Annotated[int, typer.Option(min=1)] = 1_000,
    candidates: Annotated[
        int | None, typer.Option(min=1, help="preemption.max_candidate_nodes (default: none, the exact search)")
    ] = None,
    profile: Annotated[
        Path | None, typer.Option(help="write the round's cProfile statistics to this file (pstats format)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object on stdout")] = False,
) -> None:
    """One full sniper preemption round on a packed cluster: round time and targeted victims per second."""
    from sniper.bench.inprocess import bench_preempt

    tune_gc()
    result = bench_preempt(
        nodes, running, starving, candidates=candidates, profile=None if profile is None else str(profile)
    )
    if as_json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        print_table("bench preempt", result)


@bench_app.command("opportunistic")
def bench_opportunistic_cmd(
    nodes: Annotated[int, typer.Option(min=1)] = 1000,
    opportunistic: Annotated[int, typer.Option(min=1)] = 20_000,
    starving: Annotated[int, typer.Option(min=1)] = 100,
    gang: Annotated[int, typer.Option(min=1, help="each starving ask is a gang of this many")] = 1,
    users: Annotated[
        int, typer.Option(min=0, help="spread the asks over this many users under a user limit (0: one app, no limit)")
    ] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object on stdout")] = False,
) -> None:
    """Allocator cycles with starving guaranteed asks beside opportunistic containers that cannot help."""
    from sniper.bench.inprocess import bench_opportunistic

    tune_gc()
    result = bench_opportunistic(nodes, opportunistic, starving, gang=gang, users=users)
    if as_json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        print_table("bench opportunistic", result)


@bench_app.command("scenarios")
def bench_scenarios_cmd(
    names: Annotated[str | None, typer.Option(help="comma-separated bundled scenarios (default: all)")] = None,
    policies: Annotated[str, typer.Option(help="comma-separated policies")] = "sniper,proportional,none",
    until: Annotated[float, typer.Option(min=0, help="simulated seconds per run")] = 600.0,
    jobs: Annotated[int, typer.Option(min=1, help="run the policies in this many parallel processes")] = 1,
) -> None:
    """Every bundled scenario under each policy: the Markdown table of docs/benchmarks.md."""
    from sniper.simulator.compare import SCENARIO_COLUMNS, scenario_row
    from sniper.simulator.compare import compare as run_compare
    from sniper.simulator.run import SimulationSettings
    from sniper.simulator.scenarios import SCENARIOS

    chosen = [x.strip() for x in names.split(",")] if names else list(SCENARIOS)
    unknown = [x for x in chosen if x not in SCENARIOS]
    if unknown:
        fail(f"unknown scenarios {unknown}: choose among {', '.join(SCENARIOS)}")
    runs = [x.strip() for x in policies.split(",") if x.strip()]
    known = [p.value for p in Policy]
    if not runs or any(x not in known for x in runs):
        fail(f"unknown policies {policies!r}: choose among {', '.join(known)}")
    tune_gc()
    header = f"| scenario ({' / '.join(runs)}) | " + " | ".join(c for c, _ in SCENARIO_COLUMNS) + " |"
    out.print(literal(header), soft_wrap=True)
    out.print(literal("|---|" + "---|" * len(SCENARIO_COLUMNS)), soft_wrap=True)
    for name in chosen:
        events, config, _ = load_inputs(Path(name), None, 0)
        console.print(literal(f"{name}: {', '.join(runs)} for {until:g} simulated seconds"))
        results = run_compare(events, config, runs, SimulationSettings(until=until), jobs=jobs)
        out.print(literal("| " + " | ".join(scenario_row(name, results)) + " |"), soft_wrap=True)


@app.command("schema")
def print_schema(kind: Annotated[SchemaKind, typer.Argument(help="feed or decisions")]) -> None:
    """Print the JSON Schema of every feed event or every decision (docs/schema/ holds them)."""
    from sniper.messages.schema import schema_text

    sys.stdout.write(schema_text(kind.value))


@app.command("check-config")
def check_config(path: Annotated[Path, typer.Argument(help="queues.yaml")]) -> None:
    """Validate a queues.yaml; print each partition's preemption settings and its queue tree with units."""
    try:
        config = load_config(path)
    except (ConfigError, OSError) as err:
        console.print(literal(f"invalid: {err}", "red"))
        raise typer.Exit(2) from None
    for part in config.partitions:
        for line in _describe_partition(part):
            out.print(literal(line), soft_wrap=True)
    for warning in config.warnings:
        console.print(literal(f"warning: {warning}", "yellow"), soft_wrap=True)


def _describe_partition(part: PartitionConfig) -> list[str]:
    """A partition as ``check-config`` prints it: settings, then one line per queue, units spelled out."""
    p = part.preemption
    if p.policy == "none":
        settings = "none (nothing is preempted)"
    else:
        settings = (
            f"policy {p.policy}, every {p.interval:g} s, grace {p.grace:g} s, "
            f"at most {p.total_preemption_per_round:.0%} of the partition a round, "
            f"deadzone {p.max_ignored_over_capacity:.0%} over the ideal"
            + (", intra-queue on" if p.intra_queue else "")
            + (", observe only" if p.observe_only else "")
        )
    lines = [f"partition {part.name}: nodes sorted {part.node_sort_policy}", f"  preemption: {settings}"]
    for setting in ("fence", "disabled"):
        paths = [q.path for q in part.queues() if q.preemption_policy == setting]
        lines.append(
            f"  {'fenced' if setting == 'fence' else 'never victims (disabled)'}: {', '.join(paths) or 'none'}"
        )
    for q in part.queues():
        indent = "  " * q.path.count(".")
        limit = "no max" if q.max is None else f"max {human_resource(q.max)}"
        lines.append(
            f"  {indent}{q.name}: guaranteed {human_resource(q.guaranteed)}; {limit}; "
            f"sort {q.sort_policy}; priority {q.priority_offset}; preemption {q.preemption_policy}"
            + (f", after {q.preemption_delay:g} s" if q.preemption_delay else "")
            + (f", victims after {q.preemption_min_runtime:g} s of run" if q.preemption_min_runtime else "")
            + ("" if q.max_applications is None else f"; at most {q.max_applications} apps")
            + ("; stopped (no new app)" if q.stopped else "")
            + (f"; quota preempted {q.quota_preemption_delay:g} s over its max" if q.quota_preemption_delay else "")
            + (f"; fair share half-life {q.fairshare_halflife:g} s" if q.fairshare_halflife else "")
            + ("; reservable (SLO reservations)" if q.reservable else "")
            + ("; parent for placement rules (a leaf until they add queues)" if q.declared_parent and q.is_leaf else "")
        )
        lines.extend(f"  {indent}  {_describe_limit(lim)}" for lim in q.limits)
    return lines


def _describe_limit(lim: LimitConfig) -> str:
    """One ``limits`` entry of a queue: whom it covers and what they may hold, in human units."""
    who = [f"users {', '.join(lim.users)}"] if lim.users else []
    who += [f"groups {', '.join(lim.groups)}"] if lim.groups else []
    bounds = [] if lim.max_resources is None else [f"at most {human_resource(lim.max_resources)}"]
    bounds += [] if lim.max_applications is None else [f"at most {lim.max_applications} apps"]
    name = f" {lim.description!r}" if lim.description else ""
    return f"limit{name}: {' and '.join(who)}: {'; '.join(bounds)}"


@bench_app.command("simulate")
def bench_simulate_cmd(
    nodes: Annotated[int, typer.Option(min=1)] = 1500,
    days: Annotated[float, typer.Option(min=0.001, help="span of the generated arrivals")] = 30.0,
    pods: Annotated[int, typer.Option(min=1)] = 20_000,
    policy: Annotated[Policy, typer.Option(help="the preemption policy")] = Policy.sniper,
    until: Annotated[float | None, typer.Option(help="stop at this simulated second")] = None,
    tick_every_second: Annotated[bool, typer.Option(help="tick through idle time (the reference)")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """The simulator on a generated month-long GPU trace: simulated seconds and events per wall second."""
    from sniper.bench.inprocess import bench_simulate

    tune_gc()
    result = bench_simulate(nodes, days, pods, policy=policy.value, until=until, skip_idle=not tick_every_second)
    if as_json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        print_table("bench simulate", result)
