"""Whether an inter-queue preemption round can change anything, decided without the ideal assignment.

Sniper's round acts only for a leaf queue with pending demand: a beneficiary, a node reservation
cancelled for one, an ask that requires a node. With no pending demand in any leaf, no request in
flight (whose reply would fill the mask) and an empty mask (whose clearing would count), the round
outputs nothing and leaves nothing a later round reads, so it need not compute the ideal assignment.
"""

from __future__ import annotations

from sniper.core import resources as res
from sniper.core.state import PartitionState


def no_pending_demand(state: PartitionState) -> bool:
    """Whether no leaf queue has an app with pending asks or a positive pending resource."""
    return not any(q.is_leaf and (q.waiting or res.any_positive(q.pending)) for q in state.queues.values())
