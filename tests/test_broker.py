"""The embedded broker: it starts, answers Kafka metadata requests, stops, and releases its port."""

from __future__ import annotations

import base64
import json
import os
import socket
import sys

import anyio
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from sniper.transport.broker import (
    BOOTSTRAP_ENV,
    BrokerStartError,
    EmbeddedBroker,
    find_tansu,
    probe,
    resolve_bootstrap,
)

pytestmark = pytest.mark.kafka


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


async def test_broker_starts_answers_metadata_and_stops() -> None:
    broker = EmbeddedBroker()
    with anyio.fail_after(30):
        async with broker:
            port = broker.port
            assert broker.bootstrap == f"127.0.0.1:{port}"
            assert broker.running and broker.startup_seconds is not None
            admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
            await admin.start()
            try:
                cluster = await admin.describe_cluster()
            finally:
                await admin.close()
            assert [(b["host"], b["port"]) for b in cluster["brokers"]] == [("127.0.0.1", port)]
    assert not broker.running
    assert not probe("127.0.0.1", port)
    assert port_is_free(port)
    with pytest.raises(RuntimeError):
        _ = broker.bootstrap


def test_sync_context_manager_and_restart() -> None:
    broker = EmbeddedBroker()
    with broker:
        first = broker.port
        assert probe("127.0.0.1", first)
    assert port_is_free(first)
    with broker:  # the same object starts again, on a fresh port
        assert probe("127.0.0.1", broker.port)
    broker.stop()  # idempotent


def test_start_fails_clearly_when_the_port_is_taken() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        broker = EmbeddedBroker(port=port, start_timeout=5)
        with pytest.raises(BrokerStartError, match=str(port)):
            broker.start()
        assert not broker.running and broker.pid is None


def test_find_tansu_and_resolve_bootstrap(monkeypatch: pytest.MonkeyPatch) -> None:
    assert find_tansu().name == "tansu"
    monkeypatch.delenv(BOOTSTRAP_ENV, raising=False)
    assert resolve_bootstrap(None) is None
    assert resolve_bootstrap(" k:1 ") == "k:1"
    monkeypatch.setenv(BOOTSTRAP_ENV, "env:2")
    assert resolve_bootstrap(None) == "env:2"
    assert resolve_bootstrap("k:1") == "k:1"


async def test_sniper_broker_creates_the_topics_so_a_librdkafka_producer_cannot_create_them_with_other_counts() -> None:
    """A librdkafka producer auto-creates a missing topic with the broker's default partition count; on
    the bundled broker that count is not Sniper's. ``sniper broker`` creates Sniper's topics before it
    prints its address, so the first librdkafka record lands in a feed of 8 partitions and a core's
    layout check passes."""
    from sniper.transport.kafka import KafkaBus, KafkaSettings
    from tests.librdkafka_support import librdkafka

    command = [sys.executable, "-m", "sniper", "broker", "--kafka-partitions", "8"]
    with anyio.fail_after(60):
        async with await anyio.open_process(command, env={**os.environ, BOOTSTRAP_ENV: ""}) as process:
            try:
                assert process.stdout is not None
                first = b""
                async for chunk in process.stdout:  # the address line, printed once the topics exist
                    first += chunk
                    if b"\n" in first:
                        break
                bootstrap = first.split(b"\n")[0].decode().strip()
                body = json.dumps([[f"p{i}", base64.b64encode(b"{}").decode()] for i in range(20)]).encode()
                out = await librdkafka("produce", bootstrap, "sniper.feed", stdin=body)
                assert out["left"] == 0 and not out["errors"], out
                assert max(out["partitions"]) < 8 and len(set(out["partitions"])) > 4
                async with KafkaBus(KafkaSettings(bootstrap=bootstrap, partitions=8)) as bus:
                    await bus.ensure_topics()  # raises TopicLayoutError on another partition count
            finally:
                process.terminate()
    assert process.returncode is not None
