"""Kubernetes pod lists as published with public GPU-cluster traces (Alibaba ``cluster-trace-gpu-v2023``).

Pods: ``name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase, creation_time,
deletion_time, scheduled_time``; nodes: ``sn, cpu_milli, memory_mib, gpu, model``. Each pod becomes an
app with one one-container ask made at ``creation_time``: memory MiB, vcore milli-cores, and ``gpu``
milli-GPUs (``num_gpu`` x ``gpu_milli``, so a pod sharing 0.46 of a GPU asks 460, eight whole GPUs
8000; a node's GPUs are one aggregate, as the ideal assignment's). It runs ``deletion_time -
scheduled_time`` seconds; a pod the source never scheduled (no ``scheduled_time``, phase ``Pending``)
is withdrawn at its ``deletion_time`` if it still waits then. ``gpu_spec`` (``V100M16|V100M32``) is the
ask's node selector on the node label ``gpu_model`` (the node's ``model``). The queue is the value of
one pod column (``--queue-by``, ``qos`` by default) or ``default`` for all.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from importers.common import (
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
from messages.codec import BadInput

POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
PHASES = ("Pending", "Running", "Succeeded", "Failed")
GPU_LABEL = "gpu_model"
NO_VALUE = ("", "nan", "NaN", "None")  # how pandas-written CSVs spell a missing value


class _Row(ValueError):
    """A malformed row; the message says which column and why."""


def _int(row: dict[str, str], column: str) -> int:
    raw = row[column].strip()
    try:
        value = int(float(raw)) if "." in raw or "e" in raw.lower() else int(raw)
    except ValueError:
        raise _Row(f"{column}: {raw!r} is not a whole number") from None
    if value < 0:
        raise _Row(f"{column}: negative ({value})")
    return value


def _text(row: dict[str, str], column: str) -> str:
    value = row[column].strip()
    return "" if value in NO_VALUE else value


def _rows(
    path: Path, columns: tuple[str, ...], work: Workload, progress: Progress | None
) -> Iterator[tuple[int, dict[str, str]]]:
    """Each data row with its line number; a file without the needed columns is not importable."""
    with open(path, "rb") as handle:
        reader = csv.DictReader(text_lines(counted_lines(handle, progress), str(path), work.bad))
        missing = [c for c in columns if c not in (reader.fieldnames or ())]
        if missing:
            raise ImportError_(f"{path}: missing column(s) {', '.join(missing)} (found {reader.fieldnames})")
        for row in reader:
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
                "gpu": 1000 * _int(row, "gpu"),
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


def _pod(row: dict[str, str], queue_by: str | None) -> JobSpec:
    name = _text(row, "name")
    if not name:
        raise _Row("name: empty pod name")
    phase = _text(row, "pod_phase")
    if phase not in PHASES:
        raise _Row(f"pod_phase: {phase!r} is none of {', '.join(PHASES)}")
    num_gpu, gpu_milli = _int(row, "num_gpu"), _int(row, "gpu_milli")
    if gpu_milli > 1000:
        raise _Row(f"gpu_milli: {gpu_milli} is more than one GPU")
    if num_gpu > 0 and gpu_milli == 0:
        raise _Row(f"num_gpu is {num_gpu} but gpu_milli is 0")
    resource = {"memory": _int(row, "memory_mib"), "vcore": _int(row, "cpu_milli"), "gpu": num_gpu * gpu_milli}
    resource = {k: v for k, v in resource.items() if v > 0}
    if not resource:
        raise _Row("the pod asks for nothing")
    created, deleted = _int(row, "creation_time"), _int(row, "deletion_time")
    if deleted < created:
        raise _Row(f"deletion_time {deleted} is before creation_time {created}")
    scheduled = None if not _text(row, "scheduled_time") else _int(row, "scheduled_time")
    if scheduled is not None and not created <= scheduled <= deleted:
        raise _Row(f"scheduled_time {scheduled} is outside creation..deletion ({created}..{deleted})")
    spec = _text(row, "gpu_spec")
    selector = {GPU_LABEL: sorted({s.strip() for s in spec.split("|") if s.strip()})} if spec else {}
    if scheduled is None:  # never ran in the source: waits as long as it waited there, then is withdrawn
        ask = AskSpec(
            name,
            float(created),
            resource,
            duration=float(deleted - created),
            node_selector=selector,
            withdraw_at=float(deleted),
        )
    else:
        ask = AskSpec(name, float(created), resource, duration=float(deleted - scheduled), node_selector=selector)
    queue = queue_name(_text(row, queue_by)) if queue_by else "default"
    return JobSpec(app=name, queue=queue, t=float(created), asks=(ask,))


def read_pods(path: Path, work: Workload, queue_by: str | None = "qos", progress: Progress | None = None) -> None:
    if queue_by is not None and queue_by not in POD_COLUMNS:
        raise ImportError_(f"--queue-by {queue_by!r}: not a pod column ({', '.join(POD_COLUMNS)}) nor 'none'")
    first_seen: dict[str, int] = {}
    for line, row in _rows(path, POD_COLUMNS, work, progress):
        try:
            job = _pod(row, queue_by)
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


def read_pods_csv(pods: Path, nodes: Path, queue_by: str | None = "qos", progress: Progress | None = None) -> Workload:
    """Parse a node list and a pod list into a workload (malformed rows in ``bad``, with their line)."""
    work = Workload()
    read_nodes(nodes, work, progress)
    read_pods(pods, work, queue_by, progress)
    return work
