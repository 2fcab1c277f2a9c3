"""The one trace player, sans-IO: the trace cursor, the stand-in resource manager and the stop rules,
shared by the simulator's virtual-time :func:`~sniper.simulator.run.drive` and ``sniper feed``'s
wall-time :func:`~sniper.resource_manager.feed.play`.

Time is the trace's own (``own_time``, the simulator: a trace stamped in epoch seconds runs in epoch
seconds, so the decisions carry the feed's ``t``) or counted from its first event (``sniper feed``,
which publishes in wall time); :attr:`Player.origin` is where it starts, and ``until`` and
:attr:`Player.end_hint` count from there. The player never reads a clock: the caller says what time it
is. Ticks fall on a grid of ``tick`` seconds from the origin;
:meth:`Player.next_step` jumps straight to the next time that can change something (a trace event, a
container's end, the next grid tick while the caller says the scheduler has work that time can move,
the end of the run) and never walks through idle time unless told to tick every second (``skip_idle``
off, the reference the tests compare against).
"""

from __future__ import annotations

import math

import msgspec

from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.rm import StandInRM

EPS = 1e-9


def relative(events: list[f.Feed]) -> list[f.Feed]:
    """``events`` sorted by time (stable) with ``t`` counted from the first event."""
    if not events:
        return []
    origin = min(e.t for e in events)
    ordered = sorted(events, key=lambda e: e.t)
    if origin == 0:
        return ordered
    return [msgspec.structs.replace(e, t=e.t - origin) for e in ordered]


def grid_after(now: float, tick: float) -> float:
    """The first grid tick after a step at ``now`` (as ticking every ``tick`` seconds computes it)."""
    return (math.floor(now / tick + EPS) + 1) * tick


def _first_at_or_after(t: float, tick: float) -> int:
    """The index of the first grid tick ``n * tick >= t``, exactly as the floats compare."""
    n = math.ceil(t / tick)
    while n * tick < t:
        n += 1
    while (n - 1) * tick >= t:
        n -= 1
    return n


def ticks_between(first_tick: float, before: float, tick: float) -> int:
    """How many grid ticks ticking steps through from ``first_tick`` (the player's next tick) until
    ``before``, exclusive."""
    first = _first_at_or_after(first_tick, tick)
    last = _first_at_or_after(before, tick) - 1
    return max(0, last - first + 1)


def last_round_before(
    next_round: float, interval: float, first_tick: float, before: float, tick: float
) -> float | None:
    """When ticking every ``tick`` seconds from ``first_tick`` (the player's next tick) until ``before``,
    exclusive, the last tick at which a periodic round (due at ``next_round``, then ``interval`` after
    each round) would run; None if none would."""
    first = max(_first_at_or_after(first_tick, tick), _first_at_or_after(next_round, tick))
    last = _first_at_or_after(before, tick) - 1
    if first > last:
        return None
    step = max(1, math.ceil(interval / tick - EPS))
    return (first + (last - first) // step * step) * tick


class Player:
    """Replays a trace and plays the resource manager; the caller moves the clock and delivers."""

    def __init__(
        self,
        events: list[f.Feed],
        *,
        until: float | None = None,
        tick: float = 1.0,
        quiet: float = 60.0,
        skip_idle: bool = True,
        am_response: float | None = None,
        am_release_gap: float = 0.0,
        own_time: bool = False,
    ) -> None:
        """``am_response``: how long a contract application master takes to answer a preemption request
        (None: half the time to its deadline); ``am_release_gap``: seconds between the containers of one
        answer (0: all at once); ``own_time``: keep the trace's time (else count from its first event)."""
        if tick <= 0 or quiet < 0:
            raise ValueError("tick must be positive and quiet not negative")
        self.trace = sorted(events, key=lambda e: e.t) if own_time else relative(events)
        self.origin = self.trace[0].t if own_time and self.trace else 0.0
        self.until = until
        self.tick = tick
        self.quiet = quiet
        self.skip_idle = skip_idle
        self.rm = StandInRM(am_response, am_release_gap)
        self.cursor = 0
        self.now = self.origin
        self.next_tick = self.origin
        self.last_activity = self.origin
        self.steps = 0

    @property
    def end_hint(self) -> float:
        """Where the run is expected to end, in seconds from the origin, for progress bars."""
        if self.until is not None:
            return self.until
        return max(self.trace[-1].t if self.trace else 0.0, self.now) - self.origin

    def grid_after(self, now: float) -> float:
        """The first grid tick after a step at ``now``."""
        return self.origin + grid_after(now - self.origin, self.tick)

    def exhausted(self) -> bool:
        """The trace is fully published and no container end is scheduled."""
        return self.cursor >= len(self.trace) and self.rm.next_time() is None

    # ------------------------------------------------------------------ virtual time

    def next_step(self, *, active: bool, waiting: bool, wake: float | None = None) -> float | None:
        """The next time to step to, or None when the run is over.

        ``active``: the scheduler holds work the passing of time can move (pending asks a policy may
        act on, notices and reservations with deadlines), so the next grid tick matters. ``waiting``:
        asks still wait (the run then ends once nothing happened for ``quiet`` seconds). ``wake``: when the
        scheduler's own state changes with time next (an SLO reservation's planned interval begins or
        ends), stepped to like an event, never past.
        """
        upcoming: list[float] = []
        if wake is not None and wake > self.now:
            upcoming.append(wake)
        if active or not self.skip_idle:
            upcoming.append(self.next_tick)
        if self.cursor < len(self.trace):
            upcoming.append(self.trace[self.cursor].t)
        rm_next = self.rm.next_time()
        if rm_next is not None:
            upcoming.append(rm_next)
        if self.until is not None:
            last = self.origin + math.floor(self.until / self.tick + EPS) * self.tick
            upcoming.append(max(self.next_tick, last))
        elif self.exhausted() and waiting:
            # the last grid tick before ticking would find the run quiet for longer than ``quiet``
            stop = self.grid_after(self.last_activity + self.quiet)
            upcoming.append(max(self.next_tick, stop - self.tick))
        if not upcoming:
            return None
        nxt = float(min(upcoming))
        if self.until is not None:
            return None if nxt > self.origin + self.until else nxt
        if self.exhausted() and (not waiting or nxt - self.last_activity > self.quiet):
            return None
        return nxt

    def advance(self, now: float) -> list[f.Feed]:
        """Move the clock to ``now`` and return what is due then: trace events, then container ends."""
        if now > self.next_tick:  # grid ticks jumped over: continue the grid as ticking through them would
            self.next_tick = self.origin + _first_at_or_after(now - self.origin, self.tick) * self.tick
        self.now = now
        self.steps += 1
        if now >= self.next_tick:
            self.next_tick = self.grid_after(now)
        return self.due(now)

    # ------------------------------------------------------------------ any clock

    def due(self, now: float) -> list[f.Feed]:
        """Trace events and container ends due at ``now``, in that order."""
        out: list[f.Feed] = []
        trace = self.trace
        while self.cursor < len(trace) and trace[self.cursor].t <= now:
            out.append(trace[self.cursor])
            self.cursor += 1
        out.extend(self.rm.due(now))
        return out

    def observe(self, event: f.Feed) -> None:
        """An event on its way to the scheduler (the stand-in resource manager learns the asks)."""
        self.rm.observe(event)

    def on_decision(self, dec: d.DecisionMsg, now: float) -> list[f.Feed]:
        """The resource manager's answer to a decision: feed events to publish right now."""
        if not isinstance(dec, d.Rejected | d.ReservationEnded):
            self.last_activity = now
        return self.rm.on_decision(dec, now)
