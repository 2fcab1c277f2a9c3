"""A queue's rank in the allocation walk is the DRF order the resource functions define, whatever the shapes."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from sniper.core import resources as res
from sniper.core.allocation import QueueRank, usage_key
from sniper.core.config import partition_to_raw
from sniper.core.resources import Resource
from sniper.core.state import PartitionState, Queue
from sniper.messages import protocol as p
from tests.core_support import config_of, queue

NAMES = ("memory", "vcore", "gpu-milli", "nvidia.com/mig")


def _defined_key(q: Queue, usage: Resource, capacity: Resource) -> tuple[object, ...]:
    """The order in words: below the guarantee (DRF share vectors) first, then priority, then the dominant
    share of the guarantee (of the cluster without one), then more pending."""
    guaranteed = q.guaranteed
    below = 1 if not capacity else (0 if res.drf_below(usage, guaranteed, capacity) else 1)
    if res.any_positive(guaranteed):
        share = res.dominant_share({k: v for k, v in usage.items() if k in guaranteed}, guaranteed)
    elif capacity:
        share = res.dominant_share(usage, capacity)
    else:
        share = math.inf if res.any_positive(usage) else 0.0
    pending = res.dominant_share(q.pending, capacity) if capacity else 0.0
    return (below, -q.priority, share, -pending, q.path)


def _random_resource(rng: random.Random, names: tuple[str, ...]) -> dict[str, Any]:
    return {k: rng.choice((0, 1, 7, 1024, 4096)) for k in rng.sample(names, rng.randint(0, len(names)))}


@pytest.mark.parametrize("seed", range(6))
def test_the_kept_rank_orders_queues_as_drf_defines_for_any_shape(seed: int) -> None:
    rng = random.Random(seed)
    guaranteed = {k: v for k, v in _random_resource(rng, NAMES[:3]).items() if v}
    state = PartitionState("default")
    state.apply(p.ConfigSet(config=partition_to_raw(config_of(queue("a", guaranteed=guaranteed or None)))))
    q = state.queues["root.a"]
    q.guaranteed.update({k: 0 for k in NAMES[3:] if rng.random() < 0.5})  # a guarantee naming a resource at zero
    q.pending.update({k: v for k, v in _random_resource(rng, NAMES).items()})
    for _ in range(40):
        capacity = {k: v for k, v in _random_resource(rng, NAMES).items()}  # zero and missing resources too
        usage = {k: v for k, v in _random_resource(rng, NAMES).items()}
        expected = _defined_key(q, usage, capacity)
        assert QueueRank(q, capacity).key(usage) == expected
        assert usage_key(q, usage, capacity) == expected


def test_a_queue_below_its_guarantee_in_one_resource_ranks_first_until_it_reaches_it() -> None:
    state = PartitionState("default")
    config = config_of(queue("a", guaranteed={"memory": 4096, "vcore": 4000}), queue("b"))
    state.apply(p.ConfigSet(config=partition_to_raw(config)))
    capacity = {"memory": 8192, "vcore": 8000}
    rank = QueueRank(state.queues["root.a"], capacity)
    assert rank.key({"memory": 4096, "vcore": 1000})[0] == 0
    assert rank.key({"memory": 4096, "vcore": 4000})[0] == 1
    assert rank.key({"memory": 4096, "vcore": 4000})[2] == 1.0
