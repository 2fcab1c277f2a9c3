"""What the simulator, metrics and CLI tests share: the keys every report has (docs/report.md), a
tiny trace as JSON lines' objects, and a trace with long idle gaps between bursts of contention."""

from __future__ import annotations

from typing import Any

import msgspec

from sniper.bench.inprocess import gpu_workload
from sniper.messages import feed as f
from tests.core_support import partition_raw, queue

REPORT_KEYS = {
    "policy",
    "sim_seconds",
    "allocations",
    "allocations_per_s",
    "preemptions",
    "wasted_preemptions",
    "ping_pong",
    "lost_work_seconds",
    "time_to_guarantee",
    "utilization",
    "fairness_gap",
    "stranded",
    "pending_at_end",
    "rejected",
    "proposals_rejected",
    "invariant_violations",
    "preemption_log",
}

TINY: list[dict[str, Any]] = [
    {"t": 0, "type": "partition_config", "config": partition_raw(queue("a", guaranteed={"memory": 4096}))},
    {"t": 0, "type": "node_added", "node": "n1", "capacity": {"memory": 8192, "vcore": 8000}},
    {"t": 1, "type": "app_added", "app": "a1", "queue": "root.a"},
    {"t": 1, "type": "ask_added", "app": "a1", "ask": "k", "resource": {"memory": 2048}, "count": 3, "duration": 4},
]


def gappy_trace(policy: str, start: float = 0.0) -> list[f.Feed]:
    """Three bursts of contention on 3 GPU nodes (a generated GPU workload, pods at fractional times)
    separated by long idle gaps: every pod of a burst has ended long before the next one starts."""
    out: list[f.Feed] = []
    for i, e in enumerate(gpu_workload(3, 90, 300.0, mean_duration=120.0, max_duration=400.0, seed=3)):
        if isinstance(e, f.PartitionConfigEvent):
            config = {**e.config, "preemption": {"policy": policy, "total_preemption_per_round": 0.5}}
            e = msgspec.structs.replace(e, config=config)
        shift = 2000.25 * (i % 3) if isinstance(e, f.AskAdded) else 0.0
        out.append(msgspec.structs.replace(e, t=e.t + shift + start))
    return out
