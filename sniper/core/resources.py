"""Resource vectors: named non-negative integers (memory MiB, vcore milli-cores, gpu-milli milli-GPUs, gpu, ...).

A resource is a plain ``dict[str, int]``; a missing name means zero. All arithmetic is integer.
Functions here never mutate their arguments unless their name ends in ``_into``. Configs write
quantities the YuniKorn way, read by :func:`parse_quantity` (:mod:`sniper.messages.quantity`, the one
parser, which feed events' resources use too) through :func:`parse_resource`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from sniper.messages.quantity import GPU_MILLI as GPU_MILLI
from sniper.messages.quantity import MAX_QUANTITY as MAX_QUANTITY
from sniper.messages.quantity import MEMORY as MEMORY
from sniper.messages.quantity import VCORE as VCORE
from sniper.messages.quantity import QuantityError as QuantityError
from sniper.messages.quantity import parse_kubernetes_quantity as parse_kubernetes_quantity
from sniper.messages.quantity import parse_quantity as parse_quantity

Resource = dict[str, int]
ResourceLike = Mapping[str, int]


def parse_resource(raw: Mapping[str, object], where: str = "resource", *, keep_zero: bool = False) -> Resource:
    """Parse a mapping of resource names to quantities; zero entries are dropped unless ``keep_zero``."""
    out: Resource = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not name:
            raise QuantityError(f"{where}: resource names must be non-empty strings, got {name!r}")
        try:
            amount = parse_quantity(name, value)
        except QuantityError as err:
            raise QuantityError(f"{where}: {err}") from None
        if amount or keep_zero:
            out[name] = amount
    return out


def as_quantities(resource: ResourceLike) -> dict[str, int | str]:
    """``resource`` written as YuniKorn quantities that :func:`parse_resource` reads back exactly: memory
    in the largest binary unit that holds it whole (``"64Gi"``), vcore in whole cores (``16``) or else
    milli-cores (``"500m"``), other resources as bare counts."""
    out: dict[str, int | str] = {}
    for name, amount in resource.items():
        if name == MEMORY:
            size, suffix = _largest_unit(amount, ((2**20, "Ti"), (2**10, "Gi"), (1, "Mi")))
            out[name] = f"{amount // size}{suffix}"
        elif name == VCORE:
            out[name] = amount // 1000 if amount % 1000 == 0 else f"{amount}m"
        else:
            out[name] = amount
    return out


def _largest_unit(amount: int, units: tuple[tuple[int, str], ...]) -> tuple[int, str]:
    """The first ``(size, unit)`` of ``units`` (largest first, the last of size 1) that divides ``amount``."""
    return next((size, unit) for size, unit in units if amount % size == 0)


def add(a: ResourceLike, b: ResourceLike) -> Resource:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def sub(a: ResourceLike, b: ResourceLike) -> Resource:
    """``a - b`` component-wise; may go negative (callers clamp where they mean to)."""
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) - v
    return out


def add_into(acc: Resource, b: ResourceLike, times: int = 1) -> None:
    get = acc.get
    if times == 1:
        for k, v in b.items():
            acc[k] = get(k, 0) + v
    else:
        for k, v in b.items():
            acc[k] = get(k, 0) + v * times


def sub_into(acc: Resource, b: ResourceLike, times: int = 1) -> None:
    get = acc.get
    if times == 1:
        for k, v in b.items():
            acc[k] = get(k, 0) - v
    else:
        for k, v in b.items():
            acc[k] = get(k, 0) - v * times


def scale(a: ResourceLike, times: int) -> Resource:
    return {k: v * times for k, v in a.items()}


def fits(request: ResourceLike, available: ResourceLike) -> bool:
    """True when every component of ``request`` is at most the same component of ``available``."""
    for k, v in request.items():
        if v > available.get(k, 0):
            return False
    return True


def clamp_min_zero(a: ResourceLike) -> Resource:
    return {k: v for k, v in a.items() if v > 0}


def _union(a: ResourceLike, b: ResourceLike) -> list[str]:
    """The names of ``a`` then those only ``b`` has: an order that never depends on the string-hash seed."""
    return [*a, *(k for k in b if k not in a)]


def component_min(a: ResourceLike, b: ResourceLike) -> Resource:
    return {k: min(a.get(k, 0), b.get(k, 0)) for k in _union(a, b)}


def component_max(a: ResourceLike, b: ResourceLike) -> Resource:
    return {k: max(a.get(k, 0), b.get(k, 0)) for k in _union(a, b)}


def any_positive(a: ResourceLike) -> bool:
    return any(v > 0 for v in a.values())


def total(resources: Iterable[ResourceLike]) -> Resource:
    acc: Resource = {}
    for r in resources:
        add_into(acc, r)
    return acc


def dominant_share(usage: ResourceLike, against: ResourceLike) -> float:
    """DRF share: the largest ``usage[r] / against[r]``.

    A positive usage of a resource that ``against`` does not have counts as infinite share;
    zero usage counts as nothing.
    """
    share = 0.0
    for k, v in usage.items():
        if v <= 0:
            continue
        base = against.get(k, 0)
        if base <= 0:
            return math.inf
        ratio = v / base
        if ratio > share:
            share = ratio
    return share


def share_vector(a: ResourceLike, capacity: ResourceLike) -> tuple[float, ...]:
    """``a``'s shares of ``capacity``, largest first, one per resource the capacity has.

    Resources the capacity lacks (or has zero of) are left out: no node can hold them, so they say
    nothing about a queue's standing. Comparing two such vectors lexicographically is the DRF order.
    """
    get = a.get
    shares = [get(k, 0) / c for k, c in capacity.items() if c > 0]
    shares.sort(reverse=True)
    return tuple(shares)


def drf_compare(a: ResourceLike, b: ResourceLike, capacity: ResourceLike) -> int:
    """The one DRF comparison (YARN's DominantResourceCalculator): -1, 0 or 1 as ``a`` is below, level
    with or above ``b``. ``a`` is above ``b`` when its dominant share of ``capacity`` is larger; a tie
    is broken by the next largest share, and so on. Used for every above/below question: a queue
    against its guarantee, its ideal or its max, in quotas, the cache's checks, the allocator's order,
    the checker and the metrics.
    """
    va, vb = share_vector(a, capacity), share_vector(b, capacity)
    return (va > vb) - (va < vb)


def drf_above(a: ResourceLike, b: ResourceLike, capacity: ResourceLike) -> bool:
    return drf_compare(a, b, capacity) > 0


def drf_below(a: ResourceLike, b: ResourceLike, capacity: ResourceLike) -> bool:
    return drf_compare(a, b, capacity) < 0


def normalized(a: ResourceLike) -> Resource:
    """Drop zero entries so equal resources compare equal."""
    return {k: v for k, v in a.items() if v}


def shared(a: Resource) -> Resource:
    """``a`` normalized, ``a`` itself when it has no zero entry: a resource an event, a change, an ask, an
    allocation or container bounds hold is never written, so they may all hold the same one."""
    return a if 0 not in a.values() else normalized(a)
