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

from sniper.actors.partition import PartitionRuntime
from sniper.actors.router import Router
from sniper.core import resources as res
from sniper.core.config import parse_partition
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.transport.bus import DECISIONS, FEED
from sniper.transport.memory import MemoryBus

GiB = 1024


def two_level_queues(leaves: int, node_count: int, node_mem: int, node_cpu: int) -> dict[str, Any]:
    """A root with about sqrt(leaves) parents, guarantees split evenly, no max (room to borrow)."""
    parents = max(1, round(math.sqrt(leaves)))
    per_parent = [leaves // parents + (1 if i < leaves % parents else 0) for i in range(parents)]
    total_mem, total_cpu = node_count * node_mem, node_count * node_cpu
    children = []
    n = 0
    for i, count in enumerate(per_parent):
        parent_g = res.as_quantities({"memory": total_mem * count // leaves, "vcore": total_cpu * count // leaves})
        kids = []
        for _ in range(count):
            kids.append(
                {
                    "name": f"q{n:03d}",
                    "resources": {
                        "guaranteed": res.as_quantities({"memory": total_mem // leaves, "vcore": total_cpu // leaves})
                    },
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
        start, cpu_start = time.perf_counter(), time.process_time()
        for event in ask_events:
            await bus.publish(FEED, "default", event)
        await bus.wait_idle()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
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
        "cpu_seconds": round(cpu, 3),
        "allocations_per_cpu_s": round(counts["allocated"] / cpu, 1) if cpu > 0 else None,
        "proposals_rejected": core.stats.placements_rejected,
        "proposals": core.stats.proposals,
    }


def bench_allocate(nodes: int, queues: int, asks: int, apps_per_queue: int = 10) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        return await _bench_allocate(nodes, queues, asks, apps_per_queue)

    return anyio.run(main, backend="asyncio", backend_options={"use_uvloop": True})


def bench_preempt(
    nodes: int, running: int, starving: int, ask_gib: int = 16, candidates: int | None = None
) -> dict[str, Any]:
    """One full sniper preemption round on a packed cluster, timed through the functions the actors run.

    Queue ``b`` holds ``running`` containers packed evenly on ``nodes`` 64 GiB nodes (the cluster full,
    far over its guarantee); queue ``a`` has ``starving`` asks of ``ask_gib`` GiB that missed a cycle.
    The round is the policy's quota computation, the allocator's preemption-mode placement and the
    cache's commit; ``candidates`` is ``preemption.max_candidate_nodes`` (``None``: the exact search
    over every node).
    """
    from sniper.core.allocator import AllocatorCore
    from sniper.core.cache import CacheCore
    from sniper.core.preemption.placement import answer_placement_request
    from sniper.core.preemption.policies import SniperPolicy
    from sniper.messages import decisions as dm
    from sniper.messages import protocol as pm

    node_mem, node_cpu = 64 * GiB, 16_000
    half = res.as_quantities({"memory": nodes * node_mem // 2, "vcore": nodes * node_cpu // 2})
    raw = {
        "name": "default",
        "preemption": {"policy": "sniper", "max_candidate_nodes": candidates},
        "queues": [
            {
                "name": "root",
                "queues": [
                    {"name": "a", "resources": {"guaranteed": half}},
                    {"name": "b", "resources": {"guaranteed": half}},
                ],
            }
        ],
    }
    config = parse_partition(raw)
    cache = CacheCore("default", config)
    for i in range(nodes):
        cache.handle_event(f.NodeAdded(node=f"n{i:05d}", capacity={"memory": node_mem, "vcore": node_cpu}))
    per_node = max(1, math.ceil(running / nodes))
    size = {"memory": node_mem // per_node, "vcore": node_cpu // per_node}
    cache.handle_event(f.AppAdded(app="b-app", queue="root.b"))
    cache.handle_event(f.AskAdded(app="b-app", ask="b-task", resource=size, count=running))
    placed = 0
    for i in range(nodes):
        for _ in range(per_node):
            if placed >= running:
                break
            cache.allocate("b-app", "b-task", f"n{i:05d}")
            placed += 1
    cache.handle_event(f.AppAdded(app="a-app", queue="root.a"))
    cache.handle_event(
        f.AskAdded(app="a-app", ask="a-task", resource={"memory": ask_gib * GiB, "vcore": 1000}, count=starving)
    )
    cache.tick(10.0)
    allocator = AllocatorCore("default")
    out = cache.drain()
    assert out.view is not None
    allocator.apply_view(
        pm.ViewDelta(**{**{k: getattr(out.view, k) for k in out.view.__struct_fields__}, "reset": False})
    )
    allocator.cycle()  # the starving asks miss a cycle: they become preemption candidates
    policy = SniperPolicy("default", config.preemption)
    start, cpu_start = time.perf_counter(), time.process_time()
    request = policy.round(allocator.state, allocator.view_seq, 10.0)
    assert isinstance(request, pm.PlacementRequest)
    reply = answer_placement_request(allocator, request)
    proposal = policy.on_reply(reply, 10.0)
    if proposal is not None:
        cache.handle_proposal(proposal)
    round_s, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    decisions = cache.drain().decisions
    victims = sum(1 for x in decisions if isinstance(x, dm.Preempt))
    return {
        "bench": "preempt",
        "nodes": nodes,
        "running": placed,
        "starving": starving,
        "placements": len(reply.placements),
        "victims": victims,
        "round_s": round(round_s, 3),
        "victims_per_s": round(victims / round_s, 1) if round_s > 0 else None,
        "round_cpu_s": round(cpu, 3),
        "proposals_rejected": cache.stats.placements_rejected,
        "max_candidate_nodes": candidates,
    }
