"""An app's pending asks in scheduling order: priority high first, then the oldest; found by identity."""

from __future__ import annotations

from dataclasses import dataclass

from sniper.core.ask_order import AskOrder


@dataclass(eq=False)
class Item:
    sort_key: tuple[int, int]


def test_asks_come_out_by_priority_then_age_whatever_order_they_went_in() -> None:
    low, high_old, high_new, mid = Item((0, 1)), Item((-5, 2)), Item((-5, 9)), Item((-1, 3))
    order: AskOrder[Item] = AskOrder()
    for item in (high_new, low, mid, high_old):
        order.add(item)
    assert list(order) == [high_old, high_new, mid, low]


def test_asks_of_equal_keys_are_told_apart_by_identity() -> None:
    first, second, stranger = Item((0, 1)), Item((0, 1)), Item((0, 1))
    order: AskOrder[Item] = AskOrder()
    order.add(first)
    order.add(second)
    assert first in order and second in order and stranger not in order
    order.discard(stranger)  # not there: nothing changes
    assert list(order) == [first, second]
    order.discard(first)
    assert list(order) == [second] and first not in order
    order.discard(second)
    assert not order
