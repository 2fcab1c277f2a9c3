"""Garbage collection for a process that runs the core: full passes scan only what is new.

A core's state is millions of long-lived objects; a full collection scans them all and holds the event
loop for seconds on a large partition. :class:`FreezeSurvivors` freezes what survives each full
collection, so the next one scans only objects that survived young collections since. Invariant:
cyclic garbage among frozen objects is never kept for good: once the frozen set has grown past
``thaw_factor`` times its size at the last thaw, it is thawed, and the next full collection scans (and
frees) everything once; memory held by such garbage stays below that factor of the live objects. Each
thaw costs a full scan of every object, which holds the event loop as long, so what a process drops in
bulk never waits for one: a partition's states are emptied when they are dropped (a partition stopped,
a replica's state replaced by a reset: :meth:`sniper.core.state.PartitionState.dispose`), their
reference cycles broken, and reference counting frees them at once.
"""

from __future__ import annotations

import gc
from typing import Any

YOUNG_THRESHOLD = 10_000  # new objects per young collection (the default 700 costs a third of the time)
MIDDLE_THRESHOLD = 2  # young collections per middle one: bounds its pause
FULL_THRESHOLD = 10  # middle collections per full one
THAW_FACTOR = 2.0


class FreezeSurvivors:
    """A ``gc.callbacks`` entry: after each full collection, freeze its survivors, or thaw them all
    when the frozen set outgrew ``thaw_factor`` times its size at the last thaw."""

    def __init__(self, thaw_factor: float = THAW_FACTOR) -> None:
        if thaw_factor <= 1.0:
            raise ValueError("thaw_factor must be above 1")
        self.thaw_factor = thaw_factor
        # Objects the collector knew at the last thaw (at first: all it knows now, frozen or not).
        self.baseline = gc.get_freeze_count() + len(gc.get_objects())
        self.thawed = 0  # thaws so far

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase != "stop" or info["generation"] != 2:
            return
        gc.freeze()
        frozen = gc.get_freeze_count()  # a walk of the frozen list, far cheaper than a collection
        if frozen > self.thaw_factor * max(self.baseline, 1):
            self.thaw(frozen)

    def thaw(self, frozen: int) -> None:
        """Thaw every frozen object (``frozen`` of them): the next full collection frees the garbage
        cycles among them."""
        gc.unfreeze()
        self.baseline = frozen
        self.thawed += 1


def tune() -> FreezeSurvivors:
    """Freeze what start-up built (it lives as long as the process), set the thresholds, and install
    :class:`FreezeSurvivors` (once per process: an installed one is returned again)."""
    for callback in gc.callbacks:
        if isinstance(callback, FreezeSurvivors):
            return callback
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, FULL_THRESHOLD)
    policy = FreezeSurvivors()
    gc.callbacks.append(policy)
    return policy
