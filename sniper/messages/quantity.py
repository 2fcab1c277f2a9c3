"""Quantities as people write them (Kubernetes and YuniKorn: ``"4Gi"``, ``"500m"``, ``2``) and the
resource names whose unit Sniper fixes: the one parser of a written quantity into Sniper's integer units.

Sniper's units: ``memory`` in MiB, ``vcore`` in milli-cores, ``gpu-milli`` in milli-GPUs, anything else a
count. :func:`parse_quantity` reads a quantity the way YuniKorn 1.4+ does and rounds up into them; it is
used by the configuration (:mod:`sniper.core.config`) and by feed events' resources (:mod:`sniper.messages.feed`).
Pure functions, no I/O.
"""

from __future__ import annotations

import math
import re

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
        raise QuantityError(f"{name}: quantity {shortened(text)} is too large")
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
            raise QuantityError(f"{name}: quantity {shortened(text)} is out of range (exponent beyond {_MAX_EXPONENT})")
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
        raise QuantityError(
            f"{name}: quantity {shortened(str(written))} is too large (more than 2**62 in Sniper's unit)"
        )
    return result


def shortened(text: str) -> str:
    """``text`` as an error quotes it: whole when short, else its two ends (a 200 MB field stays a line)."""
    return repr(text) if len(text) <= 40 else repr(f"{text[:20]}...{text[-12:]}")
