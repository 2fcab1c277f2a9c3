"""``sniper bench bigpartition``: one large partition built through a real core, and whether the core's
event loop keeps up with it.

A ``sniper core`` subprocess (its metrics endpoint on a free loopback port) on fresh topics; the driver
configures one partition (one leaf queue, ``nodes`` nodes with room for every ask, admission bounds
raised past the defaults so that the whole partition is built) and publishes
``apps`` ``app_added`` events with one single-container ``ask_added`` each, in batches as fast as the
producer goes. Figures: the placement time (first publish to the last ``allocated`` read back), the
core's event-loop lag p99 and the highest bucket any lag reached (from its
``sniper_event_loop_lag_seconds`` histogram: bucket upper bounds), the CPU seconds of the longest step
that held its loop (``sniper_event_loop_longest_hold_cpu_seconds``), its peak RSS, the epochs the
partition went through (each past the first is a restart: a lapsed lease or a crash) and the core's
exit code if it ended. Figures only: nothing here asserts.
"""

from __future__ import annotations

import math
import socket
import time
import urllib.request
import uuid
from typing import Any

import anyio
import anyio.to_thread
from prometheus_client.parser import text_string_to_metric_families

from sniper.bench.e2e import start_core, stop_core
from sniper.bench.inprocess import BENCH_ADMISSION
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.transport.bus import DECISIONS, FEED
from sniper.transport.kafka import KafkaBus, KafkaSettings

PARTITION = "big"
BATCH = 1_000  # feed records per publish
LAG_METRIC = "sniper_event_loop_lag_seconds"
HOLD_METRIC = "sniper_event_loop_longest_hold_cpu_seconds"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        return str(response.read().decode())


def loop_lag(text: str) -> tuple[float, float]:
    """(p99, highest bucket reached) of the loop-lag histogram in a metrics page, as bucket upper bounds
    (``inf``: over the last finite bucket; NaN: no observation)."""
    buckets: list[tuple[float, float]] = []
    for family in text_string_to_metric_families(text):
        if family.name == LAG_METRIC:
            buckets = sorted(
                (float(s.labels["le"]), s.value) for s in family.samples if s.name == f"{LAG_METRIC}_bucket"
            )
    count = buckets[-1][1] if buckets else 0.0
    if not count:
        return math.nan, math.nan
    p99 = next(le for le, seen in buckets if seen >= 0.99 * count)
    highest = next(le for le, seen in buckets if seen >= count)
    return p99, highest


def longest_hold_cpu(text: str) -> float:
    """The CPU seconds of the longest step that held the loop, from a metrics page (NaN: not on it)."""
    for family in text_string_to_metric_families(text):
        if family.name == HOLD_METRIC:
            return round(float(family.samples[0].value), 3)
    return math.nan


def _peak_rss_mib(pid: int) -> float:
    """The peak resident set of process ``pid`` in MiB (Linux ``/proc``; NaN elsewhere)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return math.nan


def _events(apps: int, nodes: int) -> list[tuple[str, f.Feed]]:
    per_node = math.ceil(apps / nodes)
    config = {
        "name": PARTITION,
        "admission": BENCH_ADMISSION,  # the whole partition, past the defaults: what the core's loop does with it
        "queues": [{"name": "root", "queues": [{"name": "a"}]}],
    }
    out: list[tuple[str, f.Feed]] = [(PARTITION, f.PartitionConfigEvent(partition=PARTITION, config=config))]
    for n in range(nodes):
        capacity = {"memory": per_node * 1024, "vcore": per_node * 1000}
        out.append((PARTITION, f.NodeAdded(partition=PARTITION, id=f"n{n}", node=f"n{n}", capacity=capacity)))
    for i in range(apps):
        out.append((PARTITION, f.AppAdded(partition=PARTITION, id=f"app{i}", app=f"app{i}", queue="root.a")))
        ask = f.AskAdded(
            partition=PARTITION, id=f"ask{i}", app=f"app{i}", ask="k", resource={"memory": 1024, "vcore": 1000}
        )
        out.append((PARTITION, ask))
    return out


async def bench_bigpartition(
    base: KafkaSettings, *, apps: int, nodes: int, limit: float = 900.0, core_options: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Build a partition of ``apps`` apps with one container each through a core subprocess."""
    settings = KafkaSettings(
        **{**{n: getattr(base, n) for n in base.__dataclass_fields__}, "prefix": f"sniper-big.{uuid.uuid4().hex[:8]}."}
    )
    port = _free_port()
    placed: list[float] = []
    epochs: set[int] = set()
    done = anyio.Event()
    last_line = [""]
    result: dict[str, Any] = {"apps": apps, "nodes": nodes}
    async with KafkaBus(settings) as bus:
        await bus.start()
        decisions = await bus.subscribe_ready(DECISIONS, group=f"{settings.prefix}bench-reader", capacity=1 << 16)
        core = await start_core(settings, "big", "--metrics-port", str(port), *core_options)
        try:
            async with anyio.create_task_group() as tg:

                async def read() -> None:
                    seen: set[str] = set()
                    while True:
                        try:
                            dec = await decisions.receive()
                        except (anyio.EndOfStream, anyio.ClosedResourceError):
                            return
                        decisions.ack()
                        epochs.add(dec.epoch)
                        if isinstance(dec, d.Allocated) and dec.app not in seen:
                            seen.add(dec.app)
                            placed.append(time.perf_counter())
                            if len(seen) == apps:
                                done.set()

                async def watch_core() -> None:
                    assert core.stderr is not None
                    async for chunk in core.stderr:  # drained, or the core would block on its log
                        lines = chunk.decode(errors="replace").strip().splitlines()
                        if lines:
                            last_line[0] = lines[-1]
                    await core.wait()
                    done.set()  # it ended: report what it placed

                tg.start_soon(read)
                tg.start_soon(watch_core)
                events = _events(apps, nodes)
                began = time.perf_counter()
                with anyio.move_on_after(limit):
                    for first in range(0, len(events), BATCH):
                        await bus.publish_many(FEED, events[first : first + BATCH])
                    await done.wait()
                result["placed"] = len(placed)
                result["placement_s"] = round(placed[-1] - began, 1) if placed else None
                if core.returncode is None:
                    page = await anyio.to_thread.run_sync(_scrape, port)
                    p99, highest = loop_lag(page)
                    result["loop_lag_p99_s"] = p99
                    result["loop_lag_highest_bucket_s"] = highest
                    result["loop_longest_hold_cpu_s"] = longest_hold_cpu(page)
                    result["core_peak_rss_mib"] = _peak_rss_mib(core.pid)
                result["epochs"] = len(epochs)
                result["core_exit_code"] = core.returncode
                if core.returncode is not None:
                    result["core_last_line"] = last_line[0][:300]
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await stop_core(core)
    return result
