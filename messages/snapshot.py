"""Snapshots: a cache's whole partition state, published on the compacted ``snapshots`` topic.

A :class:`Snapshot` is keyed by the scheduler partition; compaction keeps the latest one per key. It
names the owner's ``epoch``, the last decision it covers (``decision_seq``) and the Kafka offset of the
last feed record whose effects it holds (``feed_offset``; -1 when none), so a new owner loads it and
replays only what came after. The state itself travels in ``body``: a :class:`SnapshotBody` encoded
with msgpack and compressed with zlib (``codec``), because a large partition's changes and its
remembered event ids compress well and must fit the broker's maximum message size.

New fields must come with defaults (msgspec schema evolution).
"""

from __future__ import annotations

import zlib

import msgspec

from messages.protocol import ChangeMsg


class SnapshotBody(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    changes: list[ChangeMsg]  # core.cache.state_changes(state): rebuilds the state from nothing
    seen: list[str] = []  # event ids remembered for de-duplication, oldest first
    killed: list[str] = []  # allocations already told to die (a restored cache must not kill them again)
    flaps: list[tuple[str, str, int, float]] = []  # flapping asks: (app, ask, withdrawals, last withdrawal t)


class Snapshot(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    partition: str
    epoch: int
    decision_seq: int
    feed_offset: int
    kafka_partition: int = -1
    view_seq: int = 0
    now: float = 0.0
    feed_time: float | None = None  # the latest ``t`` of a feed event the state accepted (None: none yet)
    counters: dict[str, int] = {}
    codec: str = "zlib"
    body: bytes = b""
    wall_time: float = 0.0  # time.time() of the owner when it took the snapshot (diagnostics only)


_body_encoder = msgspec.msgpack.Encoder()
_body_decoder = msgspec.msgpack.Decoder(SnapshotBody)
snapshot_msgpack = msgspec.msgpack.Decoder(Snapshot)


class SnapshotError(ValueError):
    """A snapshot that cannot be decoded."""


def encode_body(body: SnapshotBody) -> tuple[str, bytes]:
    return "zlib", zlib.compress(_body_encoder.encode(body), 3)


def decode_body(snapshot: Snapshot) -> SnapshotBody:
    try:
        if snapshot.codec == "zlib":
            raw = zlib.decompress(snapshot.body)
        elif snapshot.codec == "none":
            raw = snapshot.body
        else:
            raise SnapshotError(f"unknown snapshot codec {snapshot.codec!r}")
        return _body_decoder.decode(raw)
    except (zlib.error, msgspec.DecodeError) as err:
        raise SnapshotError(f"snapshot of {snapshot.partition} (epoch {snapshot.epoch}) is unreadable: {err}") from err
