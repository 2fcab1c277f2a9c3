"""The clock actor: the only place that turns the passage of wall time into ticks.

Decision code never reads a clock; it sees ``Tick(now)`` messages. A :class:`TimeBase` maps the local
monotonic clock onto the partition's time (anchored at a known instant: a restored snapshot's time,
or the ``now`` of the cache's last view delta) and never goes backwards. The simulator sends virtual
ticks itself and needs neither.
"""

from __future__ import annotations

import time

import anyio
from anyio.abc import TaskStatus

from sniper.messages import protocol as p
from sniper.transport.bus import TICK, Bus


class TimeBase:
    def __init__(self, at: float | None = None) -> None:
        self._anchor: tuple[float, float] | None = None if at is None else (at, time.monotonic())
        self._last = 0.0

    def anchor(self, now: float) -> None:
        """The partition's clock read ``now`` at this very moment."""
        self._anchor = (now, time.monotonic())

    def now(self) -> float | None:
        """The partition's time now (``None`` before the first anchor); never earlier than before."""
        if self._anchor is None:
            return None
        base, at = self._anchor
        self._last = max(self._last, base + (time.monotonic() - at))
        return self._last


async def clock_actor(
    bus: Bus,
    partition: str,
    interval: float,
    time_base: TimeBase,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Publish ``Tick(now)`` for ``partition`` every ``interval`` seconds of wall time, forever."""
    task_status.started()
    while True:
        await anyio.sleep(interval)  # a timer: the tick interval
        now = time_base.now()
        if now is not None:
            await bus.publish(TICK, "*", p.Tick(partition=partition, now=now))
