"""Durable caches, sans-IO: snapshots, restore, and the replay a new partition owner does.

What it owns:

- :func:`feed_problem`, the check a feed record passes at the edge (before any cache sees it, live or in
  replay): resource quantities up to :data:`MAX_QUANTITY`, bounded node labels, a ``partition_config``
  that parses. It depends on the record alone, so a record refused once is refused on every replay;
- :class:`DurableCache`, a :class:`~sniper.core.cache.Cache` that stamps every decision with the
  Kafka offset of the last feed record it had handled (``feed_offset``) and refuses what
  :func:`feed_problem` refuses with a ``rejected`` decision (for records that did not pass the edge),
  and a record stamped more than ``admission.max_clock_skew`` ahead of the partition's clock with a
  ``rejected`` decision and a :class:`RefusedRecord` for the caller to dead-letter;
- :func:`take_snapshot` / :func:`restore`: a cache to a :class:`~sniper.messages.snapshot.Snapshot` and back;
- :func:`apply_logged`: one logged decision that came from a proposal or a tick turned back into the
  state changes that made it (``allocated``, ``preempt`` with its reservation, ``preempt_cancelled``,
  ``kill``, ``node_reserved``, ``node_unreserved``, and, if replay ever diverged, ``released``,
  ``allocation_lost``, ``reservation_ended``);
- :func:`replay`: the feed records after a snapshot interleaved with the decisions logged after it.

Invariants of :func:`replay` (architecture: Transports, "the decisions topic is the commit log"):

- it never re-decides the past: a feed record is re-applied with its decisions suppressed when the
  log already holds them (their ``seq`` is at most the last logged one), and a logged decision that
  came from a proposal or a tick is applied as the change it recorded, never recomputed;
- a logged decision is applied only once the replayed feed has reached its ``feed_offset``, in
  ``seq`` order, so the state sees events and decisions in the order the old owner did;
- decisions that replay produces beyond the last logged ``seq`` (the old owner handled the record but
  died before publishing them) are returned as ``fresh``: the caller publishes them;
- a feed record's time is judged as the old owner judged it wherever the log shows the old owner
  handled it (a ``rejected`` decision coded ``clock_ahead`` at its offset, or none), so a
  time refused live is refused on replay and one accepted live is accepted; records past the log are
  judged on the replaying state's clock, as live;
- nothing here does I/O or reads a clock; time only moves to the ``t`` of logged decisions.
"""

from __future__ import annotations

import dataclasses
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sniper.core import lifecycle, node_reservation
from sniper.core.cache import SEEN_IDS, Cache, allocation_set, iter_state_changes
from sniper.core.config import PartitionConfig, parse_partition
from sniper.core.preemption_reservation import reservation_set
from sniper.core.slicing import RECORDS, Steps, apply_in_slices, collect_in_slices, run_whole
from sniper.core.state import PartitionState
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.messages.feed import MAX_LABEL_CHARS, MAX_LABELS
from sniper.messages.snapshot import Snapshot, SnapshotBody, decode_body, encode_body

MAX_QUANTITY = 2**40  # a sanity cap on one resource value (2**40 MiB is an exbibyte of memory)

_ID_NUMBER = re.compile(r"^(?:alloc|n?resv|preq)-(\d+)$")


def absurd_quantity(event: f.Feed) -> str | None:
    """Why ``event`` carries an absurd resource value, or ``None`` when it does not."""
    resource: dict[str, int] | None = None
    if isinstance(event, f.NodeAdded | f.NodeUpdated):
        resource = event.capacity
    elif isinstance(event, f.AskAdded):
        resource = event.resource
    for name, value in (resource or {}).items():
        if value > MAX_QUANTITY:
            return f"{name}={value} is over the sanity cap of {MAX_QUANTITY}"
    return None


def feed_problem(event: f.Feed) -> str | None:
    """Why ``event`` must not reach a cache (dead-lettered at the edge), or ``None`` when it may.

    Whatever in the record itself would stop or poison a partition: an absurd quantity, unbounded
    labels, a configuration that does not parse (any error of the parser, not only the expected ones).
    """
    why = absurd_quantity(event)
    if why is not None:
        return f"{type(event).__name__}: absurd resource: {why}"
    if isinstance(event, f.NodeAdded):
        labels = event.labels
        if len(labels) > MAX_LABELS:
            return f"node_added {event.node}: {len(labels)} labels, over the limit of {MAX_LABELS}"
        for key, value in labels.items():
            if len(key) > MAX_LABEL_CHARS or len(value) > MAX_LABEL_CHARS:
                return (
                    f"node_added {event.node}: label {key[:40]!r} has a key or value over {MAX_LABEL_CHARS} characters"
                )
    if isinstance(event, f.PartitionConfigEvent):
        try:
            parse_partition(event.config, f"partition {event.partition}")
        except Exception as err:  # any parser failure: the record is bad, never the partition
            return f"partition_config: {type(err).__name__}: {err}"[:1000]
    return None


