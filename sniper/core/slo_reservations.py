"""The cache's side of SLO reservations: accept or reject a ``reservation_submitted`` at once, route apps
that name a reservation, and retire reservations that are over.

The planning itself is :mod:`sniper.core.slo_plan` (pure). What this module keeps to:

- A partition holds at most :data:`~sniper.core.slo_plan.MAX_RESERVATIONS` accepted reservations, and one
  request is planned in at most :data:`~sniper.core.slo_plan.MAX_SLOTS` slots: both bound what a feed can cost.
- A reservation is decided when it arrives, never later: ``reservation_accepted`` with its planned
  intervals (committed as one :class:`~sniper.messages.protocol.SloReservationSet`) or ``reservation_rejected``
  with the reason. A name already accepted in the partition is rejected, never planned twice; the same
  event delivered twice (its ``id``) changes nothing.
- An app naming a reservation runs in the reservation's queue (``<queue>.<reservation>``) when the
  reservation is accepted in the app's queue, else it is rejected with the reason; an app of a reservable
  queue that names none runs in its ``default`` queue.
- A reservation that does not recur is dropped once its last interval and deadline are past and no app
  runs against it any more (its queue goes with it); one that recurs stays.
"""

from __future__ import annotations

from sniper.core import slo_plan
from sniper.core.resources import Resource
from sniper.core.state import PartitionState
from sniper.core.writer import Writer
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p


def submit(cache: Writer, e: f.ReservationSubmitted) -> None:
    """Plan the reservation against its queue's share and the plans accepted there; decide at once."""
    state = cache.state
    why = slo_plan.name_refusal(e.reservation)
    if why is None and e.reservation in state.slo_reservations:
        why = f"reservation {e.reservation} is already accepted"
    if why is None and len(state.slo_reservations) >= slo_plan.MAX_RESERVATIONS:
        why = f"the partition holds {slo_plan.MAX_RESERVATIONS} SLO reservations already, the most it takes"
    base = state.base_config
    queue = None if base is None else next((q for q in base.queues() if q.path == e.queue), None)
    if why is None and queue is None:
        why = f"{e.queue} is an unknown queue"
    elif why is None and queue is not None and not queue.reservable:
        why = f"queue {e.queue} is not reservable"
    plan: slo_plan.SloReservation | str = why or ""
    share: Resource = {}  # the queue's share, once the request is planned against it
    if why is None and queue is not None:
        request = slo_plan.Request(
            name=e.reservation,
            queue=e.queue,
            arrival=e.arrival,
            deadline=e.deadline,
            stages=tuple(slo_plan.Stage(dict(s.resource), s.count, s.gang_min, s.duration) for s in e.stages),
            period=e.recurrence or 0.0,
        )
        accepted = [r for r in state.slo_reservations.values() if r.queue == e.queue]
        share = slo_plan.share_of(queue)
        plan = slo_plan.place(request, share, accepted, state.now)
    if isinstance(plan, str):
        reason = f"reservation {e.reservation}: {plan}"
        cache.decide(
            d.ReservationRejected, reservation=e.reservation, queue=e.queue, reason=reason, event=e.id, share=share
        )
        return
    cache.commit(_set_of(plan))
    cache.decide(
        d.ReservationAccepted,
        reservation=plan.name,
        queue=plan.queue,
        reservation_queue=slo_plan.reservation_queue(plan.queue, plan.name),
        arrival=plan.arrival,
        deadline=plan.deadline,
        intervals=[d.PlannedInterval(start=iv.start, end=iv.end, resource=iv.resource) for iv in plan.intervals],
        recurrence=plan.period or None,
        event=e.id,
    )


def app_queue(cache: Writer, e: f.AppAdded) -> tuple[str, str | None]:
    """The leaf queue an ``app_added`` runs in, or why it is rejected (then the queue is ``""``)."""
    state = cache.state
    queue = state.queues.get(e.queue)
    reservable = queue is not None and queue.config.reservable
    if e.reservation is None:
        return (f"{e.queue}.{slo_plan.DEFAULT_QUEUE}" if reservable else e.queue), None
    plan = state.slo_reservations.get(e.reservation)
    if plan is None:
        return "", f"app {e.app}: reservation {e.reservation} is unknown (never accepted, or over)"
    if plan.queue != e.queue:
        return "", f"app {e.app}: reservation {e.reservation} is in queue {plan.queue}, not {e.queue}"
    return slo_plan.reservation_queue(plan.queue, plan.name), None


def retire(cache: Writer) -> None:
    """Drop the reservations that are over and have no app left."""
    state = cache.state
    now = state.now
    for plan in sorted(state.slo_reservations.values(), key=lambda r: r.name):
        if not plan.over(now) or plan.deadline > now:
            continue
        leaf = state.queues.get(slo_plan.reservation_queue(plan.queue, plan.name))
        if leaf is None or not leaf.apps:
            cache.commit(p.SloReservationGone(reservation=plan.name))


def state_changes(state: PartitionState) -> list[p.ChangeMsg]:
    """The changes that rebuild the accepted SLO reservations (after the configuration, before the apps)."""
    return [_set_of(r) for r in state.slo_reservations.values()]


def _set_of(plan: slo_plan.SloReservation) -> p.SloReservationSet:
    """The change that holds ``plan`` in the state (on acceptance and when the state is rebuilt)."""
    return p.SloReservationSet(
        reservation=plan.name,
        queue=plan.queue,
        arrival=plan.arrival,
        deadline=plan.deadline,
        intervals=[(iv.start, iv.end, iv.resource) for iv in plan.intervals],
        period=plan.period,
    )
