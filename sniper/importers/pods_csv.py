"""Kubernetes pod lists as published with public GPU-cluster traces (Alibaba ``cluster-trace-gpu-v2023``).

Pods: ``name, cpu_milli, memory_mib, num_gpu, gpu_milli`` and, where the list has them, ``gpu_spec,
qos, pod_phase, creation_time, deletion_time, scheduled_time``; nodes: ``sn, cpu_milli, memory_mib,
gpu, model``. Each pod becomes an app with one one-container ask: memory MiB, vcore milli-cores, and
``gpu-milli`` milli-GPUs (``num_gpu`` x ``gpu_milli``, so a pod sharing 0.46 of a GPU asks 460, eight
whole GPUs 8000; never the count ``gpu``, which stays whole GPUs). A node's GPUs are one aggregate of
``gpu-milli`` (``gpu`` x 1000), and :class:`GpuShare` says what a sharing pod asks of it. The
arrival model (:class:`Arrival`) says when: at ``creation_time`` (``trace``, the default when the
list has its time columns), all at once (``all``, the default otherwise) or N pods a second in list
order (``rate:N``).
A pod runs ``deletion_time - scheduled_time`` seconds, or the given duration, or (a list without time
columns) until the end of the replay; a pod the source never scheduled (an empty ``scheduled_time``)
is withdrawn once it has waited as long as it waited there. ``gpu_spec`` (``V100M16|V100M32``) is the
ask's node selector on the node label ``gpu_model`` (the node's ``model``). The queue is the value of
one pod column (``--queue-by``; ``qos`` when the list has it) or ``default`` for all.
"""

from __future__ import annotations

import csv
import dataclasses
import enum
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from sniper.core.resources import GPU_MILLI
from sniper.importers.common import (
    AskSpec,
    ImportError_,
    JobSpec,
    NodeSpec,
    Progress,
    Workload,
    counted_lines,
    queue_name,
    text_lines,
)
from sniper.messages.codec import BadInput
from sniper.messages.feed import MAX_AMOUNT
from sniper.messages.quantity import shortened

POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")  # every pod list has these
TIME_COLUMNS = ("creation_time", "deletion_time")  # the trace arrival model needs both
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
PHASES = ("Pending", "Running", "Succeeded", "Failed")
GPU_LABEL = "gpu_model"
QUEUE_COLUMN = "qos"  # the queue when --queue-by is not given and the list has it
NO_VALUE = ("", "nan", "NaN", "None")  # how pandas-written CSVs spell a missing value


@dataclasses.dataclass(frozen=True, slots=True)
class Arrival:
    """When pods arrive: at their ``creation_time`` (``trace``), all at ``t=0`` (``all``), or ``rate``
    pods a second in list order (``rate``: the i-th accepted pod, from 0, at ``i / rate``)."""

    kind: Literal["trace", "all", "rate"]
    rate: float = 0.0

    @staticmethod
    def parse(text: str) -> Arrival:
        """``trace``, ``all`` or ``rate:N`` (N > 0 pods a second)."""
        kind, _, value = text.strip().partition(":")
        if kind == "trace" and not value:
            return Arrival("trace")
        if kind == "all" and not value:
            return Arrival("all")
        if kind == "rate":
            try:
                rate = float(value)
            except ValueError:
                rate = math.nan
            if math.isfinite(rate) and rate > 0:
                return Arrival("rate", rate)
        raise ImportError_(f"--arrival {text!r}: expected trace, all or rate:N (N pods a second, N > 0)")

    def at(self, index: int, created: float | None) -> float:
        """When the ``index``-th imported pod (from 0), created at ``created`` in the source, arrives."""
        if self.kind == "trace":
            assert created is not None  # read_pods refuses trace arrivals without creation_time
            return created
        return 0.0 if self.kind == "all" else index / self.rate


class GpuShare(enum.StrEnum):
    """How a pod sharing part of a GPU (``gpu_milli`` under 1000) counts against its node's GPUs, which
    are one milli-GPU aggregate: its share as it is (``aggregate``: may pack beyond what single devices
    hold, three 0.6-GPU pods on two GPUs); its share rounded up to 1/8, 1/4, 1/2 or a whole GPU
    (``device``: sizes that divide each other and the GPU, so every set of pods the aggregate admits has
    a placement onto single devices); or a whole GPU (``whole``: no sharing)."""

    AGGREGATE = "aggregate"
    DEVICE = "device"
    WHOLE = "whole"

    def milli(self, gpu_milli: int) -> int:
        """The milli-GPUs a pod asks per GPU for its ``gpu_milli``."""
        if not 0 < gpu_milli < 1000 or self is GpuShare.AGGREGATE:
            return gpu_milli
        if self is GpuShare.WHOLE:
            return 1000
        return next(size for size in DEVICE_SHARES if size >= gpu_milli)


DEVICE_SHARES = (125, 250, 500, 1000)  # each divides the next and a GPU's 1000 milli-GPUs


