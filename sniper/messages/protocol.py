"""The actors' own protocol: view deltas, proposals and their outcomes, placement requests, ticks.

View deltas carry a strictly increasing ``seq`` per partition; a replica applies them in order and
ignores any it has already applied. Proposals name the view ``seq`` they were computed on. Every
change is a fact the cache has committed; replicas apply the very same changes (one mutation path).
"""

from __future__ import annotations

from typing import Any

import msgspec

from sniper.messages.feed import AskTopology, PlacementConstraint

# ---------------------------------------------------------------- changes (the state's only mutations)


class Change(msgspec.Struct, tag_field="kind", frozen=True, gc=False):
    pass


class ConfigSet(Change, tag="config", frozen=True, gc=False, omit_defaults=True):
    config: dict[str, Any]
    # When each quota-preempted queue's ``max`` took effect, where it predates this change (a snapshot's).
    at: float = 0.0  # the configuration's feed time: when a quota-preempted queue's new max takes effect
    max_since: dict[str, float] = {}
    # Each fair-share usage a queue's ``fairshare.halflife`` tracks, as [value, at, half-life] (a snapshot's).
    fair_usage: dict[str, list[float]] = {}


class NodeSet(Change, tag="node", frozen=True, gc=False):
    node: str
    capacity: dict[str, int]
    schedulable: bool = True
    labels: dict[str, str] = {}


class NodeUtilizationSet(Change, tag="node_utilization", frozen=True, gc=False):
    """A node's reported utilization (core.overcommit): what its containers really use. ``unmeasured``
    (only when rebuilding a state) names the containers placed on it since that report."""

    node: str
    used: dict[str, int]
    unmeasured: list[str] = []


class NodeGone(Change, tag="node_gone", frozen=True, gc=False):
    node: str


class AppSet(Change, tag="app", frozen=True, gc=False):
    app: str
    queue: str
    user: str = ""
    priority: int = 0
    submit_seq: int = 0
    submit_time: float = 0.0
    groups: tuple[str, ...] = ()
    preemption_contract: bool = False  # YARN-45: asked to give resources back before any kill
    max_disruption: int | None = None  # at most this many of its containers preempting at once
    allow_preemption: bool = True  # false: its containers are victims of last resort
    checkpoint_interval: float | None = None  # seconds between its containers' checkpoints (None: none)


class AppGone(Change, tag="app_gone", frozen=True, gc=False):
    app: str


class AskSet(Change, tag="ask", frozen=True, gc=False):
    app: str
    ask: str
    resource: dict[str, int]
    count: int
    priority: int = 0
    am: bool = False
    seq: int = 0
    created: float = 0.0
    required_node: str | None = None
    duration: float | None = None
    retry: bool = True
    damped_until: float = 0.0  # re-added after a withdrawal that ended a reservation: no preemption before
    node_selector: dict[str, list[str]] = {}
    gang_min: int = 0  # the first ``gang_min`` containers are placed together or not at all
    opportunistic: bool = False
    reserve_after: float = 0.0  # de-reserved by a policy: no node reservation before then
    never_preempts: bool = False  # preemption_policy "never": waits for free room, never a beneficiary
    usage: dict[str, int] | None = None  # what each container really uses (None: its resource)
    tags: tuple[str, ...] = ()  # allocation tags of its containers (core.constraints)
    constraints: tuple[PlacementConstraint, ...] = ()  # validated by the cache
    topology: AskTopology | None = None  # checked by the cache against the partition's levels


class AskGone(Change, tag="ask_gone", frozen=True, gc=False):
    app: str
    ask: str


class AllocationSet(Change, tag="alloc", frozen=True, gc=False):
    allocation: str
    app: str
    ask: str
    node: str
    resource: dict[str, int]
    start: float = 0.0
    am: bool = False
    reservation: str | None = None
    priority: int = 0  # the ask's priority (intra-queue preemption compares it)
    opportunistic: bool = False  # outside every queue's accounting, counted on its node only
    pinned: bool = False  # placed for a required-node ask: never a victim (architecture: invariant 5a)
    usage: dict[str, int] | None = None  # what it really uses (None: its resource), core.overcommit
    overcommit: bool = False  # opportunistic, placed on room only measured utilization left (core.overcommit)
    tags: tuple[str, ...] = ()  # its ask's allocation tags (core.constraints counts them per scope)
    checkpointed: float | None = None  # its last reported checkpoint (only when rebuilding a state)


class AllocationCheckpointed(Change, tag="alloc_checkpointed", frozen=True, gc=False):
    """The allocation's app reported a checkpoint written ``at`` (later than its start and last one)."""

    allocation: str
    at: float