CLOCK_REFUSED = "t ahead of the partition's clock: "  # how a refusal for the time begins (replay finds it)


def refused_for_time(rejection: d.Rejected) -> bool:
    """Whether a logged rejection refused its record for its time: by its code, or, in a log written
    without codes, by how its reason begins."""
    if rejection.code is not None:
        return rejection.code == "clock_ahead"
    return rejection.reason.startswith(CLOCK_REFUSED)


@dataclasses.dataclass(frozen=True, slots=True)
class RefusedRecord:
    """A feed record the state refused for its time: it is dead-lettered with ``reason``."""

    offset: int
    event: f.Feed
    reason: str


class DurableCache(Cache):
    """A cache whose decisions say which feed record they were made after (for replay), and that keeps
    the feed's time within ``admission.max_clock_skew`` of the partition's clock."""

    def __init__(self, partition: str, config: PartitionConfig | None = None, *, epoch: int = 0) -> None:
        self.feed_offset = -1
        self.feed_time: float | None = None  # the latest ``t`` of a feed event it accepted (None: none yet)
        self.refused: list[RefusedRecord] = []  # refused for their time since the last take_refused()
        super().__init__(partition, config, epoch=epoch)

    def decide(self, decision_type: type[d.DecisionMsg], **fields: Any) -> None:
        super().decide(decision_type, feed_offset=self.feed_offset, **fields)

    def clock_problem(self, event: f.Feed) -> str | None:
        """Why ``event``'s ``t`` is too far ahead of the partition's clock (the later of its state's time
        and the latest accepted feed time), or ``None``. The first event after the partition has
        a configuration and no feed time yet sets the clock, whatever its (finite) time."""
        config = self.state.config
        if config is None or self.feed_time is None:
            return None
        clock = max(self.state.now, self.feed_time)
        bound = config.admission.max_clock_skew
        if event.t <= clock + bound:
            return None
        return (
            f"{CLOCK_REFUSED}{type(event).__name__} t={event.t!r} is {event.t - clock:.3f} s ahead of"
            f" {clock!r}, over admission.max_clock_skew ({bound:g} s)"
        )

    def handle_event(self, event: f.Feed, *, too_far: bool | None = None) -> None:
        """Handle ``event``; ``too_far`` is the verdict on its time a previous owner logged (replay),
        ``None`` to judge it on this state's clock."""
        why = feed_problem(event)
        code: d.RejectionCode = "bad_record"
        if why is None:
            code = "clock_ahead"
            why = self.clock_problem(event)
            if too_far is not None and (why is not None) != too_far:
                why = f"{CLOCK_REFUSED}t={event.t!r}, as the partition's previous owner judged" if too_far else None
            if why is not None:
                self.refused.append(RefusedRecord(self.feed_offset, event, why))
        if why is not None:
            self.stats.events += 1
            self._reject(code, why, event=event.id)
            return
        if self.feed_time is None and event.t > self.state.now:
            self.commit(p.Clock(now=event.t))  # the partition's clock starts at its first event's time
        super().handle_event(event)
        self.feed_time = event.t if self.feed_time is None else max(self.feed_time, event.t)

    def take_refused(self) -> list[RefusedRecord]:
        """The records refused for their time since the last call (to dead-letter)."""
        refused, self.refused = self.refused, []
        return refused


# ---------------------------------------------------------------------------------------------- snapshots


def take_snapshot(core: DurableCache, *, kafka_partition: int = -1, wall_time: float = 0.0) -> Snapshot:
    """The whole state of ``core`` as a snapshot (take it only when the core has no unpublished output)."""
    return run_whole(snapshot_in_slices(core, kafka_partition=kafka_partition, wall_time=wall_time))


