"""``sniper bench e2e``: feed-event-to-decision latency and sustained throughput through a real broker.

Each run starts ``sniper core`` subprocesses in one consumer group on fresh topics (a unique prefix,
8 Kafka partitions by default), configures ``partitions`` scheduler partitions (one leaf queue, one
large node each), waits until every partition answered a marker (so start-up and recovery are not
measured), then publishes ``events`` single-container asks round-robin over the partitions at
``rate`` events/s (0: as fast as the producer goes, in batches). Latency of one event: from just
before its batch was handed to the producer to the moment its ``allocated`` decision was read back.
Throughput: events over the time from the first publish to the last decision. The feed's records
and the decisions are msgpack or JSON as the settings say (``--format``, ``--decisions-format``).

With ``cores`` > 1 a second run uses that many processes and ``scale_out_ratio`` is its events/s over
the one-process run's. Figures only: nothing here asserts. :func:`start_core` and :func:`stop_core`
run a core subprocess for anyone who needs one (the chaos tests too).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import time
import uuid
from typing import Any

import anyio
from anyio.abc import Process

from sniper.bench.cpulimit import CpuLimit
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.transport.bus import DECISIONS, FEED
from sniper.transport.kafka import KafkaBus, KafkaSettings, kafka_partition

ASSIGNED = re.compile(r"assigned Kafka partitions \[([0-9, ]*)\]")  # a core's log line at each assignment


def spread_partition_names(count: int, kafka_partitions: int) -> list[str]:
    """``count`` scheduler-partition names whose keys hash round-robin over the Kafka partitions.

    Naive names (``bench0`` .. ``bench7``) hash onto only six of eight Kafka partitions, three on one,
    so a group of two processes splits them 5 to 3 and no number of CPUs makes two processes 1.6 times
    one. A real cluster's partitions are what they are; a benchmark of scale-out needs an even split.
    """
    by_partition: dict[int, list[str]] = {kp: [] for kp in range(kafka_partitions)}
    candidate = 0
    per_partition = math.ceil(count / kafka_partitions)
    while any(len(names) < per_partition for names in by_partition.values()):
        name = f"bench{candidate}"
        by_partition[kafka_partition(name, kafka_partitions)].append(name)
        candidate += 1
    return [by_partition[slot % kafka_partitions][slot // kafka_partitions] for slot in range(count)]


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far (Linux ``/proc``; NaN elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


async def start_core(settings: KafkaSettings, group: str, *options: str) -> Process:
    """A ``sniper core`` subprocess in ``group`` on the broker and topics of ``settings`` (its log on stderr)."""
    env = {**os.environ, "SNIPER_KAFKA_SESSION_TIMEOUT_MS": str(settings.session_timeout_ms)}
    command = [
        sys.executable,
        "-m",
        "sniper",
        "core",
        "--bootstrap",
        settings.bootstrap,
        "--prefix",
        settings.prefix,
        "--kafka-partitions",
        str(settings.partitions),
        "--group",
        group,
        "--metrics-port",  # several cores share this machine: no endpoint unless ``options`` asks for one
        "0",
        *options,
    ]
    return await anyio.open_process(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


async def _watch_log(process: Process, assigned: anyio.Event) -> None:
    assert process.stderr is not None
    buffer = b""
    async for chunk in process.stderr:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if ASSIGNED.search(line.decode(errors="replace")):
                assigned.set()


async def stop_core(process: Process) -> None:
    """Stop a core subprocess: SIGTERM (a clean stop), SIGKILL if it is still there after 15 s."""
    if process.returncode is None:
        process.terminate()
        with anyio.move_on_after(15):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
    await process.aclose()


async def one_run(
    base: KafkaSettings, *, events: int, rate: float, partitions: int, cores: int, core_cpus: float | None = None
) -> dict[str, Any]:
    """One measured run; the feed and decisions go in ``base.feed_format`` and ``base.decisions_format``."""
    settings = KafkaSettings(**{**_fields(base), "prefix": f"sniper-bench.{uuid.uuid4().hex[:8]}."})
    names = spread_partition_names(partitions, settings.partitions)
    sent: dict[str, float] = {}
    latencies: list[float] = []
    done = anyio.Event()
    markers: set[str] = set()
    markers_done = anyio.Event()
    last = [0.0]
    async with KafkaBus(settings) as bus:
        await bus.start()
        decisions = await bus.subscribe_ready(DECISIONS, group=f"{settings.prefix}bench-reader", capacity=1 << 16)
        processes: list[Process] = []
        limit = CpuLimit(core_cpus) if core_cpus else None
        async with anyio.create_task_group() as tg:

            async def read() -> None:
                while True:
                    try:
                        dec = await decisions.receive()
                    except (anyio.EndOfStream, anyio.ClosedResourceError):
                        return
                    now = time.perf_counter()
                    decisions.ack()
                    if isinstance(dec, d.Rejected) and dec.event.startswith("marker-"):
                        markers.add(dec.partition)
                        if len(markers) == len(names):
                            markers_done.set()
                    elif isinstance(dec, d.Allocated):
                        start = sent.pop(f"{dec.partition}/{dec.ask}", None)
                        if start is not None:
                            latencies.append(now - start)
                            last[0] = now
                            if len(latencies) == events:
                                done.set()

            tg.start_soon(read)
            try:
                for _ in range(cores):
                    process = await start_core(
                        settings, "bench", "--snapshot-interval", "5", "--decisions-format", settings.decisions_format
                    )
                    assigned = anyio.Event()
                    processes.append(process)
                    if limit is not None:
                        limit.apply(process.pid)
                    tg.start_soon(_watch_log, process, assigned)
                    await assigned.wait()
                setup: list[tuple[str, Any]] = []
                for name in names:
                    setup += [
                        (name, f.PartitionConfigEvent(partition=name, config=partition_config(name))),
                        (name, f.NodeAdded(partition=name, node="n1", capacity={"memory": 2**39, "vcore": 2**39})),
                        (name, f.AppAdded(partition=name, app="app", queue="root.a")),
                        (name, f.AskAdded(partition=name, id=f"marker-{name}", app="none", ask="m", resource={"m": 1})),
                    ]
                await bus.publish_many(FEED, setup)
                await markers_done.wait()
                batch = 200 if rate <= 0 else max(1, min(200, int(rate / 50)))
                began = time.perf_counter()
                cpu_began = [time.process_time()] + [_cpu_seconds(p.pid) for p in processes]
                for first in range(0, events, batch):
                    items = []
                    for i in range(first, min(events, first + batch)):
                        name = names[i % len(names)]
                        ask = f.AskAdded(partition=name, app="app", ask=f"k{i}", resource={"memory": 1, "vcore": 1})
                        items.append((name, ask))
                    if rate > 0:
                        due = began + first / rate
                        delay = due - time.perf_counter()
                        if delay > 0:
                            await anyio.sleep(delay)  # pacing at the requested rate
                    now = time.perf_counter()
                    for name, ask in items:
                        sent[f"{name}/{ask.ask}"] = now
                    await bus.publish_many(FEED, items)
                await done.wait()
                cpu_done = [time.process_time()] + [_cpu_seconds(p.pid) for p in processes]
            finally:
                with anyio.CancelScope(shield=True):
                    for process in processes:
                        await stop_core(process)
                    if limit is not None:
                        limit.close()
            tg.cancel_scope.cancel()
    span = last[0] - began
    return {
        "cores": cores,
        "events": events,
        "partitions": partitions,
        "rate": rate,
        "feed_format": settings.feed_format,
        "decisions_format": settings.decisions_format,
        "core_cpus": core_cpus,
        "p50_ms": round(_percentile(latencies, 0.5) * 1000, 2),
        "p99_ms": round(_percentile(latencies, 0.99) * 1000, 2),
        "max_ms": round(max(latencies) * 1000, 2),
        "events_per_s": round(events / span, 1) if span > 0 else None,
        "driver_cpu_s": round(cpu_done[0] - cpu_began[0], 2),
        "core_cpu_s": [round(end - start, 2) for start, end in zip(cpu_began[1:], cpu_done[1:], strict=True)],
    }


def partition_config(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "preemption": {"policy": "none"},
        "queues": [{"name": "root", "queues": [{"name": "a"}]}],
    }


def _fields(settings: KafkaSettings) -> dict[str, Any]:
    return {name: getattr(settings, name) for name in settings.__dataclass_fields__}


async def bench_e2e(
    settings: KafkaSettings,
    *,
    events: int,
    rate: float,
    partitions: int,
    cores: int,
    core_cpus: float | None = None,
    limit: float = 600.0,
) -> dict[str, Any]:
    """One run with a single core process and, if ``cores`` > 1, one with ``cores`` (scale-out).

    ``core_cpus`` caps every core process at that many CPUs (:class:`CpuLimit`), as a deployment gives
    each process its own CPU budget; unset, the processes share the machine with the broker and driver.
    """
    with anyio.fail_after(limit):
        single = await one_run(settings, events=events, rate=rate, partitions=partitions, cores=1, core_cpus=core_cpus)
        result: dict[str, Any] = {
            "p50_ms": single["p50_ms"],
            "p99_ms": single["p99_ms"],
            "events_per_s": single["events_per_s"],
            "runs": [single],
        }
        if cores > 1:
            multi = await one_run(
                settings, events=events, rate=rate, partitions=partitions, cores=cores, core_cpus=core_cpus
            )
            result["runs"].append(multi)
            if single["events_per_s"] and multi["events_per_s"]:
                result["scale_out_ratio"] = round(multi["events_per_s"] / single["events_per_s"], 2)
    return result
