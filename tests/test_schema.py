"""The wire's JSON Schemas: the checked-in ones match the structs, and evolution keeps the published contract."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

from sniper.cli import app
from sniper.messages.schema import SCHEMA_KINDS, SchemaKind, breaking_changes, schema, schema_text

DOCS = Path(__file__).resolve().parent.parent / "docs" / "schema"


@pytest.mark.parametrize("kind", SCHEMA_KINDS)
def test_the_checked_in_schema_is_the_structs_schema(kind: SchemaKind) -> None:
    published = json.loads((DOCS / f"{kind}.schema.json").read_text())
    problems = breaking_changes(published, schema(kind))
    assert not problems, f"an incompatible change to the {kind} structs (docs/feed.md#compatibility): {problems}"
    assert (DOCS / f"{kind}.schema.json").read_text() == schema_text(kind), (
        f"docs/schema/{kind}.schema.json is stale: `sniper schema {kind} > docs/schema/{kind}.schema.json`"
    )


@pytest.mark.parametrize("kind", SCHEMA_KINDS)
def test_sniper_schema_prints_the_checked_in_schema(kind: SchemaKind) -> None:
    result = CliRunner().invoke(app, ["schema", kind])
    assert result.exit_code == 0, result.output
    assert result.stdout == (DOCS / f"{kind}.schema.json").read_text()


def test_every_event_type_and_field_is_in_the_feed_schema() -> None:
    defs = schema("feed")["$defs"]
    mapping = schema("feed")["discriminator"]["mapping"]
    assert mapping["ask_added"] == "#/$defs/AskAdded"
    ask = defs["AskAdded"]
    assert {"app", "ask", "resource", "gang_min", "partition", "t", "id"} <= ask["properties"].keys()
    assert set(ask["required"]) == {"type", "app", "ask", "resource"}  # the rest have defaults


# Two versions of one event, as msgspec would publish them: evolution is judged on generated schemas.
class V1(msgspec.Struct, tag="node_added", tag_field="type", kw_only=True):
    node: str
    capacity: dict[str, int]
    labels: dict[str, str] = {}


class AddsDefaulted(msgspec.Struct, tag="node_added", tag_field="type", kw_only=True):
    node: str
    capacity: dict[str, int]
    labels: dict[str, str] = {}
    zone: str = ""


class RemovesField(msgspec.Struct, tag="node_added", tag_field="type", kw_only=True):
    node: str
    capacity: dict[str, int]


class ChangesType(msgspec.Struct, tag="node_added", tag_field="type", kw_only=True):
    node: str
    capacity: dict[str, float]
    labels: dict[str, str] = {}


class AddsRequired(msgspec.Struct, tag="node_added", tag_field="type", kw_only=True):
    node: str
    capacity: dict[str, int]
    labels: dict[str, str] = {}
    zone: str


class Other(msgspec.Struct, tag="node_removed", tag_field="type", kw_only=True):
    node: str


def published(*types: Any) -> dict[str, Any]:
    """The schema of a union of ``types`` (renamed to ``NodeAdded``/``NodeRemoved`` as the feed names them)."""
    text = json.dumps(msgspec.json.schema(types[0] if len(types) == 1 else types[0] | types[1]))
    for name in ("V1", "AddsDefaulted", "RemovesField", "ChangesType", "AddsRequired"):
        text = text.replace(f'"{name}"', '"NodeAdded"').replace(f"/{name}", "/NodeAdded")
    return json.loads(text.replace('"Other"', '"NodeRemoved"').replace("/Other", "/NodeRemoved"))  # type: ignore[no-any-return]


def test_a_new_field_with_a_default_and_a_new_event_type_are_compatible() -> None:
    assert breaking_changes(published(V1), published(AddsDefaulted)) == []
    assert breaking_changes(published(V1), published(V1, Other)) == []


def test_a_removed_field_a_changed_type_or_a_new_required_field_breaks_the_contract() -> None:
    assert breaking_changes(published(V1), published(RemovesField)) == ["NodeAdded.labels: removed"]
    [changed] = breaking_changes(published(V1), published(ChangesType))
    assert changed.startswith("NodeAdded.capacity: schema changed") and '"number"' in changed
    assert breaking_changes(published(V1), published(AddsRequired)) == [
        "NodeAdded.zone: new field required (a new field needs a default)"
    ]
    assert breaking_changes(published(V1, Other), published(V1)) == ["NodeRemoved: removed"]


def test_a_field_of_the_real_feed_removed_is_caught() -> None:
    current = schema("feed")
    edited = json.loads(json.dumps(current))
    del edited["$defs"]["AskAdded"]["properties"]["gang_min"]
    edited["$defs"]["AppAdded"]["properties"]["priority"] = {"type": "string"}
    assert breaking_changes(current, edited) == [
        'AppAdded.priority: schema changed from {"maximum": 2147483647, "minimum": -2147483648, "type": "integer"} '
        'to {"type": "string"}',
        "AskAdded.gang_min: removed",
    ]
