"""What a kill throws away: the work a container did since its last checkpoint.

A container's last checkpoint at a moment is the latest of the one its app last reported
(``allocation_checkpointed``) and the one its app's ``checkpoint_interval`` implies (every interval from
the container's start); with neither, its start. Its lost work is the time from there to the moment:
never negative, never more than its running time, and equal to it without checkpoint information.
"""

from __future__ import annotations

import math


def lost_work(start: float, at: float, interval: float | None = None, checkpointed: float | None = None) -> float:
    """Seconds of work a container started at ``start`` loses if killed at ``at``: since its last
    checkpoint, ``checkpointed`` (reported) or implied by ``interval`` (seconds, from ``start``), else since
    ``start``. A reported checkpoint later than ``at`` or earlier than ``start`` is no checkpoint then."""
    since = start
    if interval is not None and at > start:
        since = start + math.floor((at - start) / interval) * interval
    if checkpointed is not None and since < checkpointed <= at:
        since = checkpointed
    return max(0.0, at - since)