class AllocationPromoted(Change, tag="alloc_promoted", frozen=True, gc=False):
    """An opportunistic allocation becomes guaranteed: it now counts in its queue like any other."""

    allocation: str


class AllocationGone(Change, tag="alloc_gone", frozen=True, gc=False):
    allocation: str


class ReservationSet(Change, tag="reservation", frozen=True, gc=False):
    """A committed preemption: victims marked preempting, the room on ``node`` held for the ask."""

    reservation: str
    app: str
    ask: str
    node: str
    resource: dict[str, int]
    victims: list[str]
    deadline: float
    expires: float
    policy: str = "sniper"


class ReservationGone(Change, tag="reservation_gone", frozen=True, gc=False):
    reservation: str


class NodeReservationSet(Change, tag="node_reservation", frozen=True, gc=False):
    """A YARN-style node reservation (:mod:`sniper.core.node_reservation`): only this ask may be placed on
    the node until it ends. Not a preemption reservation: no room is held, no victim is named."""

    reservation: str
    app: str
    ask: str
    node: str
    resource: dict[str, int]
    expires: float


class NodeReservationGone(Change, tag="node_reservation_gone", frozen=True, gc=False):
    node: str
    no_reserve_before: float = 0.0  # de-reserved: its ask may not reserve again before then


class VictimsMarked(Change, tag="victims", frozen=True, gc=False):
    """Victims preempted without a reservation (the proportional policy's shotgun)."""

    victims: list[str]
    deadline: float
    policy: str = "proportional"


class VictimsReleased(Change, tag="victims_released", frozen=True, gc=False):
    """Victims under notice that no reservation needs any more: they keep running, no longer preempting."""

    victims: list[str]


class VictimsKilled(Change, tag="victims_killed", frozen=True, gc=False):
    """Containers whose ``kill`` was decided (their grace ran out, a preemption request's deadline passed,
    or they were opportunistic and in the way): they stay until their release arrives, killed."""

    victims: list[str]


class ContractSet(Change, tag="contract", frozen=True, gc=False):
    """An open preemption request (YARN-45's contract): ``app`` is asked to give ``resource`` back by
    ``deadline``; ``victims`` are the containers the policy chose (under notice meanwhile). ``released``
    and ``cancelled`` are what it gave back and what the policy no longer needs (non-empty only when
    rebuilding a state: the state keeps both up to date itself)."""

    contract: str
    app: str
    resource: dict[str, int]
    deadline: float
    victims: list[str]
    policy: str = "sniper"
    released: dict[str, int] = {}
    cancelled: dict[str, int] = {}
    # Whether the victims were chosen for beneficiaries (sniper, intra-queue): then only what serves
    # them counts as given back; the proportional baseline's have none, so any release counts.
    beneficiaries: bool = True


class ContractServed(Change, tag="contract_served", frozen=True, gc=False):
    """Room the app of an open preemption request gave back (containers it was not asked for) served the
    beneficiary that ``victims`` (containers the request named, their notices just cancelled) were to
    make room for: they count as given back, not as no longer needed, and leave the named containers."""

    contract: str
    victims: list[str]


class GiveBackHeld(Change, tag="give_back_held", frozen=True, gc=False):
    """Room the app of open preemption request ``contract`` gave back on ``node`` (containers it was not
    asked for) that the beneficiary of ``reservation`` does not fit yet but will once more of the app's
    containers there are released: ``resource`` of the node's free room is held for that beneficiary (no
    other ask takes it) while the reservation and the request last. It replaces the reservation's hold
    so far; an empty ``resource`` lets it go."""

    reservation: str
    contract: str
    node: str
    resource: dict[str, int]


class ContractGone(Change, tag="contract_gone", frozen=True, gc=False):
    contract: str


class SloReservationSet(Change, tag="slo_reservation", frozen=True, gc=False):
    """An accepted SLO reservation's plan (core.slo_plan): intervals as (start, end, resource), repeated
    every ``period`` seconds when it is not 0."""

    reservation: str
    queue: str
    arrival: float
    deadline: float
    intervals: list[tuple[float, float, dict[str, int]]]
    period: float = 0.0


class SloReservationGone(Change, tag="slo_reservation_gone", frozen=True, gc=False):
    reservation: str


class Clock(Change, tag="clock", frozen=True, gc=False):
    now: float


class PartitionCleared(Change, tag="partition_cleared", frozen=True, gc=False):
    """The partition's configuration is dropped; it holds no node and no app when this is applied."""


