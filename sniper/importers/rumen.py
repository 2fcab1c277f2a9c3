"""Hadoop Rumen job traces (``hadoop rumen TraceBuilder`` output, the format of SLS's own sample input),
read as the SLS jobs Hadoop's ``RumenToSLSConverter`` (``rumen2sls.sh``) writes from them.

A Rumen job (``jobID``, ``user``, ``queue``, ``submitTime``, ``finishTime``, ``mapTasks``,
``reduceTasks``; times in epoch milliseconds) becomes an SLS job: ``job.start.ms`` its submission,
``job.end.ms`` its finish, and one task entry per attempt of each map (priority 20) and reduce
(priority 10) task, from the attempt's ``startTime`` to its ``finishTime`` on its ``hostName``. Every
attempt held a container, failed and killed ones too; an attempt without both times (Rumen writes -1)
never held one and is left out. ``otherTasks`` (set-up and clean-up) are left out, as the converter does.
"""

from __future__ import annotations

from typing import Any

TASKS = (("mapTasks", "map", 20), ("reduceTasks", "reduce", 10))  # Rumen key, SLS container.type, priority


class RumenError(ValueError):
    """A Rumen job that cannot be read; the message says what."""


def is_rumen_job(obj: dict[str, Any]) -> bool:
    """A Rumen ``LoggedJob`` (it has ``jobID``) rather than an SLS job (``job.tasks``)."""
    return "jobID" in obj and "job.tasks" not in obj


def _millis(value: object) -> int | None:
    """A Rumen time: a whole number of milliseconds, or None where Rumen has none (-1, missing)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return int(value)


def sls_job(job: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The SLS job for a Rumen job, and how many of its attempts had no start or finish time."""
    job_id = job.get("jobID")
    submit = _millis(job.get("submitTime"))
    if submit is None:
        raise RumenError(f"Rumen job {job_id}: submitTime {job.get('submitTime')!r} is not a time in ms")
    tasks: list[dict[str, Any]] = []
    untimed = 0
    for key, kind, priority in TASKS:
        entries = job.get(key) or []
        if not isinstance(entries, list):
            raise RumenError(f"Rumen job {job_id}: {key} is not a list")
        for task in entries:
            attempts = task.get("attempts") if isinstance(task, dict) else None
            if not isinstance(attempts, list):
                raise RumenError(f"Rumen job {job_id}: a task of {key} has no attempts list")
            for attempt in attempts:
                if not isinstance(attempt, dict):
                    raise RumenError(f"Rumen job {job_id}: an attempt of {key} is not an object")
                start, finish = _millis(attempt.get("startTime")), _millis(attempt.get("finishTime"))
                if start is None or finish is None or finish < start:
                    untimed += 1
                    continue
                entry: dict[str, Any] = {
                    "container.start.ms": start,
                    "container.end.ms": finish,
                    "container.priority": priority,
                    "container.type": kind,
                }
                if isinstance(attempt.get("hostName"), str):
                    entry["container.host"] = attempt["hostName"]
                tasks.append(entry)
    if not tasks:
        raise RumenError(f"Rumen job {job_id}: no map or reduce attempt with a startTime and a finishTime")
    out: dict[str, Any] = {
        "job.start.ms": submit,
        "job.queue.name": str(job.get("queue") or "default"),
        "job.id": str(job_id),
        "job.user": str(job.get("user") or "default"),
        "job.tasks": tasks,
    }
    finish = _millis(job.get("finishTime"))
    if finish is not None and finish > submit:
        out["job.end.ms"] = finish
    return out, untimed
