"""Dead letters: input that could not be decoded, validated or applied, with the reason
(architecture: Transports).

A transport that receives a record it cannot turn into a message publishes one :class:`DeadLetter` on
the ``deadletter`` topic and carries on; so does a core for a feed record it decoded but will not apply
(on the wrong Kafka partition, beyond its ``--max-partitions``, for a partition it cannot serve, stamped
too far ahead of the partition's clock). Either way ``payload`` is the record's value verbatim, the bytes
its producer wrote (JSON or msgpack, never re-encoded), so an operator can inspect or replay them;
``key`` is the record's key, ``topic`` the logical topic name (without any prefix), and
``partition``/``offset`` locate the record in the transport (-1 when it has no such notion).
"""

from __future__ import annotations

import msgspec


class DeadLetter(msgspec.Struct, kw_only=True, frozen=True, gc=False):
    topic: str
    partition: int
    offset: int
    key: str
    reason: str
    payload: bytes
    t: float = 0.0  # wall-clock seconds (time.time()) when the record was dead-lettered


deadletter_msgpack = msgspec.msgpack.Decoder(DeadLetter)