def snapshot_in_slices(core: DurableCache, *, kafka_partition: int = -1, wall_time: float = 0.0) -> Steps[Snapshot]:
    """:func:`take_snapshot` in slices (:mod:`sniper.core.slicing`): keep ``core`` still until it returns."""
    changes = yield from collect_in_slices(iter_state_changes(core.state))
    flaps = [(app, ask, count, when) for (app, ask), (count, when) in core.flaps.items()]
    codec, body = encode_body(SnapshotBody(changes=changes, seen=list(core.seen), flaps=flaps))
    return Snapshot(
        partition=core.partition,
        epoch=core.epoch,
        decision_seq=core.decision_seq,
        feed_offset=core.feed_offset,
        kafka_partition=kafka_partition,
        view_seq=core.view_seq,
        now=core.state.now,
        feed_time=core.feed_time,
        counters=dict(core.counters),
        codec=codec,
        body=body,
        wall_time=wall_time,
    )


def restore(snapshot: Snapshot, *, epoch: int | None = None) -> DurableCache:
    """A cache in the state ``snapshot`` recorded (raises ``SnapshotError`` on an unreadable body)."""
    return run_whole(restore_in_slices(snapshot, epoch=epoch))


def restore_in_slices(snapshot: Snapshot, *, epoch: int | None = None) -> Steps[DurableCache]:
    """:func:`restore` in slices (:mod:`sniper.core.slicing`)."""
    body = decode_body(snapshot)
    core = DurableCache(snapshot.partition, epoch=snapshot.epoch if epoch is None else epoch)
    yield from apply_in_slices(core.state, body.changes)
    allocations = core.state.allocations  # a snapshot without kills in its changes lists them aside
    core.state.apply(
        p.VictimsKilled(victims=[a for a in body.killed if a in allocations and not allocations[a].killed])
    )
    core.flaps = {(app, ask): (count, when) for app, ask, count, when in body.flaps}
    core.decision_seq = snapshot.decision_seq
    core.feed_offset = snapshot.feed_offset
    core.feed_time = snapshot.feed_time
    core.view_seq = snapshot.view_seq
    for kind, value in snapshot.counters.items():
        core.counters[kind] = max(core.counters.get(kind, 0), value)
    core.seen = OrderedDict((event_id, None) for event_id in body.seen[-SEEN_IDS:])
    core.drain()  # the restored changes are not news for anyone
    return core


# ---------------------------------------------------------------------------------------------- replay


@dataclasses.dataclass(slots=True)
class ReplayResult:
    fresh: list[d.DecisionMsg]  # decided during replay after the last logged one: still to publish
    refused: list[RefusedRecord] = dataclasses.field(default_factory=list)  # refused for their time
    feed_replayed: int = 0
    decisions_applied: int = 0  # logged decisions turned back into changes
    decisions_regenerated: int = 0  # logged decisions a replayed feed record produced again
    divergences: list[str] = dataclasses.field(default_factory=list)


def _bump_counter(core: Cache, kind: str, ident: str) -> None:
    match = _ID_NUMBER.match(ident)
    if match is not None:
        core.counters[kind] = max(core.counters.get(kind, 0), int(match.group(1)))


def _advance_clock(core: Cache, t: float) -> None:
    if t > core.state.now:
        core.commit(p.Clock(now=t))


def _same(a: d.DecisionMsg, b: d.DecisionMsg) -> bool:
    """Whether a regenerated decision is the logged one (type and subject; ``t`` and epoch may differ)."""
    if type(a) is not type(b):
        return False
    for name in ("allocation", "reservation", "app", "ask", "node"):
        if getattr(a, name, None) != getattr(b, name, None):
            return False
    return True


def apply_logged(core: Cache, log: Sequence[d.DecisionMsg], index: int) -> tuple[int, list[str]]:
    """Apply ``log[index]`` (and the preempt records of the same commit) to ``core`` as state changes.

    Returns the index of the next decision to look at, and what could not be applied (divergences:
    the state no longer matches the log there; the rest of the log is still applied as far as it can).
    ``sniper.core.decision_seq`` becomes the seq of the last decision consumed.
    """
    dec = log[index]
    _advance_clock(core, dec.t)
    end = index + 1
    problems: list[str] = []
    if isinstance(dec, d.Preempt):
        end = _commit_end(log, index)
        if not dec.observe_only:
            problems = _apply_preempts(core, [x for x in log[index:end] if isinstance(x, d.Preempt)])
    elif (followed := _FOLLOWED.get(type(dec))) is not None:
        _follow(core, followed, dec)
    else:
        apply = _APPLY.get(type(dec))
        if apply is not None:
            problems = apply(core, dec)
    core.decision_seq = max(core.decision_seq, log[end - 1].seq)
    return end, problems


