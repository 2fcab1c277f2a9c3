"""The timings a core process keeps (Prometheus histograms), below the process and its observability
endpoint so that both use them without importing each other: an ask fetched to its first decision,
each partition's allocation cycles and preemption rounds, labelled by partition, and the event loop's
lag (how late a timer that reschedules itself wakes: how long some step held the loop) with the CPU
time of the longest such hold.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
from prometheus_client import CollectorRegistry, Gauge, Histogram

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LOOP_LAG_INTERVAL = 0.1  # seconds between two probes of the event loop's lag


async def watch_loop_lag(
    histogram: Histogram, interval: float = LOOP_LAG_INTERVAL, longest_cpu: Gauge | None = None
) -> None:
    """Observe, forever, how late a timer of ``interval`` seconds wakes: how long the loop was held;
    ``longest_cpu`` keeps the most CPU time the process spent in one probe period that woke late (what
    the step that held the loop cost: a machine shared with other work stretches a hold's wall time,
    hardly its CPU time)."""
    longest = 0.0
    while True:
        due = time.perf_counter() + interval
        cpu = time.process_time()
        await anyio.sleep(interval)  # the probe's own period, not a synchronisation
        lag = time.perf_counter() - due
        histogram.observe(max(0.0, lag))
        if longest_cpu is not None and lag > 0:
            spent = time.process_time() - cpu
            if spent > longest:
                longest = spent
                longest_cpu.set(spent)


class CoreHistograms:
    """Timings of one core process, observed by its hosted partitions and their actors."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["partition"]
        self.feed_to_decision = Histogram(
            "sniper_feed_to_decision_seconds",
            "From fetching an ask to handing its first decision (allocated or rejected) to the producer",
            labels,
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )
        self.loop_lag = Histogram(
            "sniper_event_loop_lag_seconds",
            f"How late a timer of {LOOP_LAG_INTERVAL} s on the event loop wakes (a step that held the loop)",
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )
        self.longest_hold_cpu = Gauge(
            "sniper_event_loop_longest_hold_cpu_seconds",
            f"The most CPU seconds the process spent in one {LOOP_LAG_INTERVAL} s period of the loop-lag timer"
            " that woke late (the longest step that held the loop, in CPU time)",
            registry=registry,
        )
        self.work = {
            "allocation_cycle": Histogram(
                "sniper_allocation_cycle_seconds",
                "One allocation cycle of a partition's allocator",
                labels,
                registry=registry,
                buckets=LATENCY_BUCKETS,
            ),
            "preemption_round": Histogram(
                "sniper_preemption_round_seconds",
                "One round of a preemption policy",
                labels,
                registry=registry,
                buckets=LATENCY_BUCKETS,
            ),
        }

    def timer(self, partition: str) -> Callable[[str, float], None]:
        """What a partition's actors call with (work kind, seconds)."""
        children = {kind: histogram.labels(partition) for kind, histogram in self.work.items()}

        def observe(kind: str, seconds: float) -> None:
            child = children.get(kind)
            if child is not None:
                child.observe(seconds)

        return observe
