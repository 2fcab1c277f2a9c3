"""Feed events: what resource managers publish (architecture: The feed), one tagged union.

Every event names its partition and may carry an ``id`` for at-least-once de-duplication; ``t`` is
seconds since the trace start (trace files) or the producer's clock (Kafka), finite and at most
:data:`MAX_T`. Every field is bounded in the schema, so that what the wire carries is refused at
decoding (with its field path) rather than grown without bound or failing later: resource amounts are
integers from 0 to :data:`MAX_AMOUNT`, priorities 32-bit, names and ids at most :data:`MAX_NAME`
characters, label text, tags and resource names at most :data:`MAX_LABEL_CHARS`. A resource amount is
written as an integer in Sniper's units (memory MiB, vcore milli-cores) or as a Kubernetes quantity
string (``"4Gi"``, ``"500m"``, ``"2"``), read by the one parser of :mod:`sniper.messages.quantity`; a
decoded event holds integers only, and an amount that is neither is refused naming its field and
resource. New fields must come with defaults
(msgspec schema evolution).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec

from sniper.messages.quantity import QuantityError, parse_quantity

MAX_T = 1e11  # seconds: about the year 5100 in epoch seconds; a later ``t`` (or infinity) is a corrupt clock
MAX_NAME = 512  # characters of a name, an id, a user or a group
MAX_LABEL_CHARS = 256  # characters of a label's key or value, a tag, a resource name (Kubernetes: 253 and 63)
MAX_LABELS = 64  # labels of a node, keys of a node selector
MAX_SELECTOR_VALUES = 1024  # accepted values of one node selector key
MAX_GROUPS = 256  # groups of one user
MAX_RESOURCES = 64  # resource names in one resource map
MAX_TAGS = 64  # allocation tags of an ask, tags a constraint names, constraints of an ask
ResourceName = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_LABEL_CHARS)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME)]
EventId = Annotated[str, msgspec.Meta(max_length=MAX_NAME)]  # "" for none
UserName = Annotated[str, msgspec.Meta(max_length=MAX_NAME)]  # a user or group name ("" for none)
# Kubernetes' PriorityClass value and YARN's priority are 32-bit signed integers.
Priority = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
LabelText = Annotated[str, msgspec.Meta(max_length=MAX_LABEL_CHARS)]
MAX_AMOUNT = 2**53  # one resource amount in Sniper's units
_AMOUNT_SCHEMA = {
    "anyOf": [
        {"type": "integer", "minimum": 0, "maximum": MAX_AMOUNT, "description": "in Sniper's units"},
        {"type": "string", "maxLength": 64, "description": "a Kubernetes quantity: 4Gi, 500m, 2"},
    ]
}
if TYPE_CHECKING:
    ResourceMap = dict[str, int]  # what a decoded event holds
else:  # what the wire may carry: checked and converted by :func:`_amounts`, which names the key it refuses
    ResourceMap = Annotated[
        dict[ResourceName, Annotated[Any, msgspec.Meta(extra_json_schema=_AMOUNT_SCHEMA)]],
        msgspec.Meta(max_length=MAX_RESOURCES),
    ]


def _amounts(field: str, raw: Mapping[str, object]) -> dict[str, int] | None:
    """The resource ``raw`` in Sniper's integer units, or ``None`` when it holds them already (the common
    case: nothing to convert). A string is a Kubernetes quantity (:func:`parse_quantity`: ``"4Gi"``,
    ``"500m"``, bare memory in bytes and vcore in cores); anything else but an integer of 0 to
    :data:`MAX_AMOUNT` is refused with a ``ValueError`` naming ``field`` and the resource."""
    if all(type(v) is int and 0 <= v <= MAX_AMOUNT for v in raw.values()):
        return None
    out: dict[str, int] = {}
    for name, value in raw.items():
        if isinstance(value, str):
            try:
                amount = parse_quantity(name, value)
            except QuantityError as err:
                raise ValueError(f"{field}: {err}") from None
        elif type(value) is int:
            amount = value
        else:
            raise ValueError(
                f"{field}: {name}: {value!r} is not an amount: write an integer in Sniper's units "
                'or a quantity string ("4Gi", "500m", "2")'
            )
        if not 0 <= amount <= MAX_AMOUNT:
            raise ValueError(f"{field}: {name}: {value!r} is outside 0 to 2**53 in Sniper's units")
        out[name] = amount
    return out


def _in_sniper_units(event: msgspec.Struct, *fields: str) -> None:
    """Convert each resource field of ``event`` named in ``fields`` in place (:func:`_amounts`)."""
    for field in fields:
        raw = getattr(event, field)
        if raw is not None:
            amounts = _amounts(field, raw)
            if amounts is not None:
                msgspec.structs.force_setattr(event, field, amounts)


class FeedEvent(msgspec.Struct, tag_field="type", kw_only=True, frozen=True, gc=False):
    t: Annotated[float, msgspec.Meta(ge=0, le=MAX_T)] = 0.0  # finite: NaN and infinity are refused
    partition: Name = "default"
    id: EventId = ""


class PartitionConfigEvent(FeedEvent, tag="partition_config", frozen=True, gc=False):
    config: dict[str, Any]


class NodeAdded(FeedEvent, tag="node_added", frozen=True, gc=False):
    node: Name
    capacity: ResourceMap
    labels: dict[str, str] = {}
    schedulable: bool = True

    def __post_init__(self) -> None:
        _in_sniper_units(self, "capacity")


class NodeUpdated(FeedEvent, tag="node_updated", frozen=True, gc=False):
    node: Name
    capacity: ResourceMap | None = None
    schedulable: bool | None = None

    def __post_init__(self) -> None:
        _in_sniper_units(self, "capacity")


class NodeRemoved(FeedEvent, tag="node_removed", frozen=True, gc=False):
    node: Name


class AppAdded(FeedEvent, tag="app_added", frozen=True, gc=False):
    app: Name
    queue: Name
    user: UserName = ""
    priority: Priority = 0
    # the user's groups, for group limits (YuniKorn's UserGroup)
    groups: Annotated[list[UserName], msgspec.Meta(max_length=MAX_GROUPS)] = []
    # YARN-45: the application master honours preemption contracts; the policies send it a
    # ``preempt_request`` and kill only what is still missing at the deadline (docs/feed.md).
    preemption_contract: bool = False
    # A disruption budget (Kubernetes' PodDisruptionBudget ``maxUnavailable``): at most this many of the
    # app's containers preempting at once (None: no budget).
    max_disruption: Annotated[int, msgspec.Meta(ge=0, le=10**7)] | None = None
    # YuniKorn's ``allow-preemption``: false makes the app's containers victims of last resort only.
    allow_preemption: bool = True
    # The accepted SLO reservation (``reservation_submitted``) the app runs against, in its reservable
    # ``queue`` (None: ordinary work of the queue).
    reservation: Name | None = None
    # The app checkpoints its containers' work every this many seconds from each one's start: a kill
    # loses only the work since the last checkpoint (``victim_cost: lost_work``; None: never).
    checkpoint_interval: Annotated[float, msgspec.Meta(gt=0, le=MAX_T)] | None = None


class AppRemoved(FeedEvent, tag="app_removed", frozen=True, gc=False):
    app: Name


Tag = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_LABEL_CHARS)]


class PlacementConstraint(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    """One of YARN's placement constraints (YARN-6592: ``targetIn``, ``targetNotIn``, ``cardinality``):
    how many containers carrying each of ``tags`` the scope around a candidate node may hold: ``in`` and
    ``not_in`` count the others already there, ``cardinality`` the scope once the container is placed
    (``sniper.core.constraints``; the rule and its validation are there, docs/feed.md gives examples)."""

    scope: Name = "node"  # "node", or a node label key ("rack"): the nodes sharing its value
    op: Literal["in", "not_in", "cardinality"] = "in"
    tags: Annotated[list[Tag], msgspec.Meta(max_length=MAX_TAGS)] = []
    min: Annotated[int, msgspec.Meta(ge=0, le=10**7)] = 0  # cardinality only
    max: Annotated[int, msgspec.Meta(ge=0, le=10**7)] | None = None  # cardinality only (None: no bound)
    namespace: Literal["all", "self"] = "all"  # "self": only the ask's own app's containers count


TopologyMode = Literal["required", "preferred"]


class AskTopology(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    """Where an ask's containers go together (Kueue's topology-aware scheduling): ``required``, all in
    one domain of ``level`` (a label the partition's ``topology.levels`` names) or none placed;
    ``preferred``, the smallest domain from ``level`` inward that holds them all, else the fewest domains
    of ``level`` (``sniper.core.topology``)."""

    level: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_LABEL_CHARS)]
    mode: TopologyMode = "required"


class AskAdded(FeedEvent, tag="ask_added", frozen=True, gc=False):
    app: Name
    ask: Name
    resource: ResourceMap
    count: Annotated[int, msgspec.Meta(ge=0, le=10**7)] = 1
    priority: Priority = 0
    am: bool = False
    duration: Annotated[float, msgspec.Meta(ge=0)] | None = None
    retry: bool = True
    node: Name | None = None  # a required node, if any
    # Node label key -> accepted values: the ask runs only on nodes whose labels match every key.
    node_selector: Annotated[
        dict[LabelText, Annotated[list[LabelText], msgspec.Meta(max_length=MAX_SELECTOR_VALUES)]],
        msgspec.Meta(max_length=MAX_LABELS),
    ] = {}
    # All or nothing: the first ``gang_min`` containers are placed together or not at all (0: no gang).
    gang_min: Annotated[int, msgspec.Meta(ge=0, le=10**7)] = 0
    # YARN's ExecutionType: "opportunistic" containers run only on room no guaranteed ask can use now,
    # count against no queue's guarantee, ideal or max, and are killed first (docs/feed.md).
    execution_type: Literal["guaranteed", "opportunistic"] = "guaranteed"
    # Kubernetes' ``preemptionPolicy``: "never" waits for free room and never preempts anything.
    preemption_policy: Literal["preempt_lower_priority", "never"] = "preempt_lower_priority"
    # What each container really uses (simulation reports node utilization from it; over-commit counts
    # it as what a killed container frees). ``None``: all it asks for.
    usage: ResourceMap | None = None
    # Allocation tags every container of the ask carries, and the placement constraints each container
    # must satisfy where it is placed (core.constraints, docs/feed.md).
    # Tuples: an empty default costs no object per event (a list default is copied for each one).
    tags: Annotated[tuple[Tag, ...], msgspec.Meta(max_length=MAX_TAGS)] = ()
    constraints: Annotated[tuple[PlacementConstraint, ...], msgspec.Meta(max_length=MAX_TAGS)] = ()
    # The topology domain its containers share (None: anywhere).
    topology: AskTopology | None = None

    def __post_init__(self) -> None:
        _in_sniper_units(self, "resource", "usage")


class AskRemoved(FeedEvent, tag="ask_removed", frozen=True, gc=False):
    app: Name
    ask: Name


class AllocationReleased(FeedEvent, tag="allocation_released", frozen=True, gc=False):
    allocation: Name


class AllocationPromoted(FeedEvent, tag="allocation_promoted", frozen=True, gc=False):
    """Turn a running opportunistic allocation into a guaranteed one (YARN's container update
    ``PROMOTE_EXECUTION_TYPE``); committed when its queue's ``max`` allows, else ``rejected``."""

    allocation: Name


class AllocationCheckpointed(FeedEvent, tag="allocation_checkpointed", frozen=True, gc=False):
    """The allocation's app wrote a checkpoint of its work at ``t``: a kill from then on loses only the
    work since. An allocation not running, or a ``t`` before its start or its last checkpoint, changes
    nothing (a checkpoint crossing the container's release is no error)."""

    allocation: Name


class NodeUtilization(FeedEvent, tag="node_utilization", frozen=True, gc=False):
    """What the containers on a node really use (YARN-1011's node utilization), for over-commit. The
    amounts are checked by the cache (finite, not negative, resources the node has) and refused with
    the reason, never dropped."""

    node: Name
    used: Annotated[dict[ResourceName, float], msgspec.Meta(max_length=MAX_RESOURCES)]


class PartitionRemoved(FeedEvent, tag="partition_removed", frozen=True, gc=False):
    """Retire the partition: its apps, asks and allocations are released, its nodes and configuration
    dropped; it starts again at its next ``partition_config`` (docs/feed.md)."""

    reason: Annotated[str, msgspec.Meta(max_length=1000)] = ""  # it travels on into the decision


class ReservationStage(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    """One stage of an SLO reservation (YARN's ReservationRequest): ``count`` containers of
    ``resource``, each running ``duration`` seconds, in gangs of ``gang_min`` that run together."""

    resource: ResourceMap
    count: Annotated[int, msgspec.Meta(ge=1, le=10**7)] = 1
    gang_min: Annotated[int, msgspec.Meta(ge=0, le=10**7)] = 0
    duration: Annotated[float, msgspec.Meta(gt=0, le=MAX_T)]

    def __post_init__(self) -> None:
        _in_sniper_units(self, "resource")


class ReservationSubmitted(FeedEvent, tag="reservation_submitted", frozen=True, gc=False):
    """An SLO reservation (YARN's ReservationSystem, not a node or preemption reservation): resources in
    the reservable ``queue`` between ``arrival`` and ``deadline``, stage after stage, every ``recurrence``
    seconds when set. Answered at once with ``reservation_accepted`` (the planned intervals) or
    ``reservation_rejected`` (the reason)."""

    reservation: Name
    queue: Name
    arrival: Annotated[float, msgspec.Meta(ge=0, le=MAX_T)]
    deadline: Annotated[float, msgspec.Meta(ge=0, le=MAX_T)]
    stages: Annotated[list[ReservationStage], msgspec.Meta(min_length=1, max_length=100)]
    recurrence: Annotated[float, msgspec.Meta(gt=0, le=MAX_T)] | None = None


class Sync(FeedEvent, tag="sync", frozen=True, gc=False):
    """A resource manager's barrier: answered with a ``synced`` decision naming this event's ``id`` once
    the partition handled every event published before it; it changes nothing else."""


Feed = (
    PartitionConfigEvent
    | PartitionRemoved
    | NodeAdded
    | NodeUpdated
    | NodeRemoved
    | NodeUtilization
    | AppAdded
    | AppRemoved
    | AskAdded
    | AskRemoved
    | AllocationReleased
    | AllocationPromoted
    | AllocationCheckpointed
    | ReservationSubmitted
    | Sync
)