def _apply_allocated(core: Cache, dec: d.Allocated) -> list[str]:
    """A container committed from a proposal: committed again, unless the log holds it twice."""
    state = core.state
    _bump_counter(core, "alloc", dec.allocation)
    app = state.apps.get(dec.app)
    if dec.allocation in state.allocations:
        return []  # already there (a duplicate in the log)
    if app is None or dec.node not in state.nodes:
        return [f"allocated {dec.allocation}: app {dec.app} or node {dec.node} is not known"]
    ask = app.asks.get(dec.ask)
    reservation = dec.reservation if dec.reservation in state.reservations else None
    node = state.nodes[dec.node]
    resource = dict(dec.resource)
    change = allocation_set(
        state, dec.allocation, dec.app, dec.ask, ask, node, resource, dec.am, dec.opportunistic, reservation, dec.t
    )
    core.commit(change)
    return []


def _apply_request(core: Cache, dec: d.PreemptRequest) -> list[str]:
    """A logged preemption request (see :func:`_open_request`), unless it only observed."""
    return [] if dec.observe_only else _open_request(core, dec)


def _apply_promoted(core: Cache, dec: d.Promoted) -> list[str]:
    alloc = core.state.allocations.get(dec.allocation)
    if alloc is not None and alloc.opportunistic:
        core.commit(p.AllocationPromoted(allocation=dec.allocation))
    return []


def _apply_node_reserved(core: Cache, dec: d.NodeReserved) -> list[str]:
    state = core.state
    _bump_counter(core, "node_reservation", dec.reservation)
    if dec.node not in state.node_reservations and state.ask((dec.app, dec.ask)) is not None:
        core.commit(
            p.NodeReservationSet(
                reservation=dec.reservation,
                app=dec.app,
                ask=dec.ask,
                node=dec.node,
                resource=dict(dec.resource),
                expires=dec.expires,
            )
        )
    return []


# Decisions that make something (the rest end something, :data:`_FOLLOWED`, or change no state: rejected, ...).
_APPLY: dict[type[d.DecisionMsg], Callable[[Cache, Any], list[str]]] = {
    d.Allocated: _apply_allocated,
    d.PreemptRequest: _apply_request,
    d.Promoted: _apply_promoted,
    d.NodeReserved: _apply_node_reserved,
}


@dataclasses.dataclass(frozen=True, slots=True)
class _Followed:
    """How replay follows one lifecycle table (:mod:`sniper.core.lifecycle`) for the decisions ``ends`` lists:
    the ``phase`` now of the object a decision names, and the change to commit for each step of the
    table's path from there to the phase the decision left it in."""

    table: lifecycle.Table
    ends: Mapping[type[d.DecisionMsg], str]
    phase: Callable[[PartitionState, Any], str]
    build: Mapping[type[p.ChangeMsg], Callable[[PartitionState, Any], p.ChangeMsg]]


def _allocation_phase(state: PartitionState, dec: d.Kill | d.PreemptCancelled | d.Released | d.AllocationLost) -> str:
    alloc = state.allocations.get(dec.allocation)
    return lifecycle.ABSENT if alloc is None else alloc.phase


def _node_reservation_phase(state: PartitionState, dec: d.NodeUnreserved) -> str:
    held = state.node_reservations.get(dec.node)
    return "held" if held is not None and held.id == dec.reservation else lifecycle.ABSENT


