"""The committed preemption: one record that ties victims, a beneficiary ask, a node and a reservation
together, committed in one order wherever a victim is taken for an ask (the sniper and intra-queue commit,
:mod:`sniper.core.preemption.commit`; an opportunistic eviction, :mod:`sniper.core.opportunistic`): each victim
noticed, the reservation set (it marks them leaving and holds the ask's room on the node until they are gone,
or ``reservation_timeout`` after their deadline), the opportunistic victims killed at once, the reservation
fulfilled if its room is free already. Replay (:mod:`sniper.core.recovery`) sets a logged reservation with
the same change (:func:`reservation_set`). Sans-IO: everything goes through the cache's :class:`Writer`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sniper.core.config import PreemptionConfig
from sniper.core.resources import Resource
from sniper.core.state import Allocation, Ask, PartitionState
from sniper.core.writer import Writer
from sniper.messages import decisions as d
from sniper.messages import protocol as p


def preempt(
    cache: Writer,
    ask: Ask,
    node: str,
    victims: list[Allocation],
    *,
    deadline: float,
    policy: str,
    notice: Callable[[Allocation, str], dict[str, Any] | None],
    observe_only: bool = False,
) -> bool:
    """Commit ``victims`` on ``node`` for ``ask``: each gets its ``preempt`` naming the beneficiary, the
    ``deadline``, ``policy`` and the reservation (``""`` when ``observe_only``), with the fields
    ``notice(victim, reservation)`` adds (its reason, ...; ``None``: the victim waits on its app's
    preemption request instead, which ``notice`` joined it to); then, unless ``observe_only``, the
    reservation, the opportunistic victims killed (:func:`evict`) and the reservation fulfilled when its
    room is free. Returns whether it was given that chance: not when a victim waits on a request (the
    caller fulfils it once the request is open) nor when only observing."""
    rid = f"resv-{cache.next_id('reservation')}"
    reservation = "" if observe_only else rid
    waits = False
    for v in victims:
        fields = notice(v, reservation)
        if fields is None:
            waits = True
            continue
        cache.notice(
            v,
            for_ask=ask.name,
            for_app=ask.app.name,
            for_queue=ask.app.queue.path,
            for_resource=ask.resource,
            deadline=deadline,
            reservation=reservation,
            policy=policy,
            observe_only=observe_only,
            **fields,
        )
    if observe_only:
        return False
    victim_ids = [v.id for v in victims]
    cache.commit(reservation_set(cache.state, rid, ask, node, ask.resource, victim_ids, deadline, policy))
    evict(cache, victims)
    if waits:
        return False
    cache.fulfil_reservations(node)
    return True


def reservation_set(
    state: PartitionState,
    reservation: str,
    ask: Ask,
    node: str,
    resource: Resource,
    victims: list[str],
    deadline: float,
    policy: str,
) -> p.ReservationSet:
    """The change that holds ``resource`` on ``node`` for ``ask`` until ``victims`` are gone (their
    ``deadline``), expiring the partition's ``reservation_timeout`` after it (the default one before the
    partition has a configuration)."""
    config = state.config
    timeout = (PreemptionConfig() if config is None else config.preemption).reservation_timeout
    return p.ReservationSet(
        reservation=reservation,
        app=ask.app.name,
        ask=ask.name,
        node=node,
        resource=resource,
        victims=victims,
        deadline=deadline,
        expires=deadline + timeout,
        policy=policy,
    )


def evict(cache: Writer, victims: Sequence[Allocation]) -> None:
    """Kill the opportunistic ones among ``victims`` (already marked leaving by the caller's commit) at
    once: no grace, a ``kill`` with reason ``opportunistic`` each."""
    doomed = [v for v in victims if v.opportunistic and not v.killed]
    cache.kill(doomed, "opportunistic", d.KILL_OPPORTUNISTIC)
