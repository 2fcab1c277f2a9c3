"""Decisions: what the cache committed, published to resource managers (architecture: The feed).

The decisions stream is the commit log: ``seq`` increases by one per decision within a partition
and ``epoch`` names the owner that committed it, so a consumer can drop a deposed owner's output.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

# Why a node reservation ended: fulfilled, timed out, its ask or app or node gone, or cancelled by a
# preemption policy (``DERESERVED``, YARN capacity monitor's cheapest action).
NodeUnreserveReason = Literal["placed", "timeout", "ask_removed", "node_removed", "app_removed", "dereserved"]
DERESERVED: Final = "dereserved"
# The reason of a kill of an opportunistic container (at once, for a guaranteed ask), and how the reason
# of a kill at a preemption request's deadline begins; a kill at the end of its grace says so in words.
KILL_OPPORTUNISTIC: Final = "opportunistic"
KILL_OVERCOMMIT: Final = "overcommit"  # a node reported above its over-commit preempt_above
KILL_AT_REQUEST_DEADLINE: Final = "preemption request"
# What made a kill (the ``cause`` of a ``kill`` decision): the end of its grace, an opportunistic container
# evicted at once, an over-committed node above ``preempt_above``, or a preemption request's deadline.
# :func:`kill_cause` reads it from the reason of a kill logged without its cause.
KillCause = Literal["grace_expired", "opportunistic", "overcommit", "request_deadline"]
# Why a preemption reservation ended without an allocation (the ``code`` of a ``reservation_ended``
# decision; its ``reason`` says it in words).
ReservationEndCode = Literal[
    "timeout",  # not fulfilled reservation_timeout after its victims' deadline (victims there, or room not)
    "partition_removed",
    "node_unschedulable",  # its node became unschedulable
    "node_shrank",  # its node shrank below what the reservation needs
    "node_removed",
    "ask_withdrawn",  # its ask (or app) was withdrawn
    "placed_elsewhere",  # its beneficiary was placed on free room on another node
    "given_back",  # its beneficiary was placed on room a preemption request's app gave back
    "victims_kept",  # a preemption request's named victims keep running, so its room cannot be promised
]
# Why an event or ask was rejected (the ``code`` of a ``rejected`` decision; its ``reason`` says it in words).
RejectionCode = Literal[
    "bad_record",  # the record itself is unusable (absurd quantity, unbounded labels, a config that fails)
    "clock_ahead",  # stamped too far ahead of the partition's clock (admission.max_clock_skew)
    "unconfigured",  # the partition has no configuration yet
    "invalid",  # it contradicts the partition (a bad configuration, quantity or reference)
    "unknown_node",
    "unknown_app",
    "app_elsewhere",  # the app already runs in another queue
    "unknown_reservation",  # the app names an SLO reservation its queue does not hold
    "unknown_queue",  # the app names a queue the partition's configuration does not have
    "not_a_leaf",  # apps go to leaf queues, never to a parent
    "queue_stopped",  # the app names a queue that is stopped (queue.state), or under a stopped parent
    "empty_ask",  # it asks for nothing
    "bad_constraint",  # a placement constraint no cluster could ever satisfy (min above max, no tags, ...)
    "opportunistic_am",  # an application master always runs guaranteed
    "over_admission",  # past the admission bounds
    "gang_over_count",  # gang_min above the ask's count
    "over_queue_max",  # it (or its gang) can never fit a queue's max
    "no_matching_node",  # no node matches its node selector
    "never_fits",  # no node (or its required node) can ever hold it
    "gang_never_fits",  # no set of nodes can ever hold its gang together
    "bad_topology",  # its topology names a level the partition's topology does not list
    "bad_utilization",  # a node utilization report the partition cannot take
    "promotion_refused",  # an opportunistic container that cannot be promoted
]


MAX_REASON = 4096  # characters of a decision's reason (every decision fits a Kafka record with room to spare)
MAX_QUOTE = 256  # characters of input (a node selector, a list) a reason quotes


def clipped(text: str, limit: int = MAX_REASON) -> str:
    """``text`` whole when it has at most ``limit`` characters, else its start, an ellipsis and how many
    characters were left out: what a reason quotes of its input stays bounded whatever the input."""
    if len(text) <= limit:
        return text
    kept = max(0, limit - 40)  # room for the note
    return f"{text[:kept]}… ({len(text) - kept} characters left out)"


def kill_cause(reason: str) -> KillCause:
    """What made a kill whose ``reason`` is ``reason``: the fallback for kills logged without their
    ``cause`` (the one place that reads a kill's reason)."""
    head = reason.split(":", 1)[0]
    if head == KILL_OPPORTUNISTIC:
        return "opportunistic"
    if head == KILL_OVERCOMMIT:
        return "overcommit"
    if reason.startswith(KILL_AT_REQUEST_DEADLINE):
        return "request_deadline"
    return "grace_expired"


class Decision(msgspec.Struct, tag_field="type", kw_only=True, frozen=True, gc=False):
    partition: str = "default"
    seq: int = 0
    epoch: int = 0
    t: float = 0.0
    # The Kafka offset of the last feed record the cache had handled when it made this decision (-1:
    # none, or not on Kafka); a new owner replays the feed up to it before applying the decision.
    feed_offset: int = -1


class Allocated(Decision, tag="allocated", frozen=True, gc=False):
    allocation: str
    app: str
    ask: str
    queue: str
    node: str
    resource: dict[str, int]
    am: bool = False
    reservation: str | None = None  # set when the allocation fulfils a preemption reservation
    opportunistic: bool = False  # YARN execution type OPPORTUNISTIC: outside every queue's accounting


class Preempt(Decision, tag="preempt", frozen=True, gc=False):
    allocation: str
    app: str
    queue: str
    node: str
    resource: dict[str, int]
    for_ask: str
    for_app: str
    for_queue: str
    deadline: float
    reservation: str
    policy: str = "sniper"
    cost: float = 0.0
    reason: str = ""
    observe_only: bool = False  # what would be preempted; nothing changed
    victim_queue_ideal: dict[str, int] = {}
    # How far the victim's queue is over its ideal share, the figure the reason quotes when that is why.
    over_ideal: dict[str, int] = {}
    for_resource: dict[str, int] = {}
    opportunistic: bool = False  # an opportunistic victim: killed at once, outside every queue's rules


class Kill(Decision, tag="kill", frozen=True, gc=False):
    allocation: str
    app: str
    queue: str
    node: str
    reason: str = "grace period expired"
    cause: KillCause | None = None  # what made it, as a code (None: a log without causes, see kill_cause)
    # What a preemption request still missed at its deadline, the figure a ``request_deadline`` kill's
    # reason quotes ({} for other causes).
    missing: dict[str, int] = {}


def cause_of(kill: Kill) -> KillCause:
    """What made ``kill``: its ``cause``, read from its reason when it was logged without one."""
    return kill.cause if kill.cause is not None else kill_cause(kill.reason)


class Released(Decision, tag="released", frozen=True, gc=False):
    """An allocation the resource manager reported finished (or that a kill completed)."""

    allocation: str
    app: str
    queue: str
    node: str
    resource: dict[str, int]


class AllocationLost(Decision, tag="allocation_lost", frozen=True, gc=False):
    allocation: str
    app: str
    ask: str
    queue: str
    node: str
    resource: dict[str, int]


class Rejected(Decision, tag="rejected", frozen=True, gc=False):
    """An event or ask the scheduler refuses (can never fit, unknown queue, ...), with the reason."""

    reason: str
    app: str = ""
    ask: str = ""
    event: str = ""
    code: RejectionCode | None = None  # why, as a code a consumer matches on (None: a log without codes)
    # The figures the reason quotes, in the feed's units: the ask's resource and the bound it can never
    # fit (a queue's max, its required node's capacity); empty where the reason quotes none.
    resource: dict[str, int] = {}
    bound: dict[str, int] = {}


class ReservationEnded(Decision, tag="reservation_ended", frozen=True, gc=False):
    """A preemption reservation that ended without an allocation (withdrawn ask, timeout, node change...)."""

    reservation: str
    app: str
    ask: str
    node: str
    reason: str
    code: ReservationEndCode | None = None  # why, as a code a consumer matches on (None: a log without codes)


class NodeReserved(Decision, tag="node_reserved", frozen=True, gc=False):
    """A YARN-style node reservation: only this ask may be placed on the node until it ends."""

    reservation: str
    app: str
    ask: str
    queue: str
    node: str
    resource: dict[str, int]
    expires: float


class NodeUnreserved(Decision, tag="node_unreserved", frozen=True, gc=False):
    """A node reservation ended; ``reason`` is one of ``placed``, ``timeout``, ``ask_removed``,
    ``node_removed``, ``app_removed``, ``dereserved`` (``policy`` names the policy that de-reserved)."""

    reservation: str
    app: str
    ask: str
    queue: str
    node: str
    reason: NodeUnreserveReason
    policy: str = ""


class Promoted(Decision, tag="promoted", frozen=True, gc=False):
    """An opportunistic allocation that became guaranteed (feed ``allocation_promoted``)."""

    allocation: str
    app: str
    queue: str
    node: str
    resource: dict[str, int]


class PreemptCancelled(Decision, tag="preempt_cancelled", frozen=True, gc=False):
    """A victim under notice whose reservation no longer needs it: it keeps running and will not be killed."""

    allocation: str
    app: str
    queue: str
    node: str
    reservation: str
    reason: str


class ContractContainer(msgspec.Struct, frozen=True, gc=False):
    """One container a preemption request names, with the beneficiary its room was chosen for."""

    allocation: str
    node: str
    resource: dict[str, int]
    reservation: str = ""  # the reservation holding its room (sniper, intra-queue); "" for proportional
    for_ask: str = ""
    for_app: str = ""
    for_queue: str = ""
    for_resource: dict[str, int] = {}


class PreemptRequest(Decision, tag="preempt_request", frozen=True, gc=False):
    """YARN-45's preemption contract: ``app`` is asked to give ``resource`` back by ``deadline``; its
    application master may release the ``containers`` named or others of the same size. What is still
    missing at the deadline is killed, newest containers first."""

    request: str
    app: str
    queue: str
    resource: dict[str, int]
    deadline: float
    containers: list[ContractContainer]
    for_ask: str = ""  # the first beneficiary (every container names its own)
    for_app: str = ""
    for_queue: str = ""
    policy: str = "sniper"
    reason: str = ""
    observe_only: bool = False


class PreemptRequestEnded(Decision, tag="preempt_request_ended", frozen=True, gc=False):
    """A preemption request closed: ``given_back`` (the application master released enough),
    ``enforced`` (the deadline passed: ``killed`` covers what was missing) or ``withdrawn`` (the
    policy's need vanished before the deadline)."""

    request: str
    app: str
    queue: str
    outcome: str
    released: dict[str, int] = {}
    killed: dict[str, int] = {}
    reason: str = ""


class PartitionRemoved(Decision, tag="partition_removed", frozen=True, gc=False):
    """The partition was retired by a ``partition_removed`` feed event: what it held when it was (each
    allocation's ``released`` comes before this), and the event's reason. It has no configuration now."""

    apps: int
    allocations: int
    nodes: int
    reason: str = ""


class PlannedInterval(msgspec.Struct, frozen=True, gc=False):
    """``resource`` held for an SLO reservation from ``start`` to ``end`` (seconds, feed time)."""

    start: float
    end: float
    resource: dict[str, int]


class ReservationAccepted(Decision, tag="reservation_accepted", frozen=True, gc=False):
    """An SLO reservation the planner placed: during each interval (and each ``recurrence`` later, when
    set) its apps hold ``resource`` as a guarantee inside ``queue``, in the queue ``reservation_queue``."""

    reservation: str
    queue: str
    reservation_queue: str
    arrival: float
    deadline: float
    intervals: list[PlannedInterval]
    recurrence: float | None = None
    event: str = ""


class ReservationRejected(Decision, tag="reservation_rejected", frozen=True, gc=False):
    """An SLO reservation refused at once, with the reason (no room in the queue's share, an unknown or
    non-reservable queue, a deadline in the past, ...)."""

    reservation: str
    queue: str
    reason: str
    event: str = ""
    # The queue's share the request was planned against, the figure a reason about room quotes ({}: the
    # request was refused before planning: an unknown queue, a bad name, ...).
    share: dict[str, int] = {}


class Synced(Decision, tag="synced", frozen=True, gc=False):
    """The answer to a ``sync`` feed event: every event published before it has been handled."""

    event: str


DecisionMsg = (
    Allocated
    | Preempt
    | PreemptCancelled
    | Kill
    | Released
    | AllocationLost
    | Rejected
    | ReservationEnded
    | NodeReserved
    | NodeUnreserved
    | Promoted
    | PreemptRequest
    | PreemptRequestEnded
    | PartitionRemoved
    | ReservationAccepted
    | ReservationRejected
    | Synced
)
