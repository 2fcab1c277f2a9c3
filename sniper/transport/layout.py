"""The topic layout: which Kafka topics a process uses and how many partitions each has.

The partition count is part of the contract: scheduler partition ``P`` lives on Kafka partition
``murmur2(P) mod count`` of every topic, so a topic with another count sends records where no owner
reads them. Invariants:

- **Created only as configured.** A topic comes into being only through :func:`ensure_layout`, with
  the configured partition count and configs. No client of this process has a topic auto-created with
  the broker's defaults: :func:`never_auto_create` makes every metadata request of aiokafka's clients
  ask the broker not to create topics (a client that names a missing topic gets an error instead).
- **Checked, never assumed.** A topic that exists with another partition count is refused with one
  line (:class:`TopicLayoutError`) naming the topic, both counts and the fix; nothing is published on
  it or read from it.
- **Losing a topic is loud at once.** :func:`layout_problem` judges the broker's current metadata; a
  topic the process uses that is gone (deleted, or a broker that lost its storage) is
  :class:`TopicLost`, which stops a long-running process instead of failing later on a publish.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

import aiokafka.admin.client
import aiokafka.client
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.protocol.metadata import MetadataRequest

_TOPIC_ALREADY_EXISTS = 36
_DESCRIBE_ATTEMPTS = 20  # a topic just created may be unknown to the broker's metadata for a moment
_DESCRIBE_PAUSE = 0.25


class TopicLayoutError(RuntimeError):
    """A topic this process uses is not as configured (another partition count, or it cannot be created)."""


class TopicLost(TopicLayoutError):
    """A topic this process uses is gone from the broker while the process runs."""


class _NoAutoCreate(MetadataRequest):  # type: ignore[misc]  # aiokafka is untyped
    """aiokafka's metadata request, never asking the broker to create the topics it names."""

    def __init__(self, topics: list[str] | None = None, allow_auto_topic_creation: bool | None = None) -> None:
        super().__init__(topics, allow_auto_topic_creation=False)


def never_auto_create() -> None:
    """Make every aiokafka client of this process ask for metadata without auto-creating topics (idempotent).

    aiokafka offers no option for it (its requests ask for auto-creation): its modules' request class
    is replaced, as the bus wraps other internals of aiokafka.
    """
    aiokafka.client.MetadataRequest = _NoAutoCreate
    aiokafka.admin.client.MetadataRequest = _NoAutoCreate


@dataclasses.dataclass(frozen=True, slots=True)
class Layout:
    """The topics a process uses (Kafka names, with the configs they are created with) and their count."""

    topics: Mapping[str, Mapping[str, str]]
    partitions: int
    replication: int = 1

    def problem(self, counts: Mapping[str, int | None]) -> str:
        """Why ``counts`` (partitions per topic, None for a missing one) is not this layout ("" if it is)."""
        for topic in sorted(self.topics):
            count = counts.get(topic)
            if count is not None and count != self.partitions:
                return (
                    f"topic {topic} has {count} partitions and this process expects {self.partitions}: "
                    f"run every process with --kafka-partitions {count} (SNIPER_KAFKA_PARTITIONS), or delete "
                    f"the topics so that they are created again with {self.partitions}"
                )
        return ""

    def missing(self, counts: Mapping[str, int | None]) -> list[str]:
        return sorted(t for t in self.topics if counts.get(t) is None)


def layout_problem(layout: Layout, metadata: Any) -> TopicLayoutError | None:
    """What is wrong with ``layout`` in a broker's cluster ``metadata`` (aiokafka's ``ClusterMetadata``)."""
    counts = {topic: _count(metadata.partitions_for_topic(topic)) for topic in layout.topics}
    gone = layout.missing(counts)
    if gone:
        return TopicLost(
            f"topic {', '.join(gone)} is gone from the broker (deleted, or the broker lost its storage); "
            "this process stops so that a supervisor restarts it on what the broker holds"
        )
    problem = layout.problem(counts)
    return TopicLayoutError(problem) if problem else None


def _count(partitions: Any) -> int | None:
    return None if partitions is None else len(partitions)


async def ensure_layout(admin: AIOKafkaAdminClient, layout: Layout) -> list[str]:
    """Create the missing topics of ``layout`` with its count and check every one; returns those created.

    Raises :class:`TopicLayoutError` if a topic has another partition count or cannot be created.
    """
    existing = set(await admin.list_topics())
    missing = [
        NewTopic(
            name=topic,
            num_partitions=layout.partitions,
            replication_factor=layout.replication,
            topic_configs=dict(configs),
        )
        for topic, configs in sorted(layout.topics.items())
        if topic not in existing
    ]
    if missing:
        response = await admin.create_topics(missing)
        for entry in response.topic_errors:
            topic, code = entry[0], entry[1]
            if code not in (0, _TOPIC_ALREADY_EXISTS):
                message = entry[2] if len(entry) > 2 else ""
                raise TopicLayoutError(f"cannot create topic {topic}: error {code} {message or ''}".rstrip())
    counts = await _partition_counts(admin, sorted(layout.topics))
    problem = layout.problem(counts)
    if problem:
        raise TopicLayoutError(problem)
    gone = layout.missing(counts)
    if gone:
        raise TopicLayoutError(f"topic {', '.join(gone)} was created but the broker does not list it")
    return [t.name for t in missing]


async def _partition_counts(admin: AIOKafkaAdminClient, topics: list[str]) -> dict[str, int | None]:
    """Partitions per topic as the broker describes them (None: unknown to it), waiting briefly for new ones."""
    counts: dict[str, int | None] = {}
    for attempt in range(_DESCRIBE_ATTEMPTS):
        described = await admin.describe_topics(topics)
        counts = {entry["topic"]: len(entry["partitions"]) if entry["error_code"] == 0 else None for entry in described}
        if all(counts.get(t) is not None for t in topics) or attempt == _DESCRIBE_ATTEMPTS - 1:
            break
        await asyncio.sleep(_DESCRIBE_PAUSE)  # a retry pause while the broker's metadata catches up
    return counts


never_auto_create()
