"""The over-commit set-up the over-commit and gang tests share: one node full of guaranteed containers
that use half of what they hold, in a partition whose ``overcommit`` block allocates below 80% of
measured memory and kills above 90%."""

from __future__ import annotations

from typing import Any

from sniper.core.config import parse_partition
from sniper.messages import feed as f
from tests.core_support import Harness, partition_raw, queue

CAP = 8192  # one node's memory, MiB
THRESHOLDS = {"allocate_below": {"memory": 0.8}, "preempt_above": {"memory": 0.9}}


def raw_config(overcommit: dict[str, Any] | None = THRESHOLDS) -> dict[str, Any]:
    """Queues a and b, each guaranteed one node's memory, with ``overcommit`` as the partition's block."""
    raw = partition_raw(queue("a", guaranteed={"memory": CAP}), queue("b", guaranteed={"memory": CAP}))
    if overcommit is not None:
        raw["overcommit"] = overcommit
    return raw


def report(used: float, node: str = "n1") -> f.NodeUtilization:
    """A ``node_utilization`` report: ``node`` uses ``used`` MiB of memory."""
    return f.NodeUtilization(node=node, used={"memory": used})


def full_node(overcommit: dict[str, Any] | None = THRESHOLDS) -> Harness:
    """n1 full of a's guaranteed containers (4 of 2048 MiB) that use half of what they hold."""
    h = Harness(parse_partition(raw_config(overcommit)))
    h.feed(f.NodeAdded(node="n1", capacity={"memory": CAP}))
    h.feed(f.AppAdded(app="a1", queue="root.a"), f.AppAdded(app="b1", queue="root.b"))
    h.feed(f.AskAdded(app="a1", ask="g", resource={"memory": 2048}, count=4, usage={"memory": 1024}))
    h.settle()
    assert len(h.allocated()) == 4
    return h
