"""Test configuration: every async test runs on asyncio and on uvloop (Kafka tests on uvloop only), and
property tests draw the same examples on every run (``SNIPER_HYPOTHESIS=explore`` draws new ones)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import uvloop
from hypothesis import settings

# The test command is a gate: the same examples every run, so a run fails only on a change. Hunting for
# new failing examples is a separate run: ``SNIPER_HYPOTHESIS=explore python -m pytest -q``.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("SNIPER_HYPOTHESIS", "repeatable"))

pytest_plugins = ["tests.kafka_support"]

LOOPS: Mapping[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, Any]:
    if item.get_closest_marker("kafka") is not None:
        return {"uvloop": uvloop.new_event_loop}
    return LOOPS
