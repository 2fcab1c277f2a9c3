"""The preemption mask: asks no victim set could help, skipped until something relevant changes.

Entries expire ``ttl`` seconds after they were masked, or earlier at a wake-up the round gave (when
the first victim too young to take comes of age); the whole mask is cleared when room may have
appeared (a node added or freed, an allocation released) or the quotas changed. Counts what it
masked and how often a masked ask was skipped (hits).
"""

from __future__ import annotations


class PreemptionMask:
    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self.entries: dict[str, float] = {}  # "app/ask" -> expiry time
        self.masked = 0
        self.hits = 0
        self.clears = 0

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, keys: list[str], now: float, wake_at: float | None = None) -> None:
        until = now + self.ttl if wake_at is None else min(now + self.ttl, wake_at)
        for key in keys:
            if key not in self.entries:
                self.masked += 1
            self.entries[key] = until

    def expire(self, now: float) -> None:
        self.entries = {k: t for k, t in self.entries.items() if t > now}

    def clear(self) -> None:
        if self.entries:
            self.clears += 1
            self.entries.clear()

    def keys(self) -> list[str]:
        return sorted(self.entries)
