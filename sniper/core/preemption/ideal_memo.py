"""A bounded memo of ideal assignments, keyed by the exact figures of their snapshots.

Owns :class:`IdealMemo`. The ideal assignment is a pure function of its snapshot and options
(:func:`sniper.core.preemption.ideal.compute_ideal`), so a snapshot whose every figure the ideal may read
equals one seen before gets that answer again. Invariants: the key holds every field of the snapshot and
of each queue but the applications, and of those what the ideal reads (:func:`killable_of`); every answer
handed out is a fresh copy, so no caller can change another's; at most ``size`` answers are kept, the
least recently used dropped first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable

from sniper.core.preemption.ideal import IdealAssignment, QueueIdeal, killable_of
from sniper.core.preemption.model import ClusterSnapshot, QueueSnapshot


def _queue_key(q: QueueSnapshot) -> tuple[Hashable, ...]:
    # Resources in their own order: two snapshots with the same figures in another order are different keys
    # (never a wrong answer, only a computation more).
    ask = q.smallest_pending_ask
    return (
        q.path,
        q.parent,
        q.children,
        q.is_leaf,
        tuple(q.guaranteed.items()),
        tuple(q.max.items()),
        tuple(q.used.items()),
        tuple(q.pending.items()),
        tuple(q.pending_considering_reserved.items()),
        tuple(q.reserved.items()),
        q.priority,
        q.preemption_disabled,
        q.fenced,
        q.max_am_resource_percent,
        None if ask is None else tuple(ask.items()),
        tuple(killable_of(q).items()) if q.apps else (),
    )


def snapshot_key(snapshot: ClusterSnapshot) -> tuple[Hashable, ...]:
    """Every figure of ``snapshot`` the ideal reads, as a hashable value."""
    return (tuple(snapshot.resource.items()), snapshot.resource_names, tuple(map(_queue_key, snapshot.queues)))


def _copy(assignment: IdealAssignment) -> IdealAssignment:
    return IdealAssignment(
        {
            path: QueueIdeal(
                path,
                dict(q.ideal_assigned),
                dict(q.to_be_preempted),
                dict(q.preemptable_extra),
                dict(q.untouchable_extra),
                dict(q.pending),
                q.ineffective,
            )
            for path, q in assignment.queues.items()
        }
    )


class IdealMemo:
    """The last ``size`` ideal assignments by snapshot and options; :attr:`hits` and :attr:`misses` count
    the answers reused and computed."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("an ideal memo keeps at least one answer")
        self.size = size
        self.hits = 0
        self.misses = 0
        self._answers: OrderedDict[Hashable, IdealAssignment] = OrderedDict()

    def get(
        self,
        snapshot: ClusterSnapshot,
        options: Hashable,
        compute: Callable[[ClusterSnapshot], IdealAssignment],
    ) -> IdealAssignment:
        """``compute(snapshot)``, or a copy of its answer for equal figures and ``options`` seen before."""
        key = (options, snapshot_key(snapshot))
        answers = self._answers
        known = answers.get(key)
        if known is not None:
            self.hits += 1
            answers.move_to_end(key)
            return _copy(known)
        self.misses += 1
        known = answers[key] = compute(snapshot)
        if len(answers) > self.size:
            answers.popitem(last=False)
        return _copy(known)
