"""docs/asyncapi.yaml: an AsyncAPI 3.0.0 document whose channels are exactly the topics the code uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import yaml

from sniper.messages.deadletter import DeadLetter
from sniper.messages.wire import CONTENT_TYPE, MEDIA_TYPES
from sniper.transport.bus import TOPICS
from sniper.transport.kafka import KafkaSettings

DOCS = Path(__file__).resolve().parent.parent / "docs"
DOCUMENT: dict[str, Any] = yaml.safe_load((DOCS / "asyncapi.yaml").read_text())


def resolve(ref: str) -> Any:
    """A local ``#/a/b`` reference inside the document."""
    assert ref.startswith("#/"), ref
    node: Any = DOCUMENT
    for part in ref[2:].split("/"):
        assert part in node, f"{ref}: no {part!r}"
        node = node[part]
    return node


def test_it_is_an_asyncapi_3_document() -> None:
    assert DOCUMENT["asyncapi"] == "3.0.0"
    assert DOCUMENT["info"]["title"] and DOCUMENT["info"]["version"]
    for name, server in DOCUMENT["servers"].items():
        assert server["protocol"] == "kafka" and server["host"], name
    for name, operation in DOCUMENT["operations"].items():
        assert operation["action"] in ("send", "receive"), name
        channel = resolve(operation["channel"]["$ref"])
        for message in operation.get("messages", []):
            assert message["$ref"].startswith(operation["channel"]["$ref"] + "/messages/"), name
            assert resolve(message["$ref"]) in channel["messages"].values()


def test_its_channels_are_exactly_the_topics_the_code_uses() -> None:
    channels = DOCUMENT["channels"]
    prefix = DOCUMENT["components"]["parameters"]["prefix"]["default"]
    assert prefix == KafkaSettings(bootstrap="x").prefix
    addresses = {channel["address"] for channel in channels.values()}
    assert addresses == {"{prefix}" + topic for topic in TOPICS}
    for name, channel in channels.items():
        assert channel["address"] == "{prefix}" + name
        binding = channel.get("bindings", {}).get("kafka")
        if binding is not None:
            assert binding["topic"] == KafkaSettings(bootstrap="x").topic(name)
        for message in channel["messages"].values():
            resolve(message["$ref"])


def test_messages_name_their_schemas_headers_and_keys() -> None:
    messages = DOCUMENT["components"]["messages"]
    assert messages["feedEvent"]["payload"]["$ref"] == "schema/feed.schema.json"
    assert messages["decision"]["payload"]["$ref"] == "schema/decisions.schema.json"
    for message in messages.values():
        payload = message["payload"].get("$ref")
        if payload is not None:
            assert (DOCS / payload).is_file(), payload
    trait = DOCUMENT["components"]["messageTraits"]["keyedByPartition"]
    assert set(trait["headers"]["properties"][CONTENT_TYPE]["enum"]) == set(MEDIA_TYPES.values())
    assert resolve(trait["bindings"]["kafka"]["key"]["$ref"])["type"] == "string"
    letter = messages["deadLetter"]["payload"]
    assert set(letter["properties"]) == {field.name for field in msgspec.structs.fields(DeadLetter)}
