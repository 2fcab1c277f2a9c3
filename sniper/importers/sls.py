"""YARN Scheduler Load Simulator (SLS) input: its JSON job format and its topology (node) file.

The jobs file is a stream of JSON objects (Hadoop's ``hadoop-tools/hadoop-sls``, "SLS JSON input file
format"): jobs with ``job.start.ms``, ``job.end.ms``, ``job.queue.name``, ``job.id``, ``job.user``,
``job.count``, ``job.label.expression`` and ``job.tasks``; each task with ``count``,
``container.host``, ``container.start.ms``/``container.end.ms`` or ``container.duration.ms``/
``duration.ms``, ``container.priority`` (default 20), ``container.type`` (default ``map``),
``container.execution.type`` and resources as ``container.<resource>`` (``memory-mb`` or ``memory`` in
MB, ``vcores``, ``yarn.io/gpu`` as the count ``gpu`` (YARN's GPUs are whole), any other by name);
``{"num.nodes": N, "num.racks": R}`` entries add generated nodes. As in SLS: times are relative to the
first job's start; a job gets an application master container (1,024 MB and 1 vcore) for its whole run;
a task without resources gets 1,024 MB and 1 vcore; nodes come from the topology file (``{"rack": ...,
"nodes": [{"node": ..., "memory-mb": ..., "vcores": ..., "labels": "a(exclusive=true),b"}]}``) or else
from ``num.nodes`` and the tasks' hosts, 10,240 MB and 10 vcores each unless they say otherwise. Each
task entry becomes one ask of ``count`` containers, made at its ``container.start.ms`` (the request
time the trace observed); YARN's priority (a lower number is more important) is negated into Sniper's
(higher first). ``container.host`` is a locality preference in SLS (relaxed to rack and any), so it
only names nodes here; a YARN node label becomes a node label ``LABEL: "true"`` and
``job.label.expression`` the matching node selector. Opportunistic containers keep their execution type
and are counted. A Rumen job in the stream (``jobID``, ``mapTasks``, ...) is read as the SLS job Hadoop
converts it to (:mod:`sniper.importers.rumen`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sniper.importers.common import (
    AskSpec,
    ImportError_,
    JobSpec,
    NodeSpec,
    Progress,
    Workload,
    queue_name,
)
from sniper.importers.rumen import RumenError, is_rumen_job, sls_job
from sniper.messages.codec import BadInput
from sniper.messages.feed import MAX_AMOUNT

NODE_MEMORY_MB = 10_240  # SLS's yarn.sls.nm.memory.mb default
NODE_VCORES = 10  # yarn.sls.nm.vcores
CONTAINER_MEMORY_MB = 1_024  # yarn.sls.container.memory.mb
CONTAINER_VCORES = 1  # yarn.sls.container.vcores
AM_MEMORY_MB = 1_024  # yarn.sls.am.container.memory
AM_VCORES = 1  # yarn.sls.am.container.vcores
TASK_PRIORITY = 20
MAX_GENERATED_NODES = 1_000_000  # num.nodes beyond this is a typo, not a cluster
EXECUTION_TYPES = ("GUARANTEED", "OPPORTUNISTIC")
# container.* keys that are not resources
TASK_KEYS = frozenset(
    {
        "host",
        "start.ms",
        "end.ms",
        "duration.ms",
        "priority",
        "type",
        "execution.type",
        "allocation.id",
        "request.delay",
    }
)
RESOURCE_NAMES = {"memory-mb": "memory", "memory": "memory", "vcores": "vcore", "yarn.io/gpu": "gpu"}


class _Bad(ValueError):
    """A malformed job or task; the message says what."""


def _objects(text: str, source: str, bad: list[BadInput]) -> Iterator[tuple[int, Any]]:
    """Each JSON value of a stream (or of a top-level list) with the line it starts on; after a syntax
    error, reading resumes at the next line that opens an object."""
    decoder = json.JSONDecoder()
    pos, size = 0, len(text)
    while True:
        while pos < size and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= size:
            return
        line = text.count("\n", 0, pos) + 1
        try:
            value, end = decoder.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError) as err:
            if isinstance(err, RecursionError):  # the decoder recurses per level: too deep to read
                bad.append(BadInput(f"{source}:{line}", "not JSON Sniper reads: nested too deeply"))
                resume = pos + 1
            else:
                bad.append(BadInput(f"{source}:{err.lineno}", f"not JSON: {err.msg}"))
                resume = max(err.pos, pos + 1)
            nxt = text.find("\n{", resume - 1)
            if nxt < 0:
                return
            pos = nxt + 1
            continue
        pos = end
        if isinstance(value, list):
            for item in value:
                yield line, item
        else:
            yield line, value


def _number(obj: dict[str, Any], key: str, default: float | None = None) -> float:
    value = obj.get(key, default)
    if value is None:
        raise _Bad(f"{key} is missing")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _Bad(f"{key}: {value!r} is not a number") from None
    if not number >= 0 or number == float("inf"):
        raise _Bad(f"{key}: {value!r} is not a non-negative number")
    return number


def _resources(obj: dict[str, Any], prefix: str, defaults: dict[str, int]) -> dict[str, int]:
    """Feed-unit resources from ``prefix``-named keys (YARN names and units), over ``defaults``."""
    out = dict(defaults)
    for key in obj:
        if not key.startswith(prefix):
            continue
        name = key[len(prefix) :]
        if prefix and name in TASK_KEYS:
            continue
        if not prefix and name in ("node", "labels"):
            continue
        amount = int(_number(obj, key))
        target = RESOURCE_NAMES.get(name, name)
        out[target] = amount * 1000 if target == "vcore" else amount  # MB in YARN is MiB
        if out[target] > MAX_AMOUNT:
            raise _Bad(f"{key}: {obj[key]!r} is more than 2**53 in Sniper's units")
    return {k: v for k, v in out.items() if v > 0}


def _defaults(memory_mb: int, vcores: int) -> dict[str, int]:
    return {"memory": memory_mb, "vcore": vcores * 1000}


def _labels(raw: object) -> dict[str, str]:
    """YARN node labels ``a(exclusive=true),b`` as node labels ``{"a": "true", "b": "true"}``."""
    if raw is None:
        return {}
    out: dict[str, str] = {}
    for part in str(raw).split(","):
        name = part.split("(", 1)[0].strip()
        if name:
            out[name] = "true"
    return out


def _host(path: str) -> tuple[str, str]:
    """``/rack/host`` -> (host, rack); a bare host has no rack."""
    parts = [p for p in path.strip().split("/") if p]
    if not parts:
        raise _Bad(f"container.host {path!r} names no host")
    return parts[-1], "/".join(parts[:-1])


def _task(task: object, index: int, app: str, job_start: float) -> tuple[AskSpec, float, str | None, bool]:
    """One task entry as an ask, the time its last container ends there, its host if any, and whether
    it is opportunistic."""
    if not isinstance(task, dict):
        raise _Bad(f"task {index} is not an object")
    count = int(_number(task, "count", 1))
    start = _number(task, "container.start.ms", job_start * 1000) / 1000
    if "container.duration.ms" in task or "duration.ms" in task:
        key = "container.duration.ms" if "container.duration.ms" in task else "duration.ms"
        duration = _number(task, key) / 1000
    elif "container.end.ms" in task:
        end = _number(task, "container.end.ms") / 1000
        if end < start:
            raise _Bad(f"task {index}: container.end.ms is before container.start.ms")
        duration = end - start
    else:
        raise _Bad(f"task {index}: no duration (container.end.ms or duration.ms)")
    priority = task.get("container.priority", TASK_PRIORITY)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise _Bad(f"task {index}: container.priority {priority!r} is not an integer")
    kind = str(task.get("container.type", "map"))
    raw_execution = task.get("container.execution.type", "GUARANTEED")
    execution = str(raw_execution).upper()
    if execution not in EXECUTION_TYPES:
        raise _Bad(f"task {index}: container.execution.type {raw_execution!r} is none of {', '.join(EXECUTION_TYPES)}")
    host = task.get("container.host")
    if host is not None and not isinstance(host, str):
        raise _Bad(f"task {index}: container.host {host!r} is not a string")
    resource = _resources(task, "container.", _defaults(CONTAINER_MEMORY_MB, CONTAINER_VCORES))
    opportunistic = execution == "OPPORTUNISTIC"
    ask = AskSpec(
        f"{app}-{queue_name(kind)}-{index}",
        max(start, job_start),
        resource,
        count,
        -priority,
        duration=duration,
        opportunistic=opportunistic,
    )
    return ask, max(start, job_start) + duration, host, opportunistic


def _job(obj: dict[str, Any], number: int, hosts: set[str]) -> tuple[list[JobSpec], int]:
    """The job's copies (``job.count``) and how many of their containers are opportunistic."""
    start = _number(obj, "job.start.ms") / 1000
    end = _number(obj, "job.end.ms", 0) / 1000
    queue = queue_name(str(obj.get("job.queue.name", "default")))
    user = str(obj.get("job.user", "default"))
    copies = max(1, int(_number(obj, "job.count", 1)))
    job_id = obj.get("job.id")
    base = str(job_id) if job_id is not None and copies == 1 else f"sls_job_{number}"
    tasks = obj.get("job.tasks")
    if not isinstance(tasks, list) or not tasks:
        raise _Bad("no task for the job (job.tasks)")
    label = str(obj.get("job.label.expression", "")).strip()
    selector = {label: ["true"]} if label else {}
    out: list[JobSpec] = []
    found_hosts: set[str] = set()
    opportunistic_containers = 0
    for copy in range(copies):
        app = base if copies == 1 else f"{base}_{copy}"
        asks: list[AskSpec] = []
        last = start
        for index, task in enumerate(tasks):
            ask, finish, host, opportunistic = _task(task, index, app, start)
            if ask.count == 0:
                continue
            if opportunistic:
                opportunistic_containers += ask.count
            if selector:
                ask = dataclasses.replace(ask, node_selector=selector)
            asks.append(ask)
            last = max(last, finish)
            if host is not None:
                found_hosts.add(host)
        am_duration = end - start if end > start else last - start
        am = AskSpec(
            f"{app}-am",
            start,
            _defaults(AM_MEMORY_MB, AM_VCORES),
            am=True,
            duration=am_duration,
            node_selector=selector,
        )
        out.append(JobSpec(app=app, queue=queue, t=start, asks=(am, *asks), user=user))
    hosts.update(found_hosts)
    return out, opportunistic_containers