_ALLOCATION = _Followed(
    lifecycle.ALLOCATION,
    lifecycle.LOGGED_ALLOCATION_END,
    _allocation_phase,
    {
        # A container a preemption request's deadline killed was under no notice: the kill marks it first.
        p.VictimsMarked: lambda _, dec: p.VictimsMarked(victims=[dec.allocation], deadline=dec.t),
        p.VictimsKilled: lambda _, dec: p.VictimsKilled(victims=[dec.allocation]),
        p.VictimsReleased: lambda _, dec: p.VictimsReleased(victims=[dec.allocation]),
        # Normally regenerated by the replayed feed record; applied here only if replay diverged.
        p.AllocationGone: lambda _, dec: p.AllocationGone(allocation=dec.allocation),
    },
)
_PREEMPTION_RESERVATION = _Followed(
    lifecycle.PREEMPTION_RESERVATION,
    lifecycle.LOGGED_RESERVATION_END,
    lambda state, dec: "held" if dec.reservation in state.reservations else lifecycle.ABSENT,
    {p.ReservationGone: lambda _, dec: p.ReservationGone(reservation=dec.reservation)},
)
_NODE_RESERVATION = _Followed(
    lifecycle.NODE_RESERVATION,
    lifecycle.LOGGED_NODE_RESERVATION_END,
    _node_reservation_phase,
    {
        p.NodeReservationGone: lambda state, dec: p.NodeReservationGone(
            node=dec.node, no_reserve_before=node_reservation.hold_off(state, dec.reason, dec.t)
        )
    },
)
_CONTRACT = _Followed(
    lifecycle.CONTRACT,
    lifecycle.LOGGED_CONTRACT_END,
    lambda state, dec: "open" if dec.request in state.contracts else lifecycle.ABSENT,
    {p.ContractGone: lambda _, dec: p.ContractGone(contract=dec.request)},
)
_FOLLOWED: dict[type[d.DecisionMsg], _Followed] = {
    kind: followed
    for followed in (_ALLOCATION, _PREEMPTION_RESERVATION, _NODE_RESERVATION, _CONTRACT)
    for kind in followed.ends
}


def _follow(core: Cache, followed: _Followed, dec: d.DecisionMsg) -> None:
    """Commit the changes that take the object ``dec`` names from its phase now to the one ``dec`` left it
    in: none when it is there already (a duplicate, or what the replayed feed did) or cannot get there."""
    state = core.state
    steps = lifecycle.path(followed.table, followed.phase(state, dec), followed.ends[type(dec)], lifecycle.REPLAYABLE)
    for change in steps or ():
        core.commit(followed.build[change](state, dec))


def _commit_end(log: Sequence[d.DecisionMsg], index: int) -> int:
    """Where the run of preempt records of one committed preemption (one per victim) that starts at
    ``log[index]`` ends."""
    first = log[index]
    assert isinstance(first, d.Preempt)
    end = index + 1
    while end < len(log):
        following = log[end]
        if not isinstance(following, d.Preempt) or not _same_commit(first, following):
            break
        end += 1
    return end


def _same_commit(first: d.Preempt, other: d.Preempt) -> bool:
    if first.observe_only != other.observe_only or first.policy != other.policy:
        return False
    if first.reservation:
        return other.reservation == first.reservation
    return not other.reservation and other.deadline == first.deadline


def _apply_preempts(core: Cache, group: list[d.Preempt]) -> list[str]:
    state = core.state
    first = group[0]
    victims = [x.allocation for x in group if x.allocation in state.allocations]
    problems = [f"preempt of unknown allocation {x.allocation}" for x in group if x.allocation not in state.allocations]
    if not first.reservation:
        if victims:
            core.commit(p.VictimsMarked(victims=victims, deadline=first.deadline, policy=first.policy))
        return problems
    _bump_counter(core, "reservation", first.reservation)
    if first.reservation in state.reservations:
        return problems
    why = _reserve(core, first.reservation, first, victims, first.deadline, first.policy)
    return problems if why is None else [*problems, why]


def _reserve(
    core: Cache,
    rid: str,
    named: d.Preempt | d.ContractContainer,
    victims: list[str],
    deadline: float,
    policy: str,
) -> str | None:
    """Commit the reservation a logged preemption names (``None``), or say why it cannot be."""
    state = core.state
    app = state.apps.get(named.for_app)
    ask = None if app is None else app.asks.get(named.for_ask)
    if ask is None or named.node not in state.nodes:
        return f"reservation {rid}: ask {named.for_app}/{named.for_ask} or node is gone"
    resource = dict(named.for_resource) if named.for_resource else dict(ask.resource)
    core.commit(reservation_set(state, rid, ask, named.node, resource, victims, deadline, policy))
    return None


