"""Resource vectors: named non-negative integers (memory MiB, vcore milli-cores, gpu, ...).

A resource is a plain ``dict[str, int]``; a missing name means zero. All arithmetic is integer.
Functions here never mutate their arguments unless their name ends in ``_into``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

Resource = dict[str, int]
ResourceLike = Mapping[str, int]

MEMORY = "memory"
VCORE = "vcore"

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P|m)?\s*$")


class QuantityError(ValueError):
    """A resource quantity that cannot be parsed."""


def parse_quantity(name: str, value: object) -> int:
    """Parse one resource value into Sniper's integer unit for that resource.

    Integers are taken as they are (memory in MiB, vcore in milli-cores). Strings follow
    Kubernetes / YuniKorn quantities: ``"64Gi"`` for memory is 65536 MiB, ``"2"`` vcores is 2000
    milli-cores, ``"500m"`` vcores is 500 milli-cores. Other resource names count plain units.
    """
    if isinstance(value, bool):
        raise QuantityError(f"{name}: boolean is not a quantity")
    if isinstance(value, int):
        if value < 0:
            raise QuantityError(f"{name}: negative quantity {value}")
        return value
    if isinstance(value, float):
        if value < 0 or not math.isfinite(value) or value != int(value):
            raise QuantityError(f"{name}: {value} is not a non-negative integer")
        return int(value)
    if not isinstance(value, str):
        raise QuantityError(f"{name}: {value!r} is not a quantity")
    match = _QUANTITY.match(value)
    if match is None:
        raise QuantityError(f"{name}: cannot parse quantity {value!r}")
    number, suffix = float(match.group(1)), match.group(2)
    if name == MEMORY:
        if suffix in _BINARY:
            amount = number * _BINARY[suffix] / 2**20
        elif suffix in _DECIMAL:
            amount = number * _DECIMAL[suffix] / 2**20
        elif suffix == "m":
            raise QuantityError(f"{name}: milli-units make no sense for memory ({value!r})")
        else:
            amount = number  # a bare number is MiB, like the integer form
    elif name == VCORE:
        if suffix == "m":
            amount = number
        elif suffix in _DECIMAL:
            amount = number * _DECIMAL[suffix] * 1000
        elif suffix in _BINARY:
            raise QuantityError(f"{name}: binary suffix on a CPU quantity ({value!r})")
        else:
            amount = number * 1000  # "2" cores = 2000 milli-cores
    else:
        if suffix == "m":
            raise QuantityError(f"{name}: milli-units need a resource measured in milli-units ({value!r})")
        scale = _BINARY.get(suffix or "", _DECIMAL.get(suffix or "", 1))
        amount = number * scale
    result = math.ceil(amount - 1e-9)
    return int(result)


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


def component_min(a: ResourceLike, b: ResourceLike) -> Resource:
    keys = set(a) | set(b)
    return {k: min(a.get(k, 0), b.get(k, 0)) for k in keys}


def component_max(a: ResourceLike, b: ResourceLike) -> Resource:
    keys = set(a) | set(b)
    return {k: max(a.get(k, 0), b.get(k, 0)) for k in keys}


def is_zero(a: ResourceLike) -> bool:
    return not any(v for v in a.values())


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
    return tuple(sorted((a.get(k, 0) / c for k, c in capacity.items() if c > 0), reverse=True))


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


def fmt(a: ResourceLike) -> str:
    """Human-readable form, stable order: ``memory=4096,vcore=1000``."""
    return ",".join(f"{k}={a[k]}" for k in sorted(a) if a[k]) or "0"
