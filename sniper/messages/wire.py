"""The formats of a Kafka record's value: msgpack and JSON, and how a reader tells which one it holds.

What it owns: the ``content-type`` header and its two values, :class:`WireDecoder` (one message type,
either format) and :func:`encode`. Invariants: a record with a ``content-type`` header is decoded in the
format the header names, whatever its bytes look like; one without it is JSON when its first
non-blank byte is ``{`` (a JSON object, the same text as a trace line) and msgpack when it starts with
a msgpack map (msgpack never starts a map with ``{``, so the two cannot be confused). Anything else is
refused with a reason that names what the record is, never the other format's complaint about it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Generic, Literal, TypeVar, get_args

import msgspec

from sniper.messages.codec import json_encoder, msgpack_encoder

T = TypeVar("T")

WireFormat = Literal["msgpack", "json"]
WIRE_FORMATS: tuple[WireFormat, ...] = get_args(WireFormat)
CONTENT_TYPE = "content-type"  # the record header naming the value's format
MEDIA_TYPES: dict[WireFormat, str] = {"msgpack": "application/msgpack", "json": "application/json"}
_FORMAT_OF_MEDIA_TYPE: dict[str, WireFormat] = {media: fmt for fmt, media in MEDIA_TYPES.items()}
HEADERS: dict[WireFormat, list[tuple[str, bytes]]] = {
    fmt: [(CONTENT_TYPE, media.encode())] for fmt, media in MEDIA_TYPES.items()
}

# First bytes of a msgpack map: fixmap (0x80-0x8f), map 16 (0xde), map 32 (0xdf).
_MSGPACK_MAP = frozenset([*range(0x80, 0x90), 0xDE, 0xDF])
_BLANK = b" \t\r\n"
_JSON_KINDS = {ord("["): "a JSON array", ord('"'): "a JSON string", ord("t"): "a JSON true", ord("f"): "a JSON false"}
_JSON_KINDS |= {ord("n"): "a JSON null", ord("-"): "a JSON number", **{c: "a JSON number" for c in b"0123456789"}}


def content_type(headers: Iterable[tuple[str, bytes | None]] | None) -> str | None:
    """The value of the record's ``content-type`` header (the last one if repeated), or None."""
    found: str | None = None
    for name, value in headers or ():
        if name.lower() == CONTENT_TYPE:
            found = (value or b"").decode(errors="replace")
    return found


def format_of_media_type(media_type: str) -> WireFormat:
    """The format a ``content-type`` value names (parameters such as ``; charset=utf-8`` are ignored)."""
    fmt = _FORMAT_OF_MEDIA_TYPE.get(media_type)  # spelled as this bus writes it: nothing to parse
    if fmt is not None:
        return fmt
    bare = media_type.split(";", 1)[0].strip().lower()
    fmt = _FORMAT_OF_MEDIA_TYPE.get(bare)
    if fmt is None:
        known = " or ".join(MEDIA_TYPES.values())
        raise msgspec.DecodeError(f"unsupported content-type {media_type!r} (expected {known})")
    return fmt


def sniff(value: bytes) -> WireFormat:
    """The format of a value without a ``content-type`` header, or a DecodeError saying what it is."""
    first = value[0] if value else -1
    if first in _MSGPACK_MAP:
        return "msgpack"
    if first in _BLANK:
        stripped = value.lstrip(_BLANK)
        first = stripped[0] if stripped else -1
    if first == ord("{"):
        return "json"
    if first == -1:
        raise msgspec.DecodeError("the record is empty or blank: neither a JSON object nor a msgpack map")
    kind = _JSON_KINDS.get(first)
    what = f"it starts with {bytes([first])!r}" + (f", {kind}?" if kind else "")
    raise msgspec.DecodeError(f"neither a JSON object nor a msgpack map ({what})")


class WireDecoder(Generic[T]):
    """Decodes records of one message type in either format (without a ``json`` decoder: msgpack only)."""

    def __init__(self, msgpack: msgspec.msgpack.Decoder[T], json: msgspec.json.Decoder[T] | None = None) -> None:
        self.msgpack = msgpack
        self.json = json

    def decode(self, value: bytes, media_type: str | None = None) -> T:
        """The message in ``value``; raises ``msgspec.DecodeError`` (or its ``ValidationError``) with the reason."""
        if self.json is None:
            if media_type is not None and format_of_media_type(media_type) != "msgpack":
                raise msgspec.DecodeError(f"content-type {media_type!r}: this topic carries msgpack only")
            return self.msgpack.decode(value)
        if media_type is not None:
            fmt = format_of_media_type(media_type)
        elif value[:1] and value[0] in _MSGPACK_MAP:  # the common case first, without a second look
            return self.msgpack.decode(value)
        else:
            fmt = sniff(value)
        return self.json.decode(value) if fmt == "json" else self.msgpack.decode(value)


def encode(message: Any, fmt: WireFormat) -> bytes:
    """``message`` as a record value in ``fmt``."""
    return json_encoder.encode(message) if fmt == "json" else msgpack_encoder.encode(message)
