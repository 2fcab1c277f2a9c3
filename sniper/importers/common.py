"""What every importer shares: the neutral workload model a format parser fills (nodes, jobs, asks),
and one deterministic path from it to a Sniper trace and its ``queues.yaml``.

A parser turns its format into a :class:`Workload` (times in seconds from the source's own origin,
resources in feed units: memory MiB, vcore milli-cores, gpu-milli milli-GPUs where GPUs are shared,
gpu and any other resource a count) and collects malformed rows as
:class:`~sniper.messages.codec.BadInput` with their line. :func:`build_trace` then cuts the window
(``start``/``span``, by job submission), compresses time, durations and the apps' checkpoint interval
alike (``time_scale``, ``checkpoint_interval``),
shrinks the cluster (``nodes_sample``: each kind of node, its label set such as a GPU model, in
proportion, at least one node of every kind an ask's node selector needs, an even stride by name
within a kind) and writes the queue tree: one leaf per source queue, guaranteed a share of the
(sampled) cluster. Invariants: the same input and options give byte-identical output; an import
with no job in its window is refused (:class:`ImportError_`, saying why); the trace starts with its
``partition_config``, then every node at ``t=0``, then jobs in time order; config quantities are
YuniKorn quantities (:func:`sniper.core.resources.as_quantities`: ``64Gi``, ``16`` cores, ``500m``) that
read back exactly.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import yaml

from sniper.core.config import ConfigError, parse_partition
from sniper.core.resources import as_quantities
from sniper.core.state import selector_matches
from sniper.messages import feed as f
from sniper.messages.codec import BadInput, encode_json_line, feed_json

Progress = Callable[[int], None]  # bytes of input consumed since the last call


class ImportError_(ValueError):
    """Input that cannot be imported at all (missing columns, no nodes, bad options): the message says why."""


@dataclasses.dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    capacity: dict[str, int]
    labels: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class AskSpec:
    name: str
    t: float  # when the ask is made, seconds from the source's origin
    resource: dict[str, int]
    count: int = 1
    priority: int = 0
    am: bool = False
    duration: float | None = None
    node_selector: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    withdraw_at: float | None = None  # the source withdrew it then (if still waiting)
    opportunistic: bool = False  # YARN's ExecutionType.OPPORTUNISTIC (feed ``execution_type``)


@dataclasses.dataclass(frozen=True, slots=True)
class JobSpec:
    app: str
    queue: str  # a leaf name under root, already sanitised
    t: float  # submission, seconds from the source's origin
    asks: tuple[AskSpec, ...]
    user: str = ""
    priority: int = 0


@dataclasses.dataclass(slots=True)
class Workload:
    """What a parser read: nodes, jobs, the rows it skipped, and format-specific counts for the summary."""

    nodes: list[NodeSpec] = dataclasses.field(default_factory=list)
    jobs: list[JobSpec] = dataclasses.field(default_factory=list)
    bad: list[BadInput] = dataclasses.field(default_factory=list)
    notes: dict[str, int] = dataclasses.field(default_factory=dict)

    def note(self, what: str, n: int = 1) -> None:
        self.notes[what] = self.notes.get(what, 0) + n


@dataclasses.dataclass(frozen=True, slots=True)
class ImportOptions:
    start: float = 0.0  # seconds after the source's first submission
    span: float | None = None  # seconds of submissions kept from ``start``
    time_scale: float = 1.0  # times and durations are divided by it
    nodes_sample: int | None = None  # keep this many nodes
    guarantees: Mapping[str, float] = dataclasses.field(default_factory=dict)  # leaf -> share of the cluster
    partition: str = "default"
    # Every imported app checkpoints its containers' work this often, in the source's seconds (scaled
    # like durations; None: no checkpoints).
    checkpoint_interval: float | None = None

    def check(self) -> None:
        if not (math.isfinite(self.start) and self.start >= 0):
            raise ImportError_(f"--start must be a non-negative number of seconds, got {self.start}")
        if self.span is not None and not (math.isfinite(self.span) and self.span > 0):
            raise ImportError_(f"--span must be a positive number of seconds, got {self.span}")
        if not (math.isfinite(self.time_scale) and self.time_scale > 0):
            raise ImportError_(f"--time-scale must be positive, got {self.time_scale}")
        if self.nodes_sample is not None and self.nodes_sample < 1:
            raise ImportError_(f"--nodes-sample must be at least 1, got {self.nodes_sample}")
        interval = self.checkpoint_interval
        if interval is not None and not (math.isfinite(interval) and 0 < interval / self.time_scale <= f.MAX_T):
            raise ImportError_(f"--checkpoint-interval must be a positive number of seconds, got {interval}")
        for name, share in self.guarantees.items():
            if not (math.isfinite(share) and 0 <= share <= 1):
                raise ImportError_(f"guarantee of {name}: a share of the cluster between 0 and 1, got {share}")
        if sum(self.guarantees.values()) > 1 + 1e-9:
            raise ImportError_(f"guarantees add up to {sum(self.guarantees.values()):g}, more than the whole cluster")


@dataclasses.dataclass(frozen=True, slots=True)
class Summary:
    nodes: int
    queues: int
    apps: int
    asks: int
    containers: int
    span: float  # seconds from the first to the last event of the trace
    events: int
    malformed: int
    outside_window: int
    notes: dict[str, int]


@dataclasses.dataclass(frozen=True, slots=True)
class Imported:
    events: list[f.Feed]  # partition_config first
    queues: dict[str, Any]  # the queues.yaml content
    summary: Summary


_QUEUE_NAME = re.compile(r"[^A-Za-z0-9_-]+")


def queue_name(raw: str) -> str:
    """A source's queue or class name as a leaf queue name (no dots, nothing YuniKorn would refuse)."""
    name = _QUEUE_NAME.sub("_", raw.strip()).strip("_")
    return name or "default"


