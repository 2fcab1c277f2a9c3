"""Test configuration: every async test runs on asyncio and on uvloop (Kafka tests on uvloop only), and
property tests draw the same examples on every run (``SNIPER_HYPOTHESIS=explore`` draws new ones).

A uvloop loop's ``close`` runs libuv until every handle and request is gone, which has been seen to block
for good after a Kafka test under load, with a child process the test started still running. So a test's
uvloop loop, when it closes, first kills the child processes started while it ran that still run (a
``ChildLeftRunning`` warning names them; the bundled broker, shared by the session, is never one), then
closes on a worker thread and gives up after ``CLOSE_LIMIT`` seconds with a warning: such a hang costs a
warning in the summary instead of the whole run."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import uvloop
from hypothesis import Phase, settings

# The test command is a gate: the same examples every run, so a run fails only on a change. Hunting for
# new failing examples is a separate run: ``SNIPER_HYPOTHESIS=explore python -m pytest -q``. The gate
# shrinks a failing example but does not trace it line by line (the explain phase), which can outlast
# the test's timeout on a large simulation. No test times itself: an example's duration (Hypothesis's
# deadline) depends on the machine and the collector, not on the code under test.
settings.register_profile(
    "repeatable", derandomize=True, deadline=None, phases=[p for p in Phase if p is not Phase.explain]
)
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile(os.environ.get("SNIPER_HYPOTHESIS", "repeatable"))
if os.environ.get("SNIPER_HYPOTHESIS", "repeatable") == "repeatable":
    # Hypothesis mixes in literals mined from every local module loaded so far, so a test's examples
    # would depend on which other test files ran before it; the gate draws without them.
    from hypothesis.internal.conjecture import providers as _providers

    _providers._get_local_constants = lambda: _providers._local_constants

pytest_plugins = ["tests.kafka_support", "tests.kube_apiserver"]


@pytest.fixture(autouse=True)
def collector_as_found() -> Iterator[None]:
    """A test that runs the CLI in this process tunes the collector for a core (:func:`sniper.collector.tune`:
    thresholds, a callback that freezes survivors); put it back, so no later test runs under it (frozen
    objects are invisible to ``gc.get_referrers``, which Hypothesis uses to check its own random
    generator)."""
    thresholds, callbacks = gc.get_threshold(), list(gc.callbacks)
    yield
    gc.callbacks[:] = callbacks
    gc.set_threshold(*thresholds)
    if gc.get_freeze_count():
        gc.unfreeze()


CLOSE_LIMIT = 60.0


class LoopCloseHung(ResourceWarning):
    """A test's uvloop loop did not finish closing within ``CLOSE_LIMIT`` seconds and was left behind."""


class ChildLeftRunning(ResourceWarning):
    """A test left a child process running when its loop closed; it was killed."""


def _children() -> dict[int, str]:
    """This process's child processes: pid -> command line (empty where /proc is not there)."""
    me, found = os.getpid(), {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat, open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                fields, command = stat.read().rsplit(")", 1)[1].split(), cmdline.read()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == me and fields[0] != "Z":
            found[int(entry)] = command.replace(b"\0", b" ").decode(errors="replace").strip()
    return found


class BoundedCloseLoop(uvloop.Loop):
    """A uvloop loop whose ``close`` kills what its test left running and waits at most ``CLOSE_LIMIT``
    seconds (see the module docstring)."""

    def _close_late(self) -> None:
        """``close`` on the closer thread: a loop left behind may finish closing during a later test, and
        what it raises then (a warning made an error, for the handle its own test left open) belongs to
        the test that left it, which ``LoopCloseHung`` already named."""
        with contextlib.suppress(Exception):
            super().close()

    def __init__(self) -> None:
        super().__init__()
        self._children_before = set(_children())

    def close(self) -> None:
        left = {pid: cmd for pid, cmd in _children().items() if pid not in self._children_before}
        left = {pid: cmd for pid, cmd in left.items() if "tansu" not in cmd}
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if left:
            what = f"killed child processes left running: {sorted(left.values())}"
            warnings.warn(what, ChildLeftRunning, stacklevel=2)
        closer = threading.Thread(target=self._close_late, name="uvloop-close", daemon=True)
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


@pytest.fixture
def looks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per look for candidates the allocator makes (calls of ``find_ask_candidates``): the
    number of containers it listed."""
    from sniper.core import allocator
    from sniper.core.allocation import find_ask_candidates as find

    counted: list[int] = []

    def counting(*args: object, **kwargs: object) -> object:
        listed = find(*args, **kwargs)  # type: ignore[arg-type]
        counted.append(len(listed))
        return listed

    monkeypatch.setattr(allocator, "find_ask_candidates", counting)
    return counted


@pytest.fixture
def other_cpu_busy() -> Iterator[subprocess.Popen[bytes]]:
    """A process spinning on one CPU for the whole test (killed at teardown): what the test checks must
    hold while the core competes for the machine, as on a shared host."""
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield burner
    finally:
        burner.kill()
        burner.wait()