def _open_request(core: Cache, dec: d.PreemptRequest) -> list[str]:
    """A logged preemption request: its containers under notice (each with the reservation it names,
    made here when no preempt record of the same commit made it), and the open request."""
    state = core.state
    _bump_counter(core, "contract", dec.request)
    if dec.request in state.contracts:
        return []
    problems = [
        f"preempt request: unknown allocation {c.allocation}"
        for c in dec.containers
        if c.allocation not in state.allocations
    ]
    by_reservation: dict[str, list[d.ContractContainer]] = {}
    for c in dec.containers:
        if c.allocation in state.allocations and not state.allocations[c.allocation].preempting:
            by_reservation.setdefault(c.reservation, []).append(c)
    for rid, named in by_reservation.items():
        victims = [c.allocation for c in named]
        if not rid or rid in state.reservations:
            core.commit(p.VictimsMarked(victims=victims, deadline=dec.deadline, policy=dec.policy))
            continue
        _bump_counter(core, "reservation", rid)
        why = _reserve(core, rid, named[0], victims, dec.deadline, dec.policy)
        if why is not None:
            problems.append(why)
    core.commit(
        p.ContractSet(
            contract=dec.request,
            app=dec.app,
            resource=dict(dec.resource),
            deadline=dec.deadline,
            victims=[c.allocation for c in dec.containers],
            policy=dec.policy,
        )
    )
    return problems


def replay(
    core: DurableCache,
    feed: Sequence[tuple[int, f.Feed]],
    log: Sequence[d.DecisionMsg],
) -> ReplayResult:
    """Bring ``core`` (restored from a snapshot) up to date; see the module invariants.

    ``feed``: ``(offset, event)`` records of this partition after the snapshot's ``feed_offset``, in
    offset order. ``log``: the logged decisions of this partition with ``seq`` above the snapshot's, in
    ``seq`` order (one per seq). The core's output is drained; its decisions are either suppressed or
    returned as ``fresh``.
    """
    return run_whole(replay_in_slices(core, feed, log))


def replay_in_slices(
    core: DurableCache,
    feed: Sequence[tuple[int, f.Feed]],
    log: Sequence[d.DecisionMsg],
) -> Steps[ReplayResult]:
    """:func:`replay` in slices of about :data:`~sniper.core.slicing.RECORDS` feed records or logged
    decisions (:mod:`sniper.core.slicing`)."""
    last_logged = max((x.seq for x in log), default=core.decision_seq)
    logged_by_seq = {x.seq: x for x in log}
    reach = max((x.feed_offset for x in log), default=-1)  # the old owner handled the records up to here
    clock_refused = {x.feed_offset for x in log if isinstance(x, d.Rejected) and refused_for_time(x)}
    result = ReplayResult(fresh=[])
    i = j = 0

    def feed_one(offset: int, event: f.Feed) -> None:
        core.feed_offset = offset
        core.handle_event(event, too_far=offset in clock_refused if offset <= reach else None)
        result.feed_replayed += 1
        for dec in core.drain().decisions:
            if dec.seq > last_logged:
                result.fresh.append(dec)
                continue
            logged = logged_by_seq.get(dec.seq)
            if logged is None or not _same(dec, logged):
                result.divergences.append(f"replayed feed offset {offset} decided {dec!r}, the log has {logged!r}")
            else:
                result.decisions_regenerated += 1

    steps = 0
    while j < len(log):
        steps += 1
        if steps % RECORDS == 0:
            yield
        dec = log[j]
        if dec.seq <= core.decision_seq:
            j += 1  # regenerated by a replayed feed record (or before the snapshot)
            continue
        if i < len(feed) and feed[i][0] <= dec.feed_offset:
            feed_one(*feed[i])
            i += 1
            continue
        j, problems = apply_logged(core, log, j)
        result.decisions_applied += 1
        result.divergences.extend(problems)
    while i < len(feed):
        feed_one(*feed[i])
        i += 1
        if i % RECORDS == 0:
            yield
    core.drain()
    result.refused = core.take_refused()
    return result


def stamp(decisions: Sequence[d.DecisionMsg], **fields: Any) -> list[d.DecisionMsg]:
    """Copies of ``decisions`` with ``fields`` replaced (e.g. the new owner's epoch on fresh ones)."""
    import msgspec

    return [msgspec.structs.replace(x, **fields) for x in decisions]


__all__ = [
    "CLOCK_REFUSED",
    "MAX_QUANTITY",
    "DurableCache",
    "RefusedRecord",
    "ReplayResult",
    "absurd_quantity",
    "apply_logged",
    "refused_for_time",
    "replay",
    "replay_in_slices",
    "restore",
    "restore_in_slices",
    "snapshot_in_slices",
    "stamp",
    "take_snapshot",
]
