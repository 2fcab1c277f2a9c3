"""Resource vectors: named non-negative integers (memory MiB, vcore milli-cores, gpu-milli milli-GPUs, gpu, ...).

A resource is a plain ``dict[str, int]``; a missing name means zero. All arithmetic is integer.
Functions here never mutate their arguments unless their name ends in ``_into``. Configs write
quantities the YuniKorn way (``parse_quantity``); only this module turns them into these units.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

Resource = dict[str, int]
ResourceLike = Mapping[str, int]

MEMORY = "memory"
VCORE = "vcore"
GPU_MILLI = "gpu-milli"  # GPUs shared in thousandths (a pod on 0.46 of a GPU asks 460); ``gpu`` stays a count

MiB = 2**20
# Kubernetes quantity suffixes, as YuniKorn 1.4+ reads them (``K`` is accepted beside ``k``).
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_SUB_MILLI = {"u": 10**6, "n": 10**9}  # micro and nano: Kubernetes objects only
# A number, then a binary or decimal suffix, an exponent (Kubernetes objects only) or a sub-unit suffix.
_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|k|K|M|G|T|P|E|m|u|n)?\s*$")
_MAX_EXPONENT = 30  # a decimal exponent beyond this is no quantity a cluster holds
MAX_QUANTITY = 2**62  # in Sniper's units; anything larger is a typo, and overflows the wire's int64
_MAX_TEXT = 64  # characters: longer text is no quantity, and never reaches big-number arithmetic


class QuantityError(ValueError):
    """A resource quantity that cannot be parsed."""


def parse_quantity(name: str, value: object) -> int:
    """One YuniKorn quantity (``queues.yaml``, ``partition_config``) in Sniper's unit for ``name``.

    As YuniKorn 1.4+ reads it: memory is bytes when bare (``Ki``..``Ei`` binary and ``k``..``E``
    decimal suffixes), stored as MiB rounded up; vcore is cores when bare, ``m`` for milli-cores,
    stored as milli-cores; any other resource (``gpu-milli`` too: a count of milli-GPUs) is a bare
    count (suffixes scale it). An integer means what the same digits in a string mean. Results above
    :data:`MAX_QUANTITY` are refused.
    """
    numerator, denominator, written = _exact(name, value, kubernetes=False)
    return _in_unit(name, numerator, denominator, written, round_up=True)


def parse_kubernetes_quantity(name: str, value: object, *, round_up: bool) -> int:
    """A quantity as the Kubernetes API server serves it (``resource.Quantity``) in Sniper's unit for
    ``name`` (a Sniper resource name: ``vcore`` for Kubernetes' ``cpu``): the grammar of
    :func:`parse_quantity` plus decimal exponents (``1e3``, ``5E-1``) and the sub-unit suffixes ``m``,
    ``u`` and ``n`` on any resource (the API server writes ``1.2Gi`` of memory as ``1288490188800m``).
    ``round_up`` rounds what Sniper's unit cannot hold exactly up, else down."""
    numerator, denominator, written = _exact(name, value, kubernetes=True)
    return _in_unit(name, numerator, denominator, written, round_up=round_up)


def _exact(name: str, value: object, *, kubernetes: bool) -> tuple[int, int, object]:
    """``value`` as an exact fraction ``(numerator, denominator)`` of its written unit (bytes, cores, a
    count), and what was written, for errors. YuniKorn's configs (``kubernetes`` false) take no exponent
    and the milli suffix on vcore only."""
    if isinstance(value, bool):
        raise QuantityError(f"{name}: boolean is not a quantity")
    if isinstance(value, int) and 0 <= value < 10**_MAX_TEXT:  # the common case, without text
        return value, 1, value
    if isinstance(value, int):
        if value < 0:
            raise QuantityError(f"{name}: negative quantity {value}")
        raise QuantityError(f"{name}: an integer of more than {_MAX_TEXT} digits is too large")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{name}: {value} is not a quantity")
        text = repr(value)
    elif isinstance(value, str):
        text = value
    else:
        raise QuantityError(f"{name}: {value!r} is not a quantity")
    if text.lstrip().startswith("-"):
        raise QuantityError(f"{name}: negative quantity {value!r}")
    if len(text) > _MAX_TEXT:
        raise QuantityError(f"{name}: quantity {_short(text)} is too large")
    match = _QUANTITY.match(text)
    suffix = (match.group(2) or "") if match is not None else ""
    exponent = suffix[1:] if suffix[:1] in ("e", "E") and len(suffix) > 1 and suffix not in _BINARY else None
    if match is None or (not kubernetes and (exponent is not None or suffix in _SUB_MILLI)):
        raise QuantityError(f"{name}: cannot parse quantity {value!r}")
    if suffix == "m" and name != VCORE and not kubernetes:
        hint = f"; {name} is a count of milli-GPUs already" if name == GPU_MILLI else ""
        raise QuantityError(f"{name}: the milli suffix 'm' is for vcore only ({value!r}{hint})")
    whole, _, decimals = match.group(1).partition(".")
    numerator, denominator = int(whole + decimals), 10 ** len(decimals)
    if exponent is not None:
        power = int(exponent)
        if abs(power) > _MAX_EXPONENT:
            raise QuantityError(f"{name}: quantity {_short(text)} is out of range (exponent beyond {_MAX_EXPONENT})")
        if power >= 0:
            numerator *= 10**power
        else:
            denominator *= 10**-power
    elif suffix in _SUB_MILLI or suffix == "m":
        denominator *= _SUB_MILLI.get(suffix, 1000)
    else:
        numerator *= _BINARY.get(suffix) or _DECIMAL.get(suffix) or 1
    return numerator, denominator, text


def _in_unit(name: str, numerator: int, denominator: int, written: object, *, round_up: bool) -> int:
    """``numerator / denominator`` of the written unit (bytes, cores, a count) in Sniper's unit, rounded
    up or down."""
    if name == MEMORY:
        denominator *= MiB  # bytes to MiB
    elif name == VCORE:
        numerator *= 1000  # cores to milli-cores
    result = -(-numerator // denominator) if round_up else numerator // denominator
    if result > MAX_QUANTITY:
        raise QuantityError(f"{name}: quantity {_short(str(written))} is too large (more than 2**62 in Sniper's unit)")
    return result


def _short(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(f"{text[:20]}...{text[-12:]}")


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


def fmt(a: ResourceLike) -> str:
    """Human-readable form, stable order: ``memory=4096,vcore=1000``."""
    return ",".join(f"{k}={a[k]}" for k in sorted(a) if a[k]) or "0"
