"""Each app's running containers as YARN's baseline snapshots them, kept from round to round.

A caller snapshotting round after round (:func:`~sniper.core.preemption.view.snapshot_from_state` with
containers) builds again only the apps a change touched since: the app itself, one of its allocations,
a notice on one. Any other change that may touch an app (configuration, preemption reservations and
requests, SLO reservations and their queues, nodes leaving, the partition cleared) drops them all, and
so do a new state (a reset), a state changed without the caller hearing of it (its version moved by
more than the changes heard) and a partition whose queues set a minimum runtime (what a container
offers then depends on the clock).
Invariant: the snapshot of an app is the one building it from the state at that moment gives.
"""

from __future__ import annotations

from sniper.core.preemption.min_runtime import aging, young
from sniper.core.preemption.model import AppSnapshot, ContainerSnapshot
from sniper.core.state import Allocation, App, PartitionState, allocation_number
from sniper.messages import protocol as p

# Changes that never alter an app's snapshot (its fields, which containers it holds, their notices).
_UNTOUCHING: frozenset[type] = frozenset(
    {
        p.Clock,
        p.AskSet,
        p.AskGone,
        p.NodeSet,
        p.NodeUtilizationSet,
        p.AllocationCheckpointed,
        p.NodeReservationSet,
        p.NodeReservationGone,
    }
)


class AppSnapshots:
    """The apps' snapshots of the last round on one state, with what changed since."""

    def __init__(self) -> None:
        self._state: PartitionState | None = None
        self._version = 0  # the state's version when the apps were last snapshotted
        self._heard = 0  # versioned changes heard since
        self._apps: dict[str, AppSnapshot] = {}
        self._owner: dict[str, str] = {}  # allocation id -> its app, for every app snapshotted
        self._containers: dict[str, ContainerSnapshot] = {}  # reused while their allocation is unchanged
        self._seen: dict[str, ContainerSnapshot] | None = None  # a round building every app: its containers
        self._now: float | None = None  # the clock young containers are judged by (None: none is young)
        self._kept = False  # whether this round reuses the apps kept

    def on_change(self, change: p.ChangeMsg) -> None:
        """One change applied to the state the rounds read."""
        kind = type(change)
        if kind is not p.Clock:
            self._heard += 1
        if kind in _UNTOUCHING:
            return
        if isinstance(change, p.AllocationSet):
            self._touch(change.app)
            self._touch(self._owner.get(change.allocation))
        elif isinstance(change, p.AppSet | p.AppGone):
            self._touch(change.app)
        elif isinstance(change, p.AllocationGone):
            self._touch(self._owner.pop(change.allocation, None))
            self._containers.pop(change.allocation, None)
        elif isinstance(change, p.AllocationPromoted):
            self._touch(self._owner.get(change.allocation))
        elif isinstance(change, p.VictimsMarked | p.VictimsReleased | p.VictimsKilled):
            for victim in change.victims:
                self._touch(self._owner.get(victim))
        else:
            self._apps.clear()

    def _touch(self, app: str | None) -> None:
        if app is not None:
            self._apps.pop(app, None)

    def begin(self, state: PartitionState) -> None:
        """A round on ``state`` begins: keep the apps only if every change to it since was heard."""
        self._now = state.now if aging(state) else None
        self._kept = self._state is state and self._now is None and state.version == self._version + self._heard
        if not self._kept:  # every app is built again: so are the owners, and the containers kept are this round's
            self._apps.clear()
            self._owner.clear()
            self._seen = {}
        self._state = state
        self._version = state.version
        self._heard = 0

    def of(self, state: PartitionState, app: App) -> AppSnapshot:
        """``app``'s snapshot: the one kept, or built now (and kept when no container is young)."""
        if self._kept:
            kept = self._apps.get(app.name)
            if kept is not None:
                return kept
        now = self._now
        ids = sorted(app.allocations)
        snapshot = AppSnapshot(
            id=app.name,
            queue=app.queue.path,
            submit_order=app.submit_seq,
            priority=app.priority,
            containers=tuple(
                self._container(a)
                for a in (state.allocations[x] for x in ids)
                # Opportunistic ones are outside every queue: YARN's policy never sees them.
                if not a.opportunistic and (now is None or not young(a, now))
            ),
            max_disruption=app.max_disruption,
            allow_preemption=app.allow_preemption,
        )
        if now is None:
            self._apps[app.name] = snapshot
            for x in ids:
                self._owner[x] = app.name
        return snapshot

    def _container(self, a: Allocation) -> ContainerSnapshot:
        snap = self._containers.get(a.id)
        if snap is None or snap.killable != a.preempting:
            snap = ContainerSnapshot(
                id=a.id,
                app=a.app,
                resource=a.resource,
                am=a.am,
                seq=max(0, allocation_number(a.id)),
                killable=a.preempting,
                node=a.node,
            )
            self._containers[a.id] = snap
        if self._seen is not None:
            self._seen[a.id] = snap
        return snap

    def end(self) -> None:
        """The round's snapshot is built (after a round building every app, only its containers are kept)."""
        if self._seen is not None:
            self._containers = self._seen
            self._seen = None
