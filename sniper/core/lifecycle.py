"""The lifecycles of the state's allocations, preemption reservations, node reservations and preemption
contracts, each one transition table: which committed change (:mod:`sniper.messages.protocol`) moves an object
from which phase to which.

One table a lifecycle, read three ways, so the rules have one home:

- :meth:`sniper.core.state.PartitionState.apply` refuses a change the table has no move for (a
  :class:`~sniper.core.state.StateError`: the cache validates before it commits, so it is a bug);
- :func:`sniper.core.cache.state_changes` rebuilds an object in its phase with the changes of :func:`path` from
  ``ABSENT`` to that phase (replica resets and snapshots);
- :func:`sniper.core.recovery.apply_logged` turns a logged decision into the changes of :func:`path` from the
  object's phase now to the phase the decision left it in (:data:`LOGGED_ALLOCATION_END` and its siblings),
  so a duplicate or a decision the replayed feed already made changes nothing.

Allocations: ``running``, then ``preempting`` once under notice (``VictimsMarked``, or named by the
``ReservationSet`` of its beneficiary), back to ``running`` when the notice is cancelled
(``VictimsReleased``), ``killed`` once told to die (``VictimsKilled``, only under notice), and gone
(``released``: ``AllocationGone``) from any phase. Preemption reservations are ``held`` until they end
(``ReservationGone``) or their beneficiary is placed (``AllocationSet`` naming them), whatever room given
back elsewhere they hold meanwhile (``GiveBackHeld``); node reservations
are ``held`` until ``NodeReservationGone``; contracts are ``open`` until ``ContractGone``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

from sniper.messages import decisions as d
from sniper.messages import protocol as p

ABSENT: Final = "absent"  # before it is committed, and once it is gone

AllocationPhase = Literal["absent", "running", "preempting", "killed"]

Change = type[p.ChangeMsg]
Table = Mapping[str, Mapping[Change, str]]

# Moves are listed cheapest first: :func:`path` takes the first it finds.
ALLOCATION: Final[Table] = {
    "absent": {p.AllocationSet: "running"},
    "running": {
        p.VictimsMarked: "preempting",
        p.ReservationSet: "preempting",  # a victim its beneficiary's reservation names
        p.AllocationPromoted: "running",  # an opportunistic container is guaranteed from now on
        p.AllocationGone: "absent",  # released, or lost with its node
    },
    "preempting": {
        p.VictimsKilled: "killed",
        p.VictimsReleased: "running",  # the notice cancelled
        p.VictimsMarked: "preempting",  # a later deadline or another reservation
        p.ReservationSet: "preempting",
        p.AllocationGone: "absent",
    },
    "killed": {p.AllocationGone: "absent"},
}

PREEMPTION_RESERVATION: Final[Table] = {
    "absent": {p.ReservationSet: "held"},
    # Ended, or its beneficiary placed; room given back elsewhere held for it, or let go, leaves it held.
    "held": {p.ReservationGone: "absent", p.AllocationSet: "absent", p.GiveBackHeld: "held"},
}

NODE_RESERVATION: Final[Table] = {
    "absent": {p.NodeReservationSet: "held"},
    "held": {p.NodeReservationGone: "absent"},
}

CONTRACT: Final[Table] = {
    "absent": {p.ContractSet: "open"},
    "open": {p.ContractGone: "absent"},
}

# The phase a logged decision left its allocation in (the decisions replay turns into changes by path).
LOGGED_ALLOCATION_END: Final[Mapping[type[d.DecisionMsg], str]] = {
    d.Kill: "killed",
    d.PreemptCancelled: "running",
    d.Released: "absent",
    d.AllocationLost: "absent",
}
# Those of the decisions that end a reservation or a contract.
LOGGED_RESERVATION_END: Final[Mapping[type[d.DecisionMsg], str]] = {d.ReservationEnded: "absent"}
LOGGED_NODE_RESERVATION_END: Final[Mapping[type[d.DecisionMsg], str]] = {d.NodeUnreserved: "absent"}
LOGGED_CONTRACT_END: Final[Mapping[type[d.DecisionMsg], str]] = {d.PreemptRequestEnded: "absent"}

# Changes a logged decision alone carries what for (replay makes the others from the records that name them).
_REPLAYABLE: tuple[Change, ...] = (
    p.VictimsMarked,
    p.VictimsKilled,
    p.VictimsReleased,
    p.AllocationGone,
    p.ReservationGone,
    p.NodeReservationGone,
    p.ContractGone,
)
REPLAYABLE: Final = frozenset(_REPLAYABLE)


def step(table: Table, phase: str, change: Change) -> str | None:
    """The phase ``change`` moves an object in ``phase`` to, or ``None`` when the table has no such move."""
    return table.get(phase, {}).get(change)


def path(table: Table, start: str, end: str, using: frozenset[Change] | None = None) -> list[Change] | None:
    """The shortest run of changes (of ``using``, default any) that takes an object from ``start`` to
    ``end`` (``[]`` when it is there already), or ``None`` when none does; among runs of one length, the
    one whose moves come first in the table."""
    if start == end:
        return []
    seen = {start}
    frontier: list[tuple[str, list[Change]]] = [(start, [])]
    while frontier:
        following: list[tuple[str, list[Change]]] = []
        for phase, changes in frontier:
            for change, after in table.get(phase, {}).items():
                if after in seen or (using is not None and change not in using):
                    continue
                if after == end:
                    return [*changes, change]
                seen.add(after)
                following.append((after, [*changes, change]))
        frontier = following
    return None
