"""A view replica: a :class:`PartitionState` kept in step with the cache through ordered view deltas.

Invariants: deltas are applied strictly in sequence order; one already applied is ignored
(at-least-once delivery); a gap is reported so the owner can ask the cache for a reset; a reset
replaces the whole state. Subclass hooks see every change applied and every proposal outcome.
"""

from __future__ import annotations

from sniper.core.slicing import Steps, apply_in_slices, run_whole
from sniper.core.state import PartitionState
from sniper.messages import protocol as p


class ViewReplica:
    def __init__(self, partition: str) -> None:
        self.partition = partition
        self.state = PartitionState(partition)
        self.view_seq = 0
        self.resets = 0

    def apply_view(self, delta: p.ViewDelta) -> bool:
        """Apply one delta; ``False`` means a gap: the caller must ask the cache for a reset."""
        if delta.reset:
            run_whole(self.reset_in_slices(delta))
            return True
        if delta.seq <= self.view_seq:
            return True
        if delta.seq != self.view_seq + 1:
            return False
        self.view_seq = delta.seq
        state = self.state
        handlers = state._handlers
        state.begin_batch()
        try:
            for change in delta.changes:
                kind = type(change)
                handlers[kind](change)
                if kind is not p.Clock:  # as PartitionState.apply counts
                    state.version += 1
                self.on_change(change)
            for outcome in delta.outcomes:
                self.on_outcome(outcome)
        finally:
            state.end_batch()
        self.after_delta(delta)
        return True

    def reset_in_slices(self, delta: p.ViewDelta) -> Steps[None]:
        """Replace the state by the reset ``delta``'s, in slices (:mod:`sniper.core.slicing`): the
        replica's owner handles nothing else until it returns."""
        self.resets += 1
        replaced, self.state = self.state, PartitionState(self.partition)
        replaced.dispose()  # freed now by reference counting, even where the collector froze it
        yield from apply_in_slices(self.state, delta.changes)
        self.view_seq = delta.seq
        self.on_reset()

    def on_reset(self) -> None:
        """The state was replaced by a reset."""

    def on_change(self, change: p.ChangeMsg) -> None:
        """One committed change was just applied."""

    def on_outcome(self, outcome: p.ProposalOutcome) -> None:
        """The cache answered a proposal."""

    def after_delta(self, delta: p.ViewDelta) -> None:
        """A whole delta was applied."""
