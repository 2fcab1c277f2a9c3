"""YARN's resource calculators for Sniper resources: how the proportional arithmetic compares, divides, rounds.

Owns: :class:`ResourceCalculator` with :class:`DefaultCalculator` (YARN's ``DefaultResourceCalculator``: every
comparison and ratio looks at memory only) and :class:`DominantCalculator` (YARN's
``DominantResourceCalculator``: DRF; shares against a total, compared from the largest share down), each
calculator's :class:`Order` against one total (``against``: what it needs of the total worked out once; every
comparison goes through it), the factory :func:`make_calculator`, and the Java number semantics the policy's
exact figures depend on (``float`` weights and ratios, truncating ``(long)`` casts). Products are rounded to
integers as each YARN calculator does: the default one half up (``(long)(x + 0.5)``), the dominant one up
(``(long) Math.ceil((float) x)``; YARN's DRF tests, e.g. the natural termination factor one, depend on it).
Under the default calculator only the memory component of a result is meaningful (as in YARN).

Invariants: every function is pure (inputs are never mutated, results are fresh dicts); a missing resource
name counts as zero; ``compare`` returns -1, 0 or 1; ``rmin``/``rmax`` return one of their two arguments
whole (as YARN's ``Resources.min/max``), never a component-wise mix.
"""

from __future__ import annotations

import math
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import truediv

from sniper.core.resources import MEMORY, Resource, ResourceLike

CALCULATORS: tuple[str, ...] = ("default", "dominant")
_SINGLE = struct.Struct("f")
_pack_single, _unpack_single = _SINGLE.pack, _SINGLE.unpack


def java_float(x: float) -> float:
    """``x`` rounded to the nearest IEEE single (Java ``(float) x``)."""
    try:
        # Packing rounds to nearest single and keeps NaN and the infinities; only a finite double beyond the
        # single range overflows, which Java rounds to the infinity of its sign.
        return _unpack_single(_pack_single(x))[0]  # type: ignore[no-any-return]
    except OverflowError:
        return math.copysign(math.inf, x)


def java_div(numerator: float, denominator: float) -> float:
    """IEEE division without exceptions: ``x / 0`` is ``±inf`` and ``0 / 0`` is NaN, as in Java."""
    if denominator == 0:
        if numerator == 0 or math.isnan(numerator):
            return math.nan
        return math.copysign(math.inf, numerator) * math.copysign(1.0, denominator)
    return numerator / denominator


def java_float_div(numerator: float, denominator: float) -> float:
    """Java ``(float) n / d`` on two float operands: single-precision division (exact via double rounding)."""
    return java_float(java_div(java_float(numerator), java_float(denominator)))


def java_long(x: float) -> int:
    """Java ``(long) x``: truncation toward zero; NaN is 0, infinities saturate."""
    if math.isnan(x):
        return 0
    if math.isinf(x):
        return 2**63 - 1 if x > 0 else -(2**63)
    return int(x)


def double_compare(a: float, b: float) -> int:
    """Java ``Double.compare``: NaN is above everything and equal to itself; -0.0 is below 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    a_nan, b_nan = math.isnan(a), math.isnan(b)
    if a_nan or b_nan:
        return int(a_nan) - int(b_nan)
    sign_a, sign_b = math.copysign(1.0, a), math.copysign(1.0, b)
    return 0 if sign_a == sign_b else (-1 if sign_a < sign_b else 1)


def multiply_trunc(r: ResourceLike, factor: float) -> Resource:
    """YARN's ``Resources.multiply``: every component times ``factor``, truncated toward zero."""
    return {k: java_long(v * factor) for k, v in r.items()}


class Order:
    """A calculator's comparison against one fixed total, with what it needs of that total worked out once
    (the fix-point compares many resources against each level's total). ``key``, where the calculator has
    one, is a sort key equivalent to ``compare``."""

    __slots__ = ("compare", "key", "positive")

    def __init__(
        self,
        compare: Callable[[ResourceLike, ResourceLike], int],
        positive: Callable[[ResourceLike], bool],
        key: Callable[[ResourceLike], tuple[float, ...]] | None = None,
    ) -> None:
        self.compare = compare
        self.positive = positive
        self.key = key

    def gt(self, a: ResourceLike, b: ResourceLike) -> bool:
        return self.compare(a, b) > 0

    def lt(self, a: ResourceLike, b: ResourceLike) -> bool:
        return self.compare(a, b) < 0

    def ge(self, a: ResourceLike, b: ResourceLike) -> bool:
        return self.compare(a, b) >= 0

    def rmin(self, a: ResourceLike, b: ResourceLike) -> Resource:
        """YARN's ``Resources.min``: ``a`` when ``a <= b``, else ``b`` (whole, not component-wise)."""
        return dict(a) if self.compare(a, b) <= 0 else dict(b)

    def rmax(self, a: ResourceLike, b: ResourceLike) -> Resource:
        """YARN's ``Resources.max``: ``a`` when ``a >= b``, else ``b`` (whole, not component-wise)."""
        return dict(a) if self.compare(a, b) >= 0 else dict(b)


