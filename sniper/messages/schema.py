"""The JSON Schemas of the wire, generated from the msgspec structs, and the rules they may evolve by.

What it owns: :func:`schema` (``msgspec.json.schema`` of every feed event or every decision, as
``sniper schema`` prints it and ``docs/schema/`` holds it) and :func:`breaking_changes`, which compares a
published schema with a newer one. Invariant (docs/feed.md#compatibility): an evolution keeps every
event or decision type and every field with the same schema, and adds only fields with a default, so
producers and consumers written against the published schema keep working.
"""

from __future__ import annotations

import json
from typing import Any, Literal, get_args

import msgspec

from sniper.messages.decisions import DecisionMsg
from sniper.messages.feed import Feed

SchemaKind = Literal["feed", "decisions"]
SCHEMA_KINDS: tuple[SchemaKind, ...] = get_args(SchemaKind)
_TYPES: dict[SchemaKind, Any] = {"feed": Feed, "decisions": DecisionMsg}
_TITLES: dict[SchemaKind, str] = {
    "feed": "Sniper feed event (one Kafka record on the feed topic, or one trace line)",
    "decisions": "Sniper decision (one Kafka record on the decisions topic)",
}
_UNCHECKED = ("default", "description", "title")  # what a field's schema may change without breaking anyone


def schema(kind: SchemaKind) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of every message of ``kind``: a union discriminated by ``type``."""
    generated = msgspec.json.schema(_TYPES[kind])
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": _TITLES[kind], **generated}


def schema_text(kind: SchemaKind) -> str:
    """:func:`schema` as the text ``docs/schema/KIND.schema.json`` holds (stable key order, indented)."""
    return json.dumps(schema(kind), indent=2, sort_keys=True) + "\n"


def _shape(field: Any) -> Any:
    """A field's schema without what may change freely (its default, description and title)."""
    return {k: v for k, v in field.items() if k not in _UNCHECKED} if isinstance(field, dict) else field


def breaking_changes(published: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What in ``current`` breaks a reader or writer of ``published`` (empty: a compatible evolution).

    Breaking: a message type removed, a field removed, a field whose schema changed (its type, range
    or values), a field that became required or a new required field. Adding message types and
    fields with defaults is compatible.
    """
    problems: list[str] = []
    old_defs: dict[str, Any] = published.get("$defs", {})
    new_defs: dict[str, Any] = current.get("$defs", {})
    for name, old in sorted(old_defs.items()):
        new = new_defs.get(name)
        if new is None:
            problems.append(f"{name}: removed")
            continue
        old_fields: dict[str, Any] = old.get("properties", {})
        new_fields: dict[str, Any] = new.get("properties", {})
        for field, spec in old_fields.items():
            if field not in new_fields:
                problems.append(f"{name}.{field}: removed")
            elif _shape(spec) != _shape(new_fields[field]):
                problems.append(
                    f"{name}.{field}: schema changed from {json.dumps(_shape(spec), sort_keys=True)} "
                    f"to {json.dumps(_shape(new_fields[field]), sort_keys=True)}"
                )
        for field in sorted(set(new.get("required", ())) - set(old.get("required", ()))):
            what = "new field" if field not in old_fields else "field"
            problems.append(f"{name}.{field}: {what} required (a new field needs a default)")
    return problems
