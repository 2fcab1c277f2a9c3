"""Long sans-IO work as a generator of slices: rebuilding a state from its changes, listing them for
a snapshot or a replica's reset, replaying a feed.

Such work ``yield``\\ s (nothing) between slices of about :data:`SLICE` changes (or :data:`RECORDS`
feed records) and returns its result; :func:`run_whole` runs it in one go (the simulator, tests), the
event loop's owner gives the loop back between slices (:func:`sniper.actors.base.in_slices`). Invariant:
slicing never changes the result, only when other tasks may run; the caller keeps the state it works on
still meanwhile (its only writer awaits the slices).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from typing import TypeVar

from sniper.core.state import PartitionState
from sniper.messages import protocol as p

T = TypeVar("T")
Steps = Generator[None, None, T]

SLICE = 1_000  # state changes applied or listed between two yields (some ms of work)
RECORDS = 200  # feed records replayed between two yields (each may decide, some ms of work)


def run_whole(steps: Steps[T]) -> T:
    """What ``steps`` returns, run without a break."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def apply_in_slices(state: PartitionState, changes: list[p.ChangeMsg]) -> Steps[None]:
    """Apply ``changes`` to ``state`` (as :meth:`PartitionState.apply_all`), a slice at a time."""
    for start in range(0, len(changes), SLICE):
        state.apply_all(changes[start : start + SLICE])
        yield


def collect_in_slices(changes: Iterable[p.ChangeMsg]) -> Steps[list[p.ChangeMsg]]:
    """``changes`` as a list, drawn a slice at a time (the source reads a state kept still meanwhile)."""
    out: list[p.ChangeMsg] = []
    for change in changes:
        out.append(change)
        if len(out) % SLICE == 0:
            yield
    return out
