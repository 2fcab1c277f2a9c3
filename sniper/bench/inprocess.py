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


# The benches measure the core's work on partitions larger than the default admission bounds allow.
BENCH_ADMISSION = {"max_pending_per_ask": 10**7, "max_containers_per_app": 10**7, "max_containers": 10**7}


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
        "admission": BENCH_ADMISSION,
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
    nodes: int,
    running: int,
    starving: int,
    ask_gib: int = 16,
    candidates: int | None = None,
    profile: str | None = None,
) -> dict[str, Any]:
    """One full sniper preemption round on a packed cluster, timed through the functions the actors run.

    Queue ``b`` holds ``running`` containers packed evenly on ``nodes`` 64 GiB nodes (the cluster full,
    far over its guarantee); queue ``a`` has ``starving`` asks of ``ask_gib`` GiB that missed a cycle.
    The round is the policy's quota computation, the allocator's preemption-mode placement and the
    cache's commit; ``candidates`` is ``preemption.max_candidate_nodes`` (``None``: the exact search
    over every node). ``profile``: a file to write the round's cProfile statistics to (the round alone).
    """
    import cProfile

    from sniper.core.allocator import Allocator
    from sniper.core.cache import Cache
    from sniper.core.preemption.placement import answer_placement_request
    from sniper.core.preemption.policies import SniperPolicy
    from sniper.messages import decisions as dm
    from sniper.messages import protocol as pm

    node_mem, node_cpu = 64 * GiB, 16_000
    half = res.as_quantities({"memory": nodes * node_mem // 2, "vcore": nodes * node_cpu // 2})
    raw = {
        "name": "default",
        "admission": BENCH_ADMISSION,
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
    cache = Cache("default", config)
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
    allocator = Allocator("default")
    out = cache.drain()
    assert out.view is not None
    allocator.apply_view(
        pm.ViewDelta(**{**{k: getattr(out.view, k) for k in out.view.__struct_fields__}, "reset": False})
    )
    allocator.cycle()  # the starving asks miss a cycle: they become preemption candidates
    policy = SniperPolicy("default", config.preemption)
    profiler = cProfile.Profile() if profile is not None else None
    start, cpu_start = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.enable()
    request = policy.round(allocator.state, allocator.view_seq, 10.0)
    assert isinstance(request, pm.PlacementRequest)
    reply = answer_placement_request(allocator, request)
    proposal = policy.on_reply(reply, 10.0)
    if proposal is not None:
        cache.handle_proposal(proposal)
    if profiler is not None:
        profiler.disable()
    round_s, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    if profiler is not None and profile is not None:
        profiler.dump_stats(profile)
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


def bench_opportunistic(
    nodes: int, opportunistic: int, starving: int, cycles: int = 50, *, gang: int = 1, users: int = 0
) -> dict[str, Any]:
    """Allocator cycles while guaranteed asks starve beside opportunistic containers that cannot help.

    Queue ``b`` holds 40 GiB of each 64 GiB node with guaranteed work and fills the other 24 GiB with
    ``opportunistic`` containers spread evenly; queue ``a`` has ``starving`` asks of 32 GiB that no
    node holds even with its opportunistic containers gone. Each cycle tries them again (none is
    placed, none evicts): its cost must not grow with ``opportunistic``. ``gang`` > 1 makes each ask a
    gang of that many; ``users`` > 0 spreads the asks over that many apps of as many users under a
    user limit on queue ``a`` (every gang unit then checks the limits).
    """
    from sniper.core.allocator import Allocator
    from sniper.core.cache import Cache
    from sniper.messages import protocol as pm

    node_mem = 64 * GiB
    half = res.as_quantities({"memory": nodes * node_mem // 2})
    a_queue: dict[str, Any] = {"name": "a", "resources": {"guaranteed": half}}
    if users:
        every = res.as_quantities({"memory": nodes * node_mem})
        a_queue["limits"] = [{"limit": "each user", "users": ["*"], "maxresources": every}]
    raw = {
        "name": "default",
        "admission": BENCH_ADMISSION,
        "queues": [{"name": "root", "queues": [a_queue, {"name": "b", "resources": {"guaranteed": half}}]}],
    }
    cache = Cache("default", parse_partition(raw))
    names = [f"n{i:05d}" for i in range(nodes)]
    for name in names:
        cache.handle_event(f.NodeAdded(node=name, capacity={"memory": node_mem}))
    cache.handle_event(f.AppAdded(app="b-app", queue="root.b"))
    cache.handle_event(f.AskAdded(app="b-app", ask="b-task", resource={"memory": 40 * GiB}, count=nodes))
    per_node = max(1, math.ceil(opportunistic / nodes))
    cache.handle_event(
        f.AskAdded(
            app="b-app",
            ask="b-idle",
            resource={"memory": 24 * GiB // per_node},
            count=per_node * nodes,
            execution_type="opportunistic",
        )
    )
    for name in names:
        cache.allocate("b-app", "b-task", name)
        for _ in range(per_node):
            cache.allocate("b-app", "b-idle", name)
    apps = [f"a-app{i}" for i in range(max(1, users))]
    for i, app in enumerate(apps):
        cache.handle_event(f.AppAdded(app=app, queue="root.a", user=f"user{i}" if users else ""))
    if gang > 1:
        for i in range(starving):
            ask = f.AskAdded(
                app=apps[i % len(apps)], ask=f"a-gang{i}", resource={"memory": 32 * GiB}, count=gang, gang_min=gang
            )
            cache.handle_event(ask)
    else:
        for i, app in enumerate(apps):
            count = starving // len(apps) + (1 if i < starving % len(apps) else 0)
            if count:
                cache.handle_event(f.AskAdded(app=app, ask="a-task", resource={"memory": 32 * GiB}, count=count))
    allocator = Allocator("default")
    out = cache.drain()
    assert out.view is not None
    allocator.apply_view(
        pm.ViewDelta(**{**{k: getattr(out.view, k) for k in out.view.__struct_fields__}, "reset": False})
    )
    state = allocator.state
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(cycles):
        state.version += 1  # as if something changed: a full cycle, not the fruitless shortcut
        assert allocator.cycle() is None
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return {
        "bench": "opportunistic",
        "nodes": nodes,
        "opportunistic": per_node * nodes,
        "starving": starving,
        "gang": gang,
        "users": users,
        "cycles": cycles,
        "cycle_ms": round(wall / cycles * 1000, 3),
        "cycle_cpu_ms": round(cpu / cycles * 1000, 3),
    }


def gpu_workload(
    nodes: int,
    pods: int,
    span: float,
    *,
    mean_duration: float,
    max_duration: float,
    start: float = 0.0,
    seed: int = 0,
) -> list[f.Feed]:
    """A generated GPU-cluster trace shaped like the public pod lists: 8-GPU nodes (``gpu-milli``, milli-GPUs),
    three QoS queues with equal guarantees, pods of 1 to 8 GPUs (half of them a fraction of one)
    arriving in bursts over ``span`` seconds from ``start``, running exponentially long (``mean_duration``,
    at most ``max_duration``, at least 1 s)."""
    import random

    rng = random.Random(seed)
    node_cap = {"memory": 512 * GiB, "vcore": 96_000, res.GPU_MILLI: 8_000}
    share = {k: v * nodes // 3 for k, v in node_cap.items()}
    qos = ("ls", "be", "burstable")
    config = {
        "name": "default",
        "preemption": {"policy": "sniper"},
        "queues": [
            {
                "name": "root",
                "queues": [{"name": q, "resources": {"guaranteed": res.as_quantities(share)}} for q in qos],
            }
        ],
    }
    events: list[f.Feed] = [f.PartitionConfigEvent(t=start, partition="default", config=config)]
    events += [f.NodeAdded(t=start, node=f"n{i:05d}", capacity=node_cap) for i in range(nodes)]
    events += [f.AppAdded(t=start, app=f"{q}-app", queue=f"root.{q}") for q in qos]
    t = start
    mean_gap = span / max(1, pods)
    for i in range(pods):
        t += rng.expovariate(1.0 / mean_gap) * (0.1 if rng.random() < 0.5 else 1.9)  # bursts and lulls
        gpu = rng.choice((250, 500)) if rng.random() < 0.5 else rng.choice((1, 1, 1, 2, 2, 4, 8)) * 1000
        duration = round(max(1.0, min(max_duration, rng.expovariate(1.0 / mean_duration))), 1)
        events.append(
            f.AskAdded(
                t=round(min(t, start + span), 3),
                app=f"{rng.choice(qos)}-app",
                ask=f"pod{i:06d}",
                resource={
                    "memory": rng.choice((8, 16, 32, 64)) * GiB,
                    "vcore": rng.choice((2, 4, 8, 16)) * 1000,
                    res.GPU_MILLI: gpu,
                },
                duration=duration,
            )
        )
    return events


def bench_simulate(
    nodes: int = 1500,
    days: float = 30.0,
    pods: int = 20_000,
    *,
    mean_duration: float = 6 * 3600.0,
    policy: str = "sniper",
    until: float | None = None,
    skip_idle: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """The simulator on a generated GPU workload (:func:`gpu_workload`, stamped in epoch seconds):
    simulated seconds per wall second and trace events per wall second, on the memory transport."""
    from sniper.simulator.run import SimulationSettings, run_simulation

    span = days * 86400.0
    events = gpu_workload(
        nodes, pods, span, mean_duration=mean_duration, max_duration=4 * mean_duration, start=1.7e9, seed=seed
    )
    settings = SimulationSettings(until=until, policy=policy, skip_idle=skip_idle)
    start, cpu_start = time.perf_counter(), time.process_time()
    result = run_simulation(events, None, settings)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    report = result.summary
    return {
        "bench": "simulate",
        "nodes": nodes,
        "pods": pods,
        "days": days,
        "policy": policy,
        "skip_idle": skip_idle,
        "trace_events": len(events),
        "steps": result.steps,
        "decisions": len(result.decisions),
        "allocations": report.allocations,
        "preempted": report.preemptions.victims,
        "sim_seconds": report.sim_seconds,
        "wall_seconds": round(wall, 3),
        "cpu_seconds": round(cpu, 3),
        "sim_seconds_per_wall_s": round(report.sim_seconds / wall, 1) if wall > 0 else None,
        "events_per_s": round(len(events) / wall, 1) if wall > 0 else None,
        "decisions_per_s": round(len(result.decisions) / wall, 1) if wall > 0 else None,
        "invariant_violations": report.invariant_violations,
    }
