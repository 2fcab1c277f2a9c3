"""Test configuration: every async test runs on asyncio and on uvloop (Kafka tests on uvloop only), and
property tests draw the same examples on every run (``SNIPER_HYPOTHESIS=explore`` draws new ones).

A uvloop loop's ``close`` runs libuv until every handle and request is gone, which has been seen to block
for good after a Kafka test under load (the test itself had passed). The tests' uvloop loops close on a
worker thread and give up after ``CLOSE_LIMIT`` seconds with a warning, so such a hang costs a warning in
the summary instead of the whole run."""

from __future__ import annotations

import asyncio
import os
import threading
import warnings
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

CLOSE_LIMIT = 60.0


class LoopCloseHung(ResourceWarning):
    """A test's uvloop loop did not finish closing within ``CLOSE_LIMIT`` seconds and was left behind."""


class BoundedCloseLoop(uvloop.Loop):
    """A uvloop loop whose ``close`` waits at most ``CLOSE_LIMIT`` seconds (see the module docstring)."""

    def close(self) -> None:
        closer = threading.Thread(target=super().close, name="uvloop-close", daemon=True)
        closer.start()
        closer.join(CLOSE_LIMIT)
        if closer.is_alive():
            warnings.warn(
                f"a uvloop loop did not close within {CLOSE_LIMIT:g} s (libuv still waits on a handle or "
                "request); it was left behind",
                LoopCloseHung,
                stacklevel=2,
            )


LOOPS: Mapping[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": BoundedCloseLoop,
}


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, Any]:
    if item.get_closest_marker("kafka") is not None:
        return {"uvloop": BoundedCloseLoop}
    return LOOPS
