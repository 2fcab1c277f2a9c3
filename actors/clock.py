"""The clock actor: the only reader of the wall clock. It publishes ticks; decision code only sees them.

Ticks carry seconds since the clock started (monotonic), so time never goes backwards.
"""

from __future__ import annotations

import time

import anyio
from anyio.abc import TaskStatus

from actors.router import Router
from messages import protocol as p
from transport.bus import TICK


async def wall_clock(
    router: Router, interval: float, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Publish a tick every ``interval`` seconds of wall time, forever."""
    start = time.monotonic()
    task_status.started()
    while True:
        await anyio.sleep(interval)
        await router.publish(TICK, "*", p.Tick(now=time.monotonic() - start))
