"""The narrow face of the cache that the modules changing a partition's state are given, defined below
the cache (:class:`sniper.core.cache.Cache` implements it) so that node reservations, opportunistic containers,
the preemption commit and preemption contracts never import the cache: the state to read, ``commit``
(the one mutation path: a change applied, then published in a view delta), ``decide`` (a decision
published), preemption notices, a proposal's outcome, fresh ids, the reservation hooks and allocation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from sniper.core.resources import Resource
from sniper.core.state import Allocation, Node, PartitionState, Reservation
from sniper.messages import decisions as d
from sniper.messages import protocol as p

if TYPE_CHECKING:
    from sniper.core.gang import Held


class Writer(Protocol):
    state: PartitionState

    def commit(self, change: p.ChangeMsg) -> None: ...

    def decide(self, decision_type: type[d.DecisionMsg], **fields: Any) -> None: ...

    def notice(self, victim: Allocation, **fields: Any) -> None: ...

    def kill(
        self, victims: list[Allocation], cause: d.KillCause, reason: str | None = None, missing: Resource | None = None
    ) -> None: ...

    def cancel_notices(self, victims: list[Allocation], reason: str, reservation: str | None = None) -> None: ...

    def outcome(self, proposal: str, accepted: int, rejected: dict[str, str]) -> None: ...

    def next_id(self, kind: str) -> int: ...

    def fulfil_reservations(self, node_name: str) -> None: ...

    def keep_reservations(self, node: Node, cap: Resource, schedulable: bool, reason: str | None = None) -> None: ...

    def fulfillable(self, r: Reservation) -> bool: ...

    def check_placement(
        self,
        app_name: str,
        ask_name: str,
        node_name: str,
        ask_seq: int = 0,
        limits: None = None,
        held: Held | None = None,
    ) -> str | None: ...

    def move_beneficiary(self, r: Reservation, node_name: str, reason: str) -> None: ...

    def allocate(
        self, app_name: str, ask_name: str, node_name: str, reservation: Reservation | None = None
    ) -> None: ...