def counted_lines(handle: BinaryIO, progress: Progress | None) -> Iterator[bytes]:
    """The lines of a binary file, reporting their bytes to ``progress`` as they are read."""
    for line in handle:
        if progress is not None:
            progress(len(line))
        yield line


def text_lines(lines: Iterable[bytes], source: str, bad: list[BadInput]) -> Iterator[str]:
    """Decode UTF-8 lines, a byte order mark at the start dropped; a line that is not UTF-8 is reported
    and yielded empty (line numbers hold)."""
    for number, raw in enumerate(lines, start=1):
        try:
            yield raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as err:
            bad.append(BadInput(f"{source}:{number}", f"not UTF-8 ({err.reason})"))
            yield "\n"


Kind = tuple[tuple[str, str], ...]  # a node's labels, sorted: the strata of the node sample


def _kind(node: NodeSpec) -> Kind:
    return tuple(sorted(node.labels.items()))


def _sample(nodes: list[NodeSpec], keep: int | None, selectors: Iterable[Mapping[str, list[str]]]) -> list[NodeSpec]:
    """``keep`` of the nodes, sorted by name: every kind of node (label set) in proportion to its count,
    at least one node of a kind some selector needs, an even stride by name within a kind."""
    ordered = sorted(nodes, key=lambda n: n.name)
    if keep is None or keep >= len(ordered):
        return ordered
    kinds: dict[Kind, list[NodeSpec]] = {}
    for node in ordered:
        kinds.setdefault(_kind(node), []).append(node)
    minimum = dict.fromkeys(kinds, 0)
    unique = {tuple(sorted((k, tuple(sorted(v))) for k, v in s.items())) for s in selectors if s}
    needs = [[kind for kind in sorted(kinds) if selector_matches(dict(s), dict(kind))] for s in sorted(unique)]
    for matching in sorted((m for m in needs if m), key=len):  # the most constrained selectors first
        if not any(minimum[kind] for kind in matching):
            minimum[min(matching, key=lambda kind: (-len(kinds[kind]), kind))] = 1
    needed = sum(minimum.values())
    if needed > keep:
        named = ", ".join(",".join(f"{k}={v}" for k, v in kind) for kind in sorted(kinds) if minimum[kind])
        raise ImportError_(
            f"--nodes-sample {keep} is fewer than the {needed} kinds of node the asks' selectors need ({named})"
        )
    # the rest in proportion to what each kind has left (largest remainders; ties: the larger kind first)
    rest, spare = keep - needed, {kind: len(group) - minimum[kind] for kind, group in kinds.items()}
    total = sum(spare.values())
    seats = {kind: minimum[kind] + rest * spare[kind] // total for kind in kinds}
    by_remainder = sorted(kinds, key=lambda kind: (-(rest * spare[kind] % total), -len(kinds[kind]), kind))
    for kind in by_remainder[: keep - sum(seats.values())]:
        seats[kind] += 1
    kept = [group[i * len(group) // seats[kind]] for kind, group in kinds.items() for i in range(seats[kind])]
    return sorted(kept, key=lambda n: n.name)


def _queues(
    leaves: list[str], total: dict[str, int], guarantees: Mapping[str, float], partition: str
) -> dict[str, Any]:
    named = sum(guarantees.get(q, 0.0) for q in leaves)
    rest = [q for q in leaves if q not in guarantees]
    equal = max(0.0, 1.0 - named) / len(rest) if rest else 0.0
    queues: list[dict[str, Any]] = []
    for leaf in leaves:
        share = guarantees.get(leaf, equal)
        amounts = {k: math.floor(v * share + 1e-6) for k, v in sorted(total.items())}  # 1 - 0.8 is 0.19999...
        guaranteed = as_quantities({k: v for k, v in amounts.items() if v > 0})
        entry: dict[str, Any] = {"name": leaf}
        if guaranteed:
            entry["resources"] = {"guaranteed": guaranteed}
        queues.append(entry)
    return {
        "partitions": [
            {
                "name": partition,
                "nodesortpolicy": {"type": "binpacking"},
                "preemption": {"policy": "sniper"},
                "queues": [{"name": "root", "queues": queues}],
            }
        ]
    }


def _round(t: float) -> float:
    return round(t, 3)


def _why_no_job(work: Workload, options: ImportOptions) -> str:
    if work.jobs:
        return (
            f"no job to import: none of the {len(work.jobs)} jobs is submitted in the window"
            f" (--start {options.start:g}, --span {options.span:g} after the first submission)"
            if options.span is not None
            else f"no job to import: none of the {len(work.jobs)} jobs is submitted after --start {options.start:g}"
        )
    if work.bad:
        return f"no job to import: every entry was skipped ({len(work.bad)}; the first: {work.bad[0]})"
    return "no job to import: the input holds none"


def build_trace(work: Workload, options: ImportOptions) -> Imported:
    """The trace and queue config for a parsed workload (see the module docstring for the rules)."""
    options.check()
    origin = min((job.t for job in work.jobs), default=0.0)
    lo = origin + options.start
    hi = math.inf if options.span is None else lo + options.span
    jobs = [job for job in work.jobs if lo <= job.t < hi]
    if not jobs:
        raise ImportError_(_why_no_job(work, options))
    scale = options.time_scale
    nodes = _sample(work.nodes, options.nodes_sample, (ask.node_selector for job in jobs for ask in job.asks))
    if not nodes:
        raise ImportError_("no node to import")
    total: dict[str, int] = {}
    for node in nodes:
        for k, v in node.capacity.items():
            total[k] = total.get(k, 0) + v

    def when(t: float) -> float:
        return _round(max(0.0, t - lo) / scale)

    interval = None if options.checkpoint_interval is None else options.checkpoint_interval / scale
    leaves = sorted({job.queue for job in jobs} | set(options.guarantees))
    if not leaves:
        leaves = ["default"]
    queues = _queues(leaves, total, options.guarantees, options.partition)
    partition_raw = queues["partitions"][0]
    try:
        parse_partition(partition_raw, "imported partition")
    except ConfigError as err:  # a guarantee mapping naming something impossible
        raise ImportError_(str(err)) from None
    part = options.partition
    head: list[f.Feed] = [f.PartitionConfigEvent(t=0.0, partition=part, config=partition_raw)]
    head.extend(f.NodeAdded(t=0.0, partition=part, node=n.name, capacity=n.capacity, labels=n.labels) for n in nodes)
    timed: list[tuple[float, int, f.Feed]] = []
    asks = containers = 0
    for job in jobs:
        t = when(job.t)
        timed.append(
            (
                t,
                len(timed),
                f.AppAdded(
                    t=t,
                    partition=part,
                    app=job.app,
                    queue=f"root.{job.queue}",
                    user=job.user,
                    priority=job.priority,
                    checkpoint_interval=interval,
                ),
            )
        )
        for ask in job.asks:
            at = max(t, when(ask.t))
            duration = None if ask.duration is None else _round(ask.duration / scale)
            event = f.AskAdded(
                t=at,
                partition=part,
                app=job.app,
                ask=ask.name,
                resource=ask.resource,
                count=ask.count,
                priority=ask.priority,
                am=ask.am,
                duration=duration,
                node_selector=ask.node_selector,
                execution_type="opportunistic" if ask.opportunistic else "guaranteed",
            )
            timed.append((at, len(timed), event))
            asks += 1
            containers += ask.count
            if ask.withdraw_at is not None:
                gone = max(at, when(ask.withdraw_at))
                timed.append((gone, len(timed), f.AskRemoved(t=gone, partition=part, app=job.app, ask=ask.name)))
    timed.sort(key=lambda x: (x[0], x[1]))
    events = head + [e for _, _, e in timed]
    summary = Summary(
        nodes=len(nodes),
        queues=len(leaves),
        apps=len(jobs),
        asks=asks,
        containers=containers,
        span=timed[-1][0] if timed else 0.0,
        events=len(events),
        malformed=len(work.bad),
        outside_window=len(work.jobs) - len(jobs),
        notes=dict(sorted(work.notes.items())),
    )
    return Imported(events, queues, summary)


def queues_path(trace: Path) -> Path:
    """Where the queues.yaml of a trace goes: beside it, same stem (``t.jsonl`` -> ``t.yaml``)."""
    return trace.with_suffix(".yaml")


def write_trace(imported: Imported, out: Path) -> Path:
    """Write the trace to ``out`` and its queues.yaml beside it; returns the queues.yaml path."""
    config = queues_path(out)
    if config == out:
        raise ImportError_(f"the trace {out} would overwrite its own queues.yaml; give it a .jsonl name")
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = [encode_json_line(event) for event in imported.events]
    for event, line in zip(imported.events, lines, strict=True):  # what a reader would refuse is never written
        try:
            feed_json.decode(line)
        except msgspec.ValidationError as err:
            names = " ".join(f"{k}={getattr(event, k)}" for k in ("node", "app", "ask") if getattr(event, k, None))
            raise ImportError_(f"{type(event).__name__} {names} would be refused by a reader: {err}") from None
    with open(out, "wb") as handle:
        handle.writelines(lines)
    config.write_text(yaml.safe_dump(imported.queues, sort_keys=False))
    return config
