"""Kafka test fixtures: one broker per test session, and settings with a topic prefix per test.

``kafka_bootstrap`` is ``$SNIPER_KAFKA_BOOTSTRAP`` when set (an external broker), else the address of
an :class:`~transport.broker.EmbeddedBroker` started once for the session and stopped at its end.
``kafka_settings`` gives every test its own topic prefix, so tests never see each other's records,
and short group timeouts (the bundled broker holds a join for about half the session timeout).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator

import pytest

from transport.broker import EmbeddedBroker, resolve_bootstrap
from transport.kafka import KafkaSettings


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    external = resolve_bootstrap(None)
    if external is not None:
        yield external
        return
    with EmbeddedBroker() as broker:
        yield broker.bootstrap


def unique_prefix(label: str = "t") -> str:
    """A topic prefix no other test uses: ``sniper-test.<label>.<random>.``."""
    safe = "".join(c if c.isalnum() else "-" for c in label)[:40]
    return f"sniper-test.{safe}.{uuid.uuid4().hex[:10]}."


@pytest.fixture
def kafka_settings(kafka_bootstrap: str, request: pytest.FixtureRequest) -> KafkaSettings:
    settings = KafkaSettings(
        bootstrap=kafka_bootstrap,
        prefix=unique_prefix(request.node.name),
        partitions=4,
        commit_interval=0.2,
        close_timeout=5.0,
    )
    if resolve_bootstrap(None) is None:
        # The embedded broker accepts short sessions (a real Kafka's minimum is 6 s by default).
        settings = dataclasses.replace(settings, session_timeout_ms=2_000, heartbeat_interval_ms=500)
    return settings