def read_topology(path: Path, work: Workload, progress: Progress | None = None) -> None:
    """SLS's node file: racks of nodes, each with optional resources and YARN node labels."""
    data = path.read_bytes()
    if progress is not None:
        progress(len(data))
    seen: set[str] = set()
    for line, rack in _objects(data.decode("utf-8-sig", errors="replace"), str(path), work.bad):
        try:
            if not isinstance(rack, dict) or not isinstance(rack.get("nodes"), list):
                raise _Bad('a topology entry is {"rack": ..., "nodes": [...]}')
            rack_name = str(rack.get("rack", ""))
            for node in rack["nodes"]:
                if not isinstance(node, dict) or not node.get("node"):
                    raise _Bad(f"node entry {node!r} has no name")
                host, _ = _host(str(node["node"]))
                if host in seen:
                    raise _Bad(f"duplicate node {host}")
                seen.add(host)
                labels = _labels(node.get("labels"))
                if rack_name:
                    labels["rack"] = rack_name
                capacity = _resources(node, "", _defaults(NODE_MEMORY_MB, NODE_VCORES))
                work.nodes.append(NodeSpec(host, capacity, labels))
        except _Bad as err:
            work.bad.append(BadInput(f"{path}:{line}", str(err)))


def read_sls(jobs: Path, nodes: Path | None = None, progress: Progress | None = None) -> Workload:
    """Parse an SLS jobs file (and its topology file, if given) into a workload."""
    work = Workload()
    data = jobs.read_bytes()
    if progress is not None:
        progress(len(data))
    hosts: set[str] = set()
    generated: set[str] = set()
    apps: dict[str, int] = {}  # app -> line of its job
    number = 0
    for line, obj in _objects(data.decode("utf-8-sig", errors="replace"), str(jobs), work.bad):
        try:
            if not isinstance(obj, dict):
                raise _Bad("an entry is a JSON object (a job or a num.nodes entry)")
            if "num.nodes" in obj:
                count, racks = int(_number(obj, "num.nodes")), max(1, int(_number(obj, "num.racks", 1)))
                if count > MAX_GENERATED_NODES:
                    raise _Bad(f"num.nodes: {obj['num.nodes']!r} is more than {MAX_GENERATED_NODES:,} nodes")
                racks = min(racks, max(count, 1))
                generated.update(f"/rack{i % racks}/node{i}" for i in range(count))
                continue
            if is_rumen_job(obj):
                obj, untimed = sls_job(obj)
                work.note("Rumen jobs (each task attempt a container)")
                if untimed:
                    work.note("Rumen attempts without start or finish time (left out)", untimed)
            elif not {"job.start.ms", "job.tasks"} & obj.keys():
                keys = ", ".join(sorted(obj)[:5])
                raise _Bad(f"neither an SLS job (job.start.ms, job.tasks) nor a Rumen job (jobID): keys {keys}")
            number += 1
            parsed, opportunistic = _job(obj, number - 1, hosts)
            clash = [job.app for job in parsed if job.app in apps]
            if clash:
                raise _Bad(f"duplicate job id {clash[0]} (first on line {apps[clash[0]]})")
            apps.update((job.app, line) for job in parsed)
            work.jobs.extend(parsed)
            if opportunistic:
                work.note("opportunistic containers", opportunistic)
        except (_Bad, RumenError) as err:
            work.bad.append(BadInput(f"{jobs}:{line}", str(err)))
    if nodes is not None:
        read_topology(nodes, work, progress)
    else:
        named: dict[str, str] = {}
        for path in sorted(generated | hosts):
            try:
                host, rack = _host(path)
            except _Bad as err:
                work.bad.append(BadInput(str(jobs), str(err)))
                continue
            named.setdefault(host, rack)
        for host, rack in sorted(named.items()):
            work.nodes.append(NodeSpec(host, _defaults(NODE_MEMORY_MB, NODE_VCORES), {"rack": rack} if rack else {}))
    if not work.nodes:
        skipped = f" ({len(work.bad)} entries skipped; the first: {work.bad[0]})" if work.bad else ""
        raise ImportError_(
            "no node: give --nodes (an SLS topology file), or num.nodes or container.host in the jobs" + skipped
        )
    return work
