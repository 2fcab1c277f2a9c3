"""Benchmarks through the real actors on the memory transport (figures, never assertions).

``bench_allocate`` builds a partition of N nodes, Q leaf queues in a two-level tree and A pending
single-container asks, then measures committed allocations per second from the first ask published
until every actor is idle again. Only this module and the simulator driver read the wall clock.
"""

from __future__ import annotations

import math
import time
from typing import Any

import anyio

from actors.partition import PartitionRuntime
from actors.router import Router
from core.config import parse_partition
from messages import decisions as d
from messages import feed as f
from transport.bus import DECISIONS, FEED
from transport.memory import MemoryBus

GiB = 1024


def two_level_queues(leaves: int, node_count: int, node_mem: int, node_cpu: int) -> dict[str, Any]:
    """A root with about sqrt(leaves) parents, guarantees split evenly, no max (room to borrow)."""
    parents = max(1, round(math.sqrt(leaves)))
    per_parent = [leaves // parents + (1 if i < leaves % parents else 0) for i in range(parents)]
    total_mem, total_cpu = node_count * node_mem, node_count * node_cpu
    children = []
    n = 0
    for i, count in enumerate(per_parent):
        parent_g = {"memory": total_mem * count // leaves, "vcore": total_cpu * count // leaves}
        kids = []
        for _ in range(count):
            kids.append(
                {
                    "name": f"q{n:03d}",
                    "resources": {"guaranteed": {"memory": total_mem // leaves, "vcore": total_cpu // leaves}},
                }
            )
            n += 1
        children.append({"name": f"p{i:02d}", "resources": {"guaranteed": parent_g}, "queues": kids})
    return {
        "name": "default",
        "preemption": {"policy": "none"},
        "queues": [{"name": "root", "queues": children}],
    }


async def _bench_allocate(nodes: int, queues: int, asks: int, apps_per_queue: int) -> dict[str, Any]:
    node_mem, node_cpu = 64 * GiB, 16_000
    config = parse_partition(two_level_queues(queues, nodes, node_mem, node_cpu))
    bus = MemoryBus()
    router = Router(bus)
    runtime = PartitionRuntime("default", router, config=config)
    decisions = bus.subscribe(DECISIONS, group="bench", capacity=1 << 20)
    counts = {"allocated": 0, "other": 0}

    async def count_decisions() -> None:
        while True:
            try:
                dec = await decisions.receive()
            except anyio.EndOfStream:
                return
            if isinstance(dec, d.Allocated):
                counts["allocated"] += 1
            else:
                counts["other"] += 1
            decisions.ack()

    leaves = [q.path for q in config.queues() if q.is_leaf]
    async with anyio.create_task_group() as tg:
        await tg.start(runtime.run)
        tg.start_soon(count_decisions)
        for i in range(nodes):
            await bus.publish(
                FEED, "default", f.NodeAdded(node=f"n{i:05d}", capacity={"memory": node_mem, "vcore": node_cpu})
            )
        apps = [f"{leaf.rsplit('.', 1)[-1]}-app{j}" for leaf in leaves for j in range(apps_per_queue)]
        for idx, app in enumerate(apps):
            await bus.publish(FEED, "default", f.AppAdded(app=app, queue=leaves[idx // apps_per_queue]))
        await bus.wait_idle()
        ask_events = [
            f.AskAdded(app=apps[i % len(apps)], ask=f"ask{i}", resource={"memory": GiB, "vcore": 250}, count=1)
            for i in range(asks)
        ]
        start = time.perf_counter()
        for event in ask_events:
            await bus.publish(FEED, "default", event)
        await bus.wait_idle()
        elapsed = time.perf_counter() - start
        tg.cancel_scope.cancel()
    core = runtime.cache_core
    assert core is not None
    return {
        "bench": "allocate",
        "nodes": nodes,
        "queues": queues,
        "asks": asks,
        "allocations": counts["allocated"],
        "seconds": round(elapsed, 3),
        "allocations_per_s": round(counts["allocated"] / elapsed, 1) if elapsed > 0 else None,
        "proposals_rejected": core.stats.placements_rejected,
        "proposals": core.stats.proposals,
    }


def bench_allocate(nodes: int, queues: int, asks: int, apps_per_queue: int = 10) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        return await _bench_allocate(nodes, queues, asks, apps_per_queue)

    return anyio.run(main, backend="asyncio", backend_options={"use_uvloop": True})