ChangeMsg = (
    ConfigSet
    | NodeSet
    | NodeGone
    | NodeUtilizationSet
    | AppSet
    | AppGone
    | AskSet
    | AskGone
    | AllocationSet
    | AllocationGone
    | AllocationPromoted
    | AllocationCheckpointed
    | ReservationSet
    | ReservationGone
    | NodeReservationSet
    | NodeReservationGone
    | VictimsMarked
    | VictimsReleased
    | VictimsKilled
    | ContractSet
    | ContractGone
    | ContractServed
    | GiveBackHeld
    | PartitionCleared
    | SloReservationSet
    | SloReservationGone
    | Clock
)


# ---------------------------------------------------------------- proposals and outcomes


class Placement(msgspec.Struct, frozen=True, gc=False, array_like=True):
    app: str
    ask: str
    node: str
    ask_seq: int = 0  # the ask's sequence number: a re-added ask of the same name is another ask


class NodeReserve(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """The allocator's proposal to reserve ``node`` for one container of an ask no node's free room holds."""

    app: str
    ask: str
    node: str
    ask_seq: int = 0


class Victimized(msgspec.Struct, frozen=True, gc=False):
    """A preemption placement: the ask goes to ``node`` once ``victims`` are gone."""

    app: str
    ask: str
    node: str
    victims: list[str]
    cost: float = 0.0
    reason: str = ""


class ProposalOutcome(msgspec.Struct, frozen=True, gc=False):
    proposal: str
    accepted: int
    rejected: dict[str, str] = {}  # "app/ask@node" -> reason


class Message(msgspec.Struct, tag_field="type", kw_only=True, frozen=True, gc=False):
    partition: str = "default"


class ViewDelta(Message, tag="view", frozen=True, gc=False):
    seq: int
    now: float = 0.0
    changes: list[ChangeMsg] = []
    outcomes: list[ProposalOutcome] = []
    reset: bool = False  # a full state: the replica starts over from these changes
    to: str = ""  # a reset meant for one reader only (others ignore it)


class AllocationProposal(Message, tag="allocate", frozen=True, gc=False):
    id: str
    view_seq: int
    placements: list[Placement]
    # Guaranteed asks that fit once these opportunistic containers are gone (killed at once, the room
    # reserved for the ask): see core.opportunistic.
    evictions: list[Victimized] = []
    reservations: list[NodeReserve] = []  # node reservations (core.node_reservation)


class PreemptionProposal(Message, tag="preempt", frozen=True, gc=False):
    id: str
    view_seq: int
    policy: str
    placements: list[Victimized] = []
    victims: list[str] = []  # proportional: victims with no beneficiary
    dereserve: list[str] = []  # nodes whose node reservation the policy cancels before preempting
    observe_only: bool = False


class Tick(Message, tag="tick", frozen=True, gc=False):
    now: float


class PlacementRequest(Message, tag="placement_request", frozen=True, gc=False):
    """A policy asks the allocator to place starving asks in preemption mode."""

    id: str
    policy: str
    view_seq: int
    budget: dict[str, int]  # total resources the round may preempt
    quotas: dict[str, dict[str, int]]  # queue path -> how much it may lose
    beneficiaries: list[str]  # queue paths below their ideal
    targets: dict[str, dict[str, int]] = {}  # beneficiary path -> its ideal (placements stop there)
    mask: list[str] = []  # "app/ask" keys to skip
    min_missed: int = 1
    victim_cost: str = "running_time"
    max_candidate_nodes: int | None = None  # opt-in cap on the nodes costed per placement
    intra_queue: bool = False
    # Seconds from a victim's notice to its kill: victims are costed as they will be when killed, so a
    # running-time cost is the work the kill throws away, each victim's grace included.
    grace: float = 0.0
    required_node: bool = False  # required-node asks preempt on their node by its own rule (any queue)


class PlacementReply(Message, tag="placement_reply", frozen=True, gc=False):
    id: str
    placements: list[Victimized] = []
    unplaceable: list[str] = []  # "app/ask" keys no victim set can help
    mask_hits: int = 0  # candidates skipped because they were masked
    view_seq: int = 0
    budget_refusals: int = 0  # containers passed over because their app's disruption budget was used up
    # When the first candidate passed over as younger than its queue's ``preemption.min.runtime`` comes of
    # age (feed time; None: none was): the unplaceable asks are worth trying again then.
    wake_at: float | None = None


class ResyncRequest(Message, tag="resync", frozen=True, gc=False):
    """A replica that saw a gap in view sequence numbers asks for a full state."""

    reader: str
    after_seq: int


ViewStream = ViewDelta | PlacementRequest | PlacementReply
ProposalStream = AllocationProposal | PreemptionProposal | ResyncRequest
