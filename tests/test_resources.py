"""Resource vectors: quantity parsing (Kubernetes / YuniKorn style) and integer arithmetic."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sniper.core import resources as res
from sniper.core.resources import QuantityError, parse_quantity, parse_resource


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        # memory: bytes when bare (YuniKorn 1.4+), kept as MiB rounded up
        ("memory", "64Gi", 65536),
        ("memory", "1Gi", 1024),
        ("memory", "1.5Gi", 1536),
        ("memory", "512Mi", 512),
        ("memory", "1Ti", 1024 * 1024),
        ("memory", "1Ei", 2**40),
        ("memory", "2048Ki", 2),
        ("memory", "1Ki", 1),  # rounded up to a whole MiB
        ("memory", "1G", 954),  # 10**9 bytes, rounded up to MiB
        ("memory", "1k", 1),
        ("memory", "1K", 1),
        ("memory", "1M", 1),  # 10**6 bytes
        ("memory", "1T", 953675),  # 10**12 bytes
        ("memory", "1048576", 1),  # a bare number is bytes
        ("memory", 1048576, 1),  # and an integer means the same
        ("memory", 343597383680, 320 * 1024),
        ("memory", " 8Gi ", 8192),
        ("memory", 0, 0),
        ("memory", "0", 0),
        ("memory", 1, 1),
        ("memory", 2097152.0, 2),
        # vcore: cores when bare, m for milli-cores, kept as milli-cores
        ("vcore", "500m", 500),
        ("vcore", "2", 2000),
        ("vcore", 2, 2000),  # vcore: 2 and vcore: "2" are both 2 cores
        ("vcore", 10, 10_000),
        ("vcore", "10", 10_000),
        ("vcore", "1.5", 1500),
        ("vcore", 0.5, 500),
        ("vcore", "0.1m", 1),  # rounded up
        ("vcore", "1k", 1_000_000),
        ("vcore", "160000m", 160_000),
        # anything else: a bare count
        ("gpu", "2", 2),
        ("gpu", 3, 3),
        ("gpu", "1k", 1000),
        ("gpu", "1Ki", 1024),
        ("gpu-milli", 460, 460),  # milli-GPUs written as a count, as YuniKorn reads any other resource
        ("gpu-milli", "1.46k", 1460),
    ],
)
def test_parse_quantity_reads_yunikorn_quantities(name: str, value: object, expected: int) -> None:
    assert parse_quantity(name, value) == expected


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("memory", -1, "negative"),
        ("memory", "-1Gi", "negative"),
        ("memory", "abc", "cannot parse"),
        ("memory", "1Xi", "cannot parse"),
        ("memory", "", "cannot parse"),
        ("memory", "1e3", "cannot parse"),
        ("memory", "500m", "the milli suffix 'm' is for vcore only"),
        ("gpu", "500m", "the milli suffix 'm' is for vcore only"),
        ("gpu-milli", "500m", "is a count of milli-GPUs already"),  # 500m would be half a milli-GPU
        ("memory", True, "boolean"),
        ("memory", -2.0, "negative"),
        ("memory", math.inf, "is not a quantity"),
        ("memory", math.nan, "is not a quantity"),
        ("memory", None, "is not a quantity"),
        ("memory", [1], "is not a quantity"),
        ("memory", "9" * 400 + "Gi", "too large"),
        ("memory", "9" * 30 + "Ei", "too large"),
        ("vcore", 10**30, "too large"),
        pytest.param("gpu", 10**5000, "too large", id="more digits than Python turns into text"),
        ("gpu", "1" + "0" * 19, "too large"),
    ],
)
def test_parse_quantity_errors(name: str, value: object, fragment: str) -> None:
    with pytest.raises(QuantityError, match=fragment) as info:
        parse_quantity(name, value)
    assert str(info.value).startswith(f"{name}:")
    assert len(str(info.value)) < 200


@given(st.integers(0, 2**40), st.sampled_from(["memory", "vcore", "gpu", "gpu-milli"]))
def test_as_quantities_reads_back_exactly(amount: int, name: str) -> None:
    assert parse_resource(res.as_quantities({name: amount}), keep_zero=True) == {name: amount}


@given(st.integers(0, 2**40), st.sampled_from(["memory", "vcore", "gpu"]))
def test_integers_and_strings_mean_the_same(amount: int, name: str) -> None:
    assert parse_quantity(name, amount) == parse_quantity(name, str(amount))


def test_parse_resource_drops_zero_entries_and_names_where() -> None:
    assert parse_resource({"memory": "2Gi", "vcore": "0", "gpu": 1}) == {"memory": 2048, "gpu": 1}
    with pytest.raises(QuantityError, match=r"^queue root\.a\.guaranteed: vcore: cannot parse"):
        parse_resource({"vcore": "lots"}, "queue root.a.guaranteed")
    with pytest.raises(QuantityError, match="non-empty strings"):
        parse_resource({"": 1})


def test_parse_resource_can_keep_zero_entries() -> None:
    """A zero in a ``max`` means "none of this resource", so the config parser keeps it."""
    assert parse_resource({"memory": "1Gi", "gpu": 0}, keep_zero=True) == {"memory": 1024, "gpu": 0}


@pytest.mark.parametrize(
    ("request_", "available", "expected"),
    [
        ({"memory": 4}, {"memory": 4}, True),
        ({"memory": 5}, {"memory": 4}, False),
        ({"memory": 1, "gpu": 1}, {"memory": 4}, False),  # a missing name is zero
        ({}, {}, True),
        ({"memory": 0}, {}, True),
        ({"memory": 4, "vcore": 1000}, {"memory": 8, "vcore": 999}, False),
    ],
)
def test_fits(request_: dict[str, int], available: dict[str, int], expected: bool) -> None:
    assert res.fits(request_, available) is expected


@pytest.mark.parametrize(
    ("usage", "against", "expected"),
    [
        ({"memory": 50, "vcore": 10}, {"memory": 100, "vcore": 100}, 0.5),
        ({"memory": 10, "vcore": 80}, {"memory": 100, "vcore": 100}, 0.8),
        ({}, {"memory": 100}, 0.0),
        ({"memory": 0, "gpu": 0}, {"memory": 100}, 0.0),  # zero usage counts as nothing
        ({"gpu": 1}, {"memory": 100}, math.inf),  # usage of a resource the total lacks
    ],
)
def test_dominant_share(usage: dict[str, int], against: dict[str, int], expected: float) -> None:
    assert res.dominant_share(usage, against) == expected


def test_arithmetic_never_mutates_its_arguments() -> None:
    a = {"memory": 4, "vcore": 1}
    b = {"memory": 1, "gpu": 2}
    assert res.add(a, b) == {"memory": 5, "vcore": 1, "gpu": 2}
    assert res.sub(a, b) == {"memory": 3, "vcore": 1, "gpu": -2}
    assert res.scale(b, 3) == {"memory": 3, "gpu": 6}
    assert res.component_min(a, b) == {"memory": 1, "vcore": 0, "gpu": 0}
    assert res.component_max(a, b) == {"memory": 4, "vcore": 1, "gpu": 2}
    assert res.clamp_min_zero(res.sub(a, b)) == {"memory": 3, "vcore": 1}
    assert res.total([a, b, b]) == {"memory": 6, "vcore": 1, "gpu": 4}
    assert a == {"memory": 4, "vcore": 1}
    assert b == {"memory": 1, "gpu": 2}


def test_in_place_arithmetic() -> None:
    acc = {"memory": 4}
    res.add_into(acc, {"memory": 2, "vcore": 1}, times=3)
    assert acc == {"memory": 10, "vcore": 3}
    res.sub_into(acc, {"vcore": 1}, times=3)
    assert acc == {"memory": 10, "vcore": 0}
    assert res.normalized(acc) == {"memory": 10}


@pytest.mark.parametrize(
    ("value", "positive"),
    [({}, False), ({"memory": 0}, False), ({"memory": -1}, False), ({"gpu": 1}, True)],
)
def test_any_positive(value: dict[str, int], positive: bool) -> None:
    assert res.any_positive(value) is positive


CAP = {"memory": 100_000, "vcore": 100_000, "gpu": 8}


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        # 200% of the memory guarantee and 50% of the vcore guarantee is above the guarantee
        ({"memory": 40_000, "vcore": 10_000}, {"memory": 20_000, "vcore": 20_000}, 1),
        # the mirror image is below
        ({"memory": 10_000, "vcore": 10_000}, {"memory": 20_000, "vcore": 20_000}, -1),
        # same dominant share: the next largest share decides
        ({"memory": 20_000, "vcore": 10_000}, {"memory": 20_000, "vcore": 5_000}, 1),
        ({"memory": 20_000, "vcore": 10_000}, {"vcore": 20_000, "memory": 10_000}, 0),
        # a GPU share dominates when it is the largest
        ({"gpu": 4, "memory": 1}, {"memory": 40_000}, 1),
        # a resource the capacity lacks says nothing
        ({"memory": 1, "fpga": 9}, {"memory": 1}, 0),
    ],
)
def test_drf_compare(a: dict[str, int], b: dict[str, int], expected: int) -> None:
    assert res.drf_compare(a, b, CAP) == expected
    assert res.drf_compare(b, a, CAP) == -expected
    assert res.drf_above(a, b, CAP) is (expected > 0)
    assert res.drf_below(a, b, CAP) is (expected < 0)
