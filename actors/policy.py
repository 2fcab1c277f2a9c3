"""Preemption-policy actors, registered by name; the partition runtime starts the configured ones."""

from __future__ import annotations

from collections.abc import Callable

from actors.base import Actor, ActorFactory
from actors.router import Router
from core.cache import CacheCore


def policy_factories(
    partition: str, router: Router, track: Callable[[Actor], Actor], cache: CacheCore
) -> list[tuple[ActorFactory, bool]]:
    """Factories for the policies the partition's config enables (none yet without preemption)."""
    return []