class ResourceCalculator(ABC):
    """Comparison, division and rounding of resources, relative to a ``total`` (YARN's ``clusterResource``)."""

    name: str

    def __init__(self, names: Sequence[str]) -> None:
        self.names: tuple[str, ...] = tuple(names)
        self._known: frozenset[str] = frozenset(self.names)

    @abstractmethod
    def against(self, total: ResourceLike) -> Order:
        """This calculator's comparison relative to ``total``."""

    def compare(self, total: ResourceLike, a: ResourceLike, b: ResourceLike) -> int:
        """-1, 0 or 1 as ``a`` is smaller than, as large as or larger than ``b`` (relative to ``total``)."""
        return self.against(total).compare(a, b)

    @abstractmethod
    def divide(self, total: ResourceLike, numerator: ResourceLike, denominator: ResourceLike) -> float:
        """The ratio of two resources as a Java ``float``."""

    @abstractmethod
    def fits_in(self, smaller: ResourceLike, bigger: ResourceLike) -> bool:
        """Whether ``smaller`` fits in ``bigger`` in the components this calculator looks at."""

    @abstractmethod
    def any_major_above_zero(self, r: ResourceLike) -> bool:
        """Whether a component this calculator looks at is positive."""

    def gt(self, total: ResourceLike, a: ResourceLike, b: ResourceLike) -> bool:
        return self.compare(total, a, b) > 0

    def lt(self, total: ResourceLike, a: ResourceLike, b: ResourceLike) -> bool:
        return self.compare(total, a, b) < 0

    def ge(self, total: ResourceLike, a: ResourceLike, b: ResourceLike) -> bool:
        return self.compare(total, a, b) >= 0

    def le(self, total: ResourceLike, a: ResourceLike, b: ResourceLike) -> bool:
        return self.compare(total, a, b) <= 0

    def positive(self, total: ResourceLike, r: ResourceLike) -> bool:
        """``r > none`` in this calculator's order."""
        return self.against(total).positive(r)

    def rmin(self, total: ResourceLike, a: ResourceLike, b: ResourceLike) -> Resource:
        """YARN's ``Resources.min``: ``a`` when ``a <= b``, else ``b`` (whole, not component-wise)."""
        return self.against(total).rmin(a, b)

    def rmax(self, total: ResourceLike, a: ResourceLike, b: ResourceLike) -> Resource:
        """YARN's ``Resources.max``: ``a`` when ``a >= b``, else ``b`` (whole, not component-wise)."""
        return self.against(total).rmax(a, b)

    def _keys(self, *rs: ResourceLike) -> list[str]:
        keys = list(self.names)
        seen = set(keys)
        for r in rs:
            for k in r:
                if k not in seen:
                    seen.add(k)
                    keys.append(k)
        return keys

    def multiply_round(self, r: ResourceLike, by: Mapping[str, float]) -> Resource:
        """Each component times its own factor, rounded up to an integer (YARN's ``multiplyAndNormalizeUp``).

        This is the offer of the fix-point; names missing from ``by`` get a factor of 0. The rounding is the
        calculator's (:meth:`round_up`).
        """
        keys = self.names if self._known.issuperset(r) else self._keys(r)
        round_up, get, factor = self.round_up, r.get, by.get
        return {k: round_up(get(k, 0) * factor(k, 0.0)) for k in keys}

    def multiply_round_scalar(self, r: ResourceLike, factor: float) -> Resource:
        """Every component times ``factor``, rounded as :meth:`multiply_round` (the natural termination)."""
        return {k: self.round_up(v * factor) for k, v in r.items()}

    @staticmethod
    def round_up(x: float) -> int:
        """The calculator's rounding of a product to an integer (step 1)."""
        return java_long(x + 0.5)


class DefaultCalculator(ResourceCalculator):
    """YARN's ``DefaultResourceCalculator``: only memory is compared, divided and checked for fit."""

    name = "default"

    def __init__(self, names: Sequence[str] = (MEMORY,), memory: str = MEMORY) -> None:
        super().__init__(names)
        self.memory = memory

    def against(self, total: ResourceLike) -> Order:
        memory = self.memory

        def compare(a: ResourceLike, b: ResourceLike) -> int:
            x, y = a.get(memory, 0), b.get(memory, 0)
            return (x > y) - (x < y)

        return Order(compare, lambda r: r.get(memory, 0) > 0)

    def divide(self, total: ResourceLike, numerator: ResourceLike, denominator: ResourceLike) -> float:
        return java_float_div(numerator.get(self.memory, 0), denominator.get(self.memory, 0))

    def fits_in(self, smaller: ResourceLike, bigger: ResourceLike) -> bool:
        return smaller.get(self.memory, 0) <= bigger.get(self.memory, 0)

    def any_major_above_zero(self, r: ResourceLike) -> bool:
        return r.get(self.memory, 0) > 0


