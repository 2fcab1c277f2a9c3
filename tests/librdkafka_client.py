"""A librdkafka client (confluent-kafka), run by the tests as a child process: it produces records read
from standard input, or reads records until it has enough, and prints what happened as one JSON
document. It leaves with ``os._exit`` once its output is flushed, so librdkafka's own threads can never
outlive a test nor hold the test process's event loop at its close.

    python tests/librdkafka_client.py produce BOOTSTRAP TOPIC [PARTITIONER] < [[key, value], ...]
    python tests/librdkafka_client.py consume BOOTSTRAP PARTITIONS COUNT TOPIC [TOPIC ...]
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from typing import Any

import confluent_kafka

BOUND = 40.0  # seconds a consumer polls at most before it prints what it has (inside the tests' 60 s bounds)


def produce(bootstrap: str, topic: str, partitioner: str | None) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap}
    if partitioner is not None:
        config["partitioner"] = partitioner
    producer = confluent_kafka.Producer(config)
    delivered: list[int] = []
    errors: list[str] = []

    def report(err: Any, message: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append(message.partition())

    for key, value in json.load(sys.stdin):
        producer.produce(topic, value=base64.b64decode(value), key=key.encode(), on_delivery=report)
    left = producer.flush(30)
    return {"partitions": delivered, "left": left, "errors": errors}


def consume(bootstrap: str, partitions: int, count: int, topics: list[str]) -> list[dict[str, Any]]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    consumer.assign(
        [
            confluent_kafka.TopicPartition(t, p, confluent_kafka.OFFSET_BEGINNING)
            for t in topics
            for p in range(partitions)
        ]
    )
    seen: list[dict[str, Any]] = []
    give_up = time.monotonic() + BOUND
    while len(seen) < count and time.monotonic() < give_up:
        message = consumer.poll(0.2)
        if message is None:
            continue
        error = message.error()
        if error is not None:
            if error.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                continue
            raise SystemExit(f"consumer error: {error}")
        seen.append(
            {
                "topic": message.topic(),
                "partition": message.partition(),
                "key": message.key().decode(),
                "value": base64.b64encode(message.value()).decode(),
                "headers": [[k, v.decode()] for k, v in message.headers() or []],
            }
        )
    consumer.close()
    return seen


def main(argv: list[str]) -> None:
    if argv[0] == "produce":
        out: Any = produce(argv[1], argv[2], argv[3] if len(argv) > 3 else None)
    else:
        out = consume(argv[1], int(argv[2]), int(argv[3]), argv[4:])
    sys.stdout.write(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except BaseException as error:
        sys.stderr.write(f"{error!r}\n")
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)
