"""librdkafka (confluent-kafka) as a test client: it runs in a child process (``tests/librdkafka_client.py``),
so its threads never share the test's event loop; records it produced or read come back as JSON."""

from __future__ import annotations

import base64
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import anyio

from sniper.transport.kafka import KafkaSettings

CLIENT = Path(__file__).with_name("librdkafka_client.py")


@dataclasses.dataclass(frozen=True)
class Record:
    """A record as librdkafka read it."""

    topic: str
    partition: int
    key: str
    value: bytes
    headers: list[tuple[str, bytes]]


async def librdkafka(*args: str, stdin: bytes = b"") -> Any:
    """Run the librdkafka client in a child process (it cannot hold this process's loop) and return
    what it printed."""
    done = await anyio.run_process([sys.executable, str(CLIENT), *args], input=stdin, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


async def produce(
    settings: KafkaSettings, topic: str, records: list[tuple[str, bytes]], partitioner: str = ""
) -> list[int]:
    """Produce ``(key, value)`` records with librdkafka and wait for their delivery; the partition of each."""
    body = json.dumps([[key, base64.b64encode(value).decode()] for key, value in records]).encode()
    args = ["produce", settings.bootstrap, topic, *([partitioner] if partitioner else [])]
    out = await librdkafka(*args, stdin=body)
    assert out["left"] == 0 and not out["errors"], out
    return list(out["partitions"])


async def consume(settings: KafkaSettings, topics: list[str], count: int) -> list[Record]:
    """Read ``topics`` from the beginning with librdkafka until ``count`` records came."""
    names = [settings.topic(t) for t in topics]
    out = await librdkafka("consume", settings.bootstrap, str(settings.partitions), str(count), *names)
    records = [
        Record(
            x["topic"],
            x["partition"],
            x["key"],
            base64.b64decode(x["value"]),
            [(k, v.encode()) for k, v in x["headers"]],
        )
        for x in out
    ]
    assert len(records) >= count, records
    return records