class _Row(ValueError):
    """A malformed row; the message says which column and why."""


def _int(row: dict[str, str], column: str) -> int:
    raw = row[column].strip()
    try:
        value = int(float(raw)) if "." in raw or "e" in raw.lower() else int(raw)
    except (ValueError, OverflowError):  # OverflowError: 1e309 is an infinite float
        raise _Row(f"{column}: {shortened(raw)} is not a whole number") from None
    if value < 0:
        raise _Row(f"{column}: negative ({shortened(raw)})")
    if value > MAX_AMOUNT:
        raise _Row(f"{column}: {shortened(raw)} is more than 2**53")
    return value


def _text(row: dict[str, str], column: str) -> str:
    value = row.get(column, "").strip()
    return "" if value in NO_VALUE else value


def _header(path: Path) -> list[str]:
    """The column names on a CSV's first line."""
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as handle:  # -sig: a BOM is no name
        try:
            return next(csv.reader(handle), [])
        except csv.Error as err:
            raise ImportError_(f"{path}:1: the header is not CSV ({err})") from None


def _rows(
    path: Path, columns: tuple[str, ...], work: Workload, progress: Progress | None
) -> Iterator[tuple[int, dict[str, str]]]:
    """Each data row with its line number; a file without the needed columns is not importable."""
    with open(path, "rb") as handle:
        reader = csv.DictReader(text_lines(counted_lines(handle, progress), str(path), work.bad))
        missing = [c for c in columns if c not in (reader.fieldnames or ())]
        if missing:
            raise ImportError_(f"{path}: missing column(s) {', '.join(missing)} (found {reader.fieldnames})")
        while True:
            try:
                row = next(reader, None)
            except csv.Error as err:  # a field over csv.field_size_limit(), a NUL byte: the file stops here
                raise ImportError_(f"{path}:{reader.line_num + 1}: cannot read the row ({err})") from None
            if row is None:
                return
            if None in row or any(v is None for v in row.values()):
                work.bad.append(BadInput(f"{path}:{reader.line_num}", "wrong number of fields"))
                continue
            yield reader.line_num, row


def read_nodes(path: Path, work: Workload, progress: Progress | None = None) -> None:
    first_seen: dict[str, int] = {}
    for line, row in _rows(path, NODE_COLUMNS, work, progress):
        try:
            name = _text(row, "sn")
            if not name:
                raise _Row("sn: empty node name")
            if name in first_seen:
                raise _Row(f"duplicate node {name} (first on line {first_seen[name]})")
            capacity = {
                "memory": _int(row, "memory_mib"),
                "vcore": _int(row, "cpu_milli"),
                GPU_MILLI: 1000 * _int(row, "gpu"),
            }
            capacity = {k: v for k, v in capacity.items() if v > 0}
            if not capacity:
                raise _Row("node has no resources")
        except _Row as err:
            work.bad.append(BadInput(f"{path}:{line}", str(err)))
            continue
        first_seen[name] = line
        model = _text(row, "model")
        work.nodes.append(NodeSpec(name, capacity, {GPU_LABEL: model} if model else {}))


@dataclasses.dataclass(frozen=True, slots=True)
class _Times:
    """A pod's life in the source: created, maybe scheduled (None: never), deleted."""

    created: int
    scheduled: int | None
    deleted: int


def _times(row: dict[str, str], has_scheduled: bool) -> _Times:
    created, deleted = _int(row, "creation_time"), _int(row, "deletion_time")
    if deleted < created:
        raise _Row(f"deletion_time {deleted} is before creation_time {created}")
    if not has_scheduled:  # a list without the column: every pod ran from its creation
        return _Times(created, created, deleted)
    scheduled = None if not _text(row, "scheduled_time") else _int(row, "scheduled_time")
    if scheduled is not None and not created <= scheduled <= deleted:
        raise _Row(f"scheduled_time {scheduled} is outside creation..deletion ({created}..{deleted})")
    return _Times(created, scheduled, deleted)


def _resource(row: dict[str, str], share: GpuShare) -> dict[str, int]:
    num_gpu, gpu_milli = _int(row, "num_gpu"), _int(row, "gpu_milli")
    if gpu_milli > 1000:
        raise _Row(f"gpu_milli: {gpu_milli} is more than one GPU")
    if num_gpu > 0 and gpu_milli == 0:
        raise _Row(f"num_gpu is {num_gpu} but gpu_milli is 0")
    resource = {
        "memory": _int(row, "memory_mib"),
        "vcore": _int(row, "cpu_milli"),
        GPU_MILLI: num_gpu * share.milli(gpu_milli),
    }
    resource = {k: v for k, v in resource.items() if v > 0}
    if not resource:
        raise _Row("the pod asks for nothing")
    return resource


