"""Units of resources as people and machines read them: the one place a resource amount is formatted.

Sniper keeps resources as integers in its own units (:mod:`sniper.core.resources`: memory MiB, vcore
milli-cores, gpu-milli milli-GPUs, anything else a count). People read them in human units
(:func:`human`: ``320 GiB``, ``48 cores``, ``1.46 GPUs``, ``4 GPUs``); machines (JSON answers,
Prometheus metrics) read base units (:func:`in_base_units`: memory in bytes, vcore in cores,
gpu-milli in GPUs, other resources as counts); configs are written as YuniKorn quantities
(:func:`sniper.core.resources.as_quantities`). Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator

from sniper.core.resources import GPU_MILLI, MEMORY, VCORE, ResourceLike

# Sniper's integer unit of each resource, and the base unit (with its factor) machines read.
SNIPER_UNITS = {MEMORY: "MiB", VCORE: "millicores", GPU_MILLI: "milli-GPUs"}
BASE_UNITS: dict[str, tuple[str, float]] = {
    MEMORY: ("bytes", float(2**20)),
    VCORE: ("cores", 0.001),
    GPU_MILLI: ("GPUs", 0.001),
}
COUNT = "count"  # the unit of any other resource, in Sniper and in base units alike
_MEMORY_UNITS = ((2**40, "EiB"), (2**30, "PiB"), (2**20, "TiB"), (2**10, "GiB"), (1, "MiB"))  # sizes in MiB
_WHOLES = {VCORE: ("core", "cores"), GPU_MILLI: ("GPU", "GPUs")}  # thousandths, spoken of as the whole
_NAMES = {"gpu": ("GPU", "GPUs")}  # how a count of a well-known resource is spoken of
_BYTE_COUNTS = frozenset({"ephemeral-storage"})  # counts of bytes (Kubernetes), spoken of in binary units
_BINARY_BYTES = ((2**60, "EiB"), (2**50, "PiB"), (2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


def _number(value: float, decimals: int) -> str:
    """``value`` with at most ``decimals`` decimals, trailing zeros dropped (``1.5``, ``48``)."""
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def human(name: str, amount: int) -> str:
    """One amount in Sniper's unit for ``name``, as a person reads it: memory in the largest binary unit
    it reaches (two decimals at most: ``1.5 GiB``), vcore in cores (``0.25 cores``, ``1 core``),
    gpu-milli in GPUs (``1.46 GPUs``, ``1 GPU``), a count of GPUs as ``4 GPUs``, ``ephemeral-storage``
    (bytes) as ``ephemeral-storage 100 GiB``, any other resource as ``<name> 3`` (a misspelt name stays
    visible)."""
    if name == MEMORY:
        size, unit = next(((s, u) for s, u in _MEMORY_UNITS if abs(amount) >= s), (1, "MiB"))
        return f"{_number(amount / size, 2)} {unit}"
    whole = _WHOLES.get(name)
    if whole is not None:
        wholes = _number(amount / 1000, 3)
        return f"{wholes} {whole[0] if wholes == '1' else whole[1]}"
    if name in _BYTE_COUNTS:
        size, unit = next(((s, u) for s, u in _BINARY_BYTES if abs(amount) >= s), (1, "bytes"))
        return f"{name} {_number(amount / size, 2)} {unit}"
    spoken = _NAMES.get(name)
    if spoken is None:
        return f"{name} {amount}"
    return f"{amount} {spoken[0] if amount == 1 else spoken[1]}"


def named(name: str, amount: int) -> str:
    """One amount as :func:`human` says it, the resource named too where the unit does not say it
    (``memory 4 GiB``, ``vcore 0.5 cores``, ``gpu 4 GPUs``, ``pods 3``): what a message about one
    resource of several quotes."""
    text = human(name, amount)
    return text if text.startswith(f"{name} ") else f"{name} {text}"


def human_resource(resource: ResourceLike | None, *, empty: str = "none") -> str:
    """A resource for people: memory, vcore, then the others by name (``320 GiB, 80 cores, 4 GPUs``);
    zero entries are left out, and nothing at all reads ``empty``."""
    if resource is None:
        return "-"
    names = sorted((n for n, v in resource.items() if v), key=lambda n: (n != MEMORY, n != VCORE, n))
    return ", ".join(human(n, resource[n]) for n in names) or empty


def percent(share: float | None) -> str:
    """A share (0.732) as people read it: ``73.2%`` (one decimal at most); nothing reads ``-``."""
    return "-" if share is None else f"{_number(share * 100, 1)}%"


def base_unit(name: str) -> str:
    """The base unit machines read ``name`` in: ``bytes``, ``cores``, ``GPUs`` or ``count``."""
    unit = BASE_UNITS.get(name)
    return COUNT if unit is None else unit[0]


def in_base_units(name: str, amount: int) -> float:
    """One amount in Sniper's unit for ``name``, in its :func:`base_unit`."""
    unit = BASE_UNITS.get(name)
    return float(amount) if unit is None else amount * unit[1]


def from_base_units(name: str, value: float) -> int:
    """An amount in the :func:`base_unit` of ``name`` back in Sniper's unit (rounded to the nearest)."""
    unit = BASE_UNITS.get(name)
    return round(value if unit is None else value / unit[1])


def each_in_base_units(resource: ResourceLike) -> Iterator[tuple[str, str, float]]:
    """``(name, base unit, value)`` of each resource of ``resource``."""
    for name, amount in resource.items():
        yield name, base_unit(name), in_base_units(name, amount)


def in_base(resource: ResourceLike | None) -> dict[str, int | float] | None:
    """A resource in base units for JSON: memory in bytes and other counts as integers, vcore in cores
    (what machines read: the state endpoint, the JSON audit line)."""
    if resource is None:
        return None
    out: dict[str, int | float] = {}
    for name, amount in resource.items():
        value = in_base_units(name, amount)
        out[name] = int(value) if value.is_integer() else value
    return out
