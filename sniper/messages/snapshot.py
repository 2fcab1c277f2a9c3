"""Snapshots: a cache's whole partition state, published on the compacted ``snapshots`` topic.

A :class:`Snapshot` is keyed by the scheduler partition; compaction keeps the latest one per key. It
names the owner's ``epoch``, the last decision it covers (``decision_seq``) and the Kafka offset of the
last feed record whose effects it holds (``feed_offset``; -1 when none), so a new owner loads it and
replays only what came after. The state itself travels in ``body``: a :class:`SnapshotBody` encoded
with msgpack and compressed with zlib (``codec``).

A body larger than one record may carry is split (:func:`split`) into :class:`SnapshotChunk` records
published before their header on the same Kafka partition, under keys of their own
(:func:`chunk_key`: the partition name, a NUL, the parity of the snapshot's ``serial`` and the chunk's
index), so compaction keeps the chunks of the latest snapshot and of the one before it: a header is
never left without its chunks by a newer snapshot whose header was not written. :func:`latest`
reassembles the newest snapshot whose chunks are all there.

New fields must come with defaults (msgspec schema evolution).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import msgspec

from sniper.messages.protocol import ChangeMsg


class SnapshotBody(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    changes: list[ChangeMsg]  # core.cache.state_changes(state): rebuilds the state from nothing
    seen: list[str] = []  # event ids remembered for de-duplication, oldest first
    # Allocations already told to die, for snapshots whose ``changes`` do not kill them themselves (those
    # changes end with the ``victims_killed`` of every such allocation; a restored cache never kills twice).
    killed: list[str] = []
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
    serial: int = 0  # the owner's count of snapshots in its epoch: (epoch, serial) names one snapshot
    # The decisions topic from here on holds every decision after ``decision_seq`` (-1: read it all),
    # and the highest epoch among this partition's decisions before that offset.
    decisions_offset: int = -1
    decisions_epoch: int = 0
    chunks: int = 0  # 0: ``body`` holds the state; else it is in that many SnapshotChunk records


class SnapshotChunk(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    """One piece of a snapshot's ``body`` too large for one record."""

    partition: str
    epoch: int
    serial: int
    index: int  # 0 .. chunks - 1
    data: bytes


_body_encoder = msgspec.msgpack.Encoder()
_body_decoder = msgspec.msgpack.Decoder(SnapshotBody)
snapshot_msgpack = msgspec.msgpack.Decoder(Snapshot)
_chunk_msgpack = msgspec.msgpack.Decoder(SnapshotChunk)
CHUNK_SEPARATOR = "\x00"  # in a chunk's key, after the partition name


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


def chunk_key(partition: str, serial: int, index: int) -> str:
    """The Kafka key of chunk ``index`` of ``partition``'s snapshot number ``serial``."""
    return f"{partition}{CHUNK_SEPARATOR}{serial % 2}{CHUNK_SEPARATOR}{index}"


def is_chunk_key(key: str) -> bool:
    """Whether a snapshots-topic key names a chunk rather than a partition's snapshot."""
    return CHUNK_SEPARATOR in key


def split(snapshot: Snapshot, limit: int) -> tuple[Snapshot, list[SnapshotChunk]]:
    """``snapshot`` as a header and the chunks of its body, each at most ``limit`` bytes of body
    (no chunks when the body fits in ``limit``: the header then holds it)."""
    body = snapshot.body
    if len(body) <= limit:
        return msgspec.structs.replace(snapshot, chunks=0), []
    pieces = [body[i : i + limit] for i in range(0, len(body), limit)]
    header = msgspec.structs.replace(snapshot, body=b"", chunks=len(pieces))
    chunks = [
        SnapshotChunk(partition=snapshot.partition, epoch=snapshot.epoch, serial=snapshot.serial, index=i, data=piece)
        for i, piece in enumerate(pieces)
    ]
    return header, chunks


def latest(records: Iterable[tuple[bytes | None, bytes | None]], partition: str) -> tuple[Snapshot | None, list[str]]:
    """The newest snapshot of ``partition`` among the snapshots topic's ``(key, value)`` records (in
    offset order) whose body is whole, and what was wrong with newer ones (unreadable, chunks missing)."""
    headers: list[Snapshot] = []
    pieces: dict[tuple[int, int, int], bytes] = {}  # (epoch, serial, index) -> data
    problems: list[str] = []
    prefix = partition + CHUNK_SEPARATOR
    for raw_key, value in records:
        key = (raw_key or b"").decode(errors="replace")
        try:
            if key == partition:
                header = snapshot_msgpack.decode(value or b"")
                if header.partition == partition:
                    headers.append(header)
            elif key.startswith(prefix):
                chunk = _chunk_msgpack.decode(value or b"")
                if chunk.partition == partition:
                    pieces[(chunk.epoch, chunk.serial, chunk.index)] = chunk.data
        except msgspec.DecodeError as err:
            problems.append(f"unreadable snapshot record of {partition}: {err}")
    for header in reversed(headers):
        if header.chunks == 0:
            return header, problems
        parts = [pieces.get((header.epoch, header.serial, i)) for i in range(header.chunks)]
        if all(part is not None for part in parts):
            return msgspec.structs.replace(header, body=b"".join(p for p in parts if p is not None)), problems
        missing = sum(part is None for part in parts)
        problems.append(
            f"snapshot of {partition} (epoch {header.epoch}, serial {header.serial}) lacks {missing} of its"
            f" {header.chunks} chunks; an older one is used"
        )
    return None, problems