@dataclasses.dataclass(frozen=True, slots=True)
class _Model:
    """How the rows of one pod list become jobs: the columns it has and the options given."""

    arrival: Arrival
    duration: float | None  # every pod runs this long (None: from its time columns, or to the end)
    queue_by: str | None  # the column naming the queue, None for one queue
    gpu_share: GpuShare
    has_times: bool
    has_scheduled: bool
    has_phase: bool

    def pod(self, row: dict[str, str], index: int) -> JobSpec:
        name = _text(row, "name")
        if not name:
            raise _Row("name: empty pod name")
        if self.has_phase:
            phase = _text(row, "pod_phase")
            if phase not in PHASES:
                raise _Row(f"pod_phase: {phase!r} is none of {', '.join(PHASES)}")
        resource = _resource(row, self.gpu_share)
        times = _times(row, self.has_scheduled) if self.has_times else None
        t = self.arrival.at(index, None if times is None else float(times.created))
        spec = _text(row, "gpu_spec")
        selector = {GPU_LABEL: sorted({s.strip() for s in spec.split("|") if s.strip()})} if spec else {}
        if times is not None and times.scheduled is None:  # never ran in the source: waits as long, then leaves
            waited = float(times.deleted - times.created)
            duration = waited if self.duration is None else self.duration
            ask = AskSpec(name, t, resource, duration=duration, node_selector=selector, withdraw_at=t + waited)
        else:
            ran = None if times is None or times.scheduled is None else float(times.deleted - times.scheduled)
            ask = AskSpec(
                name, t, resource, duration=ran if self.duration is None else self.duration, node_selector=selector
            )
        queue = queue_name(_text(row, self.queue_by)) if self.queue_by else "default"
        return JobSpec(app=name, queue=queue, t=t, asks=(ask,))


def _model(
    path: Path,
    columns: list[str],
    queue_by: str | None,
    arrival: Arrival | None,
    duration: float | None,
    gpu_share: GpuShare,
) -> _Model:
    has_times = all(c in columns for c in TIME_COLUMNS)
    if arrival is None:
        arrival = Arrival("trace" if has_times else "all")
    if arrival.kind == "trace" and not has_times:
        missing = ", ".join(c for c in TIME_COLUMNS if c not in columns)
        raise ImportError_(f"{path}: --arrival trace needs column(s) {missing}; use --arrival all or rate:N")
    if duration is not None and not (math.isfinite(duration) and duration >= 0):
        raise ImportError_(f"--duration must be a non-negative number of seconds, got {duration}")
    if queue_by is None:
        column = QUEUE_COLUMN if QUEUE_COLUMN in columns else None
    elif queue_by == "none":
        column = None
    elif queue_by in columns:
        column = queue_by
    else:
        raise ImportError_(f"--queue-by {queue_by!r}: not a column of {path} ({', '.join(columns)}) nor 'none'")
    return _Model(arrival, duration, column, gpu_share, has_times, "scheduled_time" in columns, "pod_phase" in columns)


def read_pods(
    path: Path,
    work: Workload,
    queue_by: str | None = None,
    progress: Progress | None = None,
    arrival: Arrival | None = None,
    duration: float | None = None,
    gpu_share: GpuShare = GpuShare.AGGREGATE,
) -> None:
    """Read a pod list into ``work``: ``queue_by`` a column, ``"none"``, or None (``qos`` if the list has
    it); ``arrival`` None is ``trace`` when the list has its time columns, else ``all``."""
    model = _model(path, _header(path), queue_by, arrival, duration, gpu_share)
    first_seen: dict[str, int] = {}
    for line, row in _rows(path, POD_COLUMNS, work, progress):
        try:
            job = model.pod(row, len(work.jobs))
            if job.app in first_seen:
                raise _Row(f"duplicate pod {job.app} (first on line {first_seen[job.app]})")
        except _Row as err:
            work.bad.append(BadInput(f"{path}:{line}", str(err)))
            continue
        first_seen[job.app] = line
        work.jobs.append(job)
        if job.asks[0].withdraw_at is not None:
            work.note("pods never scheduled in the source (withdrawn at deletion)")
        if job.asks[0].node_selector:
            work.note("pods with a GPU model selector")
        if job.asks[0].duration is None:
            work.note("pods running to the end (no duration)")
        share = _int(row, "gpu_milli")
        if gpu_share.milli(share) != share:
            work.note(f"GPU-sharing pods rounded up (--gpu-share {gpu_share})")


def read_pods_csv(
    pods: Path,
    nodes: Path,
    queue_by: str | None = None,
    progress: Progress | None = None,
    arrival: Arrival | None = None,
    duration: float | None = None,
    gpu_share: GpuShare = GpuShare.AGGREGATE,
) -> Workload:
    """Parse a node list and a pod list into a workload (malformed rows in ``bad``, with their line)."""
    work = Workload()
    read_nodes(nodes, work, progress)
    read_pods(pods, work, queue_by, progress, arrival, duration, gpu_share)
    return work
