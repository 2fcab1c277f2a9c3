"""Test configuration: every async test runs on asyncio and on uvloop (Kafka tests on uvloop only)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import uvloop

pytest_plugins = ["tests.kafka_support"]

LOOPS: Mapping[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, Any]:
    if item.get_closest_marker("kafka") is not None:
        return {"uvloop": uvloop.new_event_loop}
    return LOOPS