class DominantCalculator(ResourceCalculator):
    """YARN's ``DominantResourceCalculator`` (DRF) over the resource types in ``names``.

    Two resources compare by their shares of ``total``, largest share first, then the next largest, and so on.
    When ``total`` lacks one of the types (a zero divisor) the comparison is component-wise: larger only when
    larger in some type and smaller in none. ``divide`` is the ratio of the two largest shares.
    """

    name = "dominant"

    def __init__(self, names: Sequence[str]) -> None:
        if not names:
            raise ValueError("the dominant calculator needs at least one resource type")
        super().__init__(names)

    def _shares(self, total: ResourceLike, r: ResourceLike) -> list[float]:
        return [java_div(float(r.get(n, 0)), float(total.get(n, 0))) for n in self.names]

    def against(self, total: ResourceLike) -> Order:
        names = self.names
        divisors = [(n, float(total.get(n, 0))) for n in names]
        if any(d == 0 for _, d in divisors):
            # A type the total lacks: component-wise, larger only when larger in some type and smaller in none.
            def componentwise(a: ResourceLike, b: ResourceLike) -> int:
                a_greater = b_greater = False
                for n in names:
                    x, y = a.get(n, 0), b.get(n, 0)
                    if x > y:
                        a_greater = True
                    elif x < y:
                        b_greater = True
                if a_greater == b_greater:
                    return 0
                return 1 if a_greater else -1

            def some_positive_none_negative(r: ResourceLike) -> bool:
                values = [r.get(n, 0) for n in names]
                return any(v > 0 for v in values) and not any(v < 0 for v in values)

            return Order(componentwise, some_positive_none_negative)

        divs = tuple(d for _, d in divisors)
        zeros = (0,) * len(names)

        def descending(r: ResourceLike) -> list[float]:
            # ``int / float`` converts the int exactly as ``float()`` does: the same shares, without the calls.
            shares: list[float] = list(map(truediv, map(r.get, names, zeros), divs))
            shares.sort(reverse=True)
            return shares

        def key(r: ResourceLike) -> tuple[float, ...]:
            return tuple(descending(r))

        def by_shares(a: ResourceLike, b: ResourceLike) -> int:
            # Equal on every type this calculator knows is equal: other names never decide.
            a_get, b_get = a.get, b.get
            for n in names:
                if a_get(n, 0) != b_get(n, 0):
                    break
            else:
                return 0
            # Shares are finite (no divisor is zero): tuples compare as the first share that differs, and
            # ``-0.0 == 0.0`` as YARN's ``diff != 0`` test has it.
            ka, kb = descending(a), descending(b)
            return (ka > kb) - (ka < kb)

        def some_share_positive(r: ResourceLike) -> bool:
            # Against all zeros the largest share decides: some type of the same sign as its divisor.
            get = r.get
            return any(get(n, 0) > 0 if d > 0 else get(n, 0) < 0 for n, d in divisors)

        return Order(by_shares, some_share_positive, key)

    def divide(self, total: ResourceLike, numerator: ResourceLike, denominator: ResourceLike) -> float:
        top = _max_share(self._shares(total, numerator))
        bottom = _max_share(self._shares(total, denominator))
        return java_float(java_div(top, bottom))

    def fits_in(self, smaller: ResourceLike, bigger: ResourceLike) -> bool:
        return all(smaller.get(n, 0) <= bigger.get(n, 0) for n in self.names)

    def any_major_above_zero(self, r: ResourceLike) -> bool:
        return any(r.get(n, 0) > 0 for n in self.names)

    @staticmethod
    def round_up(x: float) -> int:
        """YARN's DRC rounds products up: ``(long) Math.ceil((float) x)``."""
        f = java_float(x)
        return java_long(math.ceil(f)) if math.isfinite(f) else java_long(f)


def _max_share(shares: Iterable[float]) -> float:
    best: float = 0.0
    for s in shares:
        if s > best:
            best = s
    return best


def make_calculator(name: str, names: Sequence[str]) -> ResourceCalculator:
    """The calculator called ``name`` (``default`` or ``dominant``) over the resource types ``names``."""
    if name == "default":
        return DefaultCalculator(names)
    if name == "dominant":
        return DominantCalculator(names)
    raise ValueError(f"unknown resource calculator {name!r}; expected one of {', '.join(CALCULATORS)}")
