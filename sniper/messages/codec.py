"""Encoders and decoders, built once, and reading JSON Lines traces.

The wire uses these (msgpack and JSON, :mod:`sniper.messages.wire` says which a record holds); traces are
JSON Lines. Reading a trace never raises on a bad line: each malformed or invalid line is reported with
its line number and the reason and skipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from sniper.messages.decisions import DecisionMsg
from sniper.messages.feed import Feed
from sniper.messages.protocol import ProposalStream, ViewStream

T = TypeVar("T")

json_encoder = msgspec.json.Encoder()
msgpack_encoder = msgspec.msgpack.Encoder()

feed_json = msgspec.json.Decoder(Feed)
feed_msgpack = msgspec.msgpack.Decoder(Feed)
decision_json = msgspec.json.Decoder(DecisionMsg)
decision_msgpack = msgspec.msgpack.Decoder(DecisionMsg)
view_msgpack = msgspec.msgpack.Decoder(ViewStream)
proposal_msgpack = msgspec.msgpack.Decoder(ProposalStream)


@dataclasses.dataclass(frozen=True, slots=True)
class BadInput:
    """One line or record that could not be decoded, and why."""

    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


def decode_feed_lines(lines: Iterable[str | bytes], source: str = "trace") -> Iterator[Feed | BadInput]:
    """Decode JSON Lines feed events; blank lines and ``#`` comments are skipped."""
    for number, line in enumerate(lines, start=1):
        text = line.strip() if isinstance(line, bytes) else line.strip().encode()
        if not text or text.startswith(b"#"):
            continue
        try:
            yield feed_json.decode(text)
        except (msgspec.DecodeError, UnicodeDecodeError) as err:  # a string field that is not UTF-8
            yield BadInput(f"{source}:{number}", str(err))
        except RecursionError:  # msgspec decodes nested values recursively
            yield BadInput(f"{source}:{number}", "nested too deeply to decode")


def read_trace(path: str | Path) -> tuple[list[Feed], list[BadInput]]:
    events: list[Feed] = []
    bad: list[BadInput] = []
    with open(path, "rb") as handle:
        for item in decode_feed_lines(handle, str(path)):
            if isinstance(item, BadInput):
                bad.append(item)
            else:
                events.append(item)
    return events, bad


def encode_json_line(msg: Any) -> bytes:
    return json_encoder.encode(msg) + b"\n"
