"""The Kafka transport: :class:`KafkaBus`, the bus interface of ``sniper.transport.bus`` on aiokafka.

What it owns: one producer per bus, one consumer (in its own consumer group) per subscription, the
creation of the prefixed topics (as :mod:`sniper.transport.layout` says: only with the configured partition
count, checked), the msgpack wire format and the dead-letter path. Invariants:

- **Wire format**: one Kafka record per message; the record key is the scheduler partition (the
  ``key`` argument, UTF-8) so Kafka's key hashing keeps one key's messages in one Kafka partition, in
  publish order; the value is the message encoded with msgspec, msgpack except on ``decisions`` and
  ``feed`` when ``settings.decisions_format`` or ``feed_format`` is ``json``, and every record carries
  a ``content-type`` header naming its format (:mod:`sniper.messages.wire`). It is decoded with the topic's
  decoder (``feed`` -> ``Feed``, ``decisions`` -> ``DecisionMsg``, both in either format; ``view`` ->
  ``ViewStream``, ``proposals`` -> ``ProposalStream``, ``deadletter`` -> ``DeadLetter``, ``snapshots``
  -> any msgpack). A feed record whose key is not the partition its event names is bad (a reader of
  one key would miss it). Topic names are ``settings.prefix + name``.
- **Producer**: ``acks="all"``, never idempotent, never transactional (the bundled broker supports
  neither, and architecture: Transports forbids relying on them). :meth:`KafkaBus.publish` returns once the
  broker acknowledged the record; :meth:`KafkaBus.send_many` only hands records to the producer (a
  batch per Kafka partition where it can) and returns a future of their acknowledgement. Messages
  larger than ``max_message_bytes`` are refused before sending.
- **Subscriptions**: a subscription buffers at most ``capacity`` records (one more in a rare race with a
  rebalance): it pauses fetching while its inbox is full, so a slow reader applies backpressure
  instead of growing memory. A subscription with a linger (``linger_ms``) that finds its inbox empty
  when a fetch brings records goes on fetching for that long (or until the inbox is full) and hands
  over everything it took in at once, at the end. A receiver waiting on an empty inbox is woken by
  every fetch that leaves records there (also when it drained the inbox while a dead letter of that fetch
  was being published). Where it starts reading is fixed before it reports
  an assignment: with ``auto_offset_reset="latest"`` every record published after
  :meth:`KafkaSubscription.ready` returned is delivered. Records whose key differs from the wanted key
  are skipped. A record that is larger than ``max_message_bytes``, cannot be decoded, or fails the
  topic's validator (``validators``: a reason or None) is bad. What happens to it is the
  subscription's ``bad`` choice: ``dead_letter`` (the default) publishes it on the ``deadletter``
  topic with the reason and skips it; ``deliver`` hands the receiver
  the :class:`DeadLetter` instead of a message (the owner of the records writes it, once), and
  :meth:`KafkaSubscription.receive_record` hands it every record's value bytes as produced, for the
  dead letters it may write later (kept only until the record is received; the other choices keep
  none); ``skip`` only logs it (observers of a topic that another group owns). The consumer carries on
  either way (bad records on the deadletter topic itself are only logged, never re-dead-lettered; a
  dead letter that cannot be published after a few retries is logged instead).
- **Lease**: a group member may act for its partitions only while its membership is known to be
  current: until ``session_timeout_ms`` after the send of its last successful heartbeat (or its last
  assignment). :meth:`KafkaSubscription.leased` waits for that; a process paused longer than the
  session (SIGSTOP, a stalled loop) is deposed by the group meanwhile and must not publish on resume.
  :meth:`KafkaBus.fence` ties topics to a subscription's lease: records of those topics still in the
  producer's buffer when the lease has lapsed are held there, not sent, until a heartbeat renews it
  (sent then, they are sent while the membership is known current, as any record); they are failed
  instead (their senders see the error) when a rebalance begins while the lease is lapsed (the member
  may have been deposed and its partitions served elsewhere meanwhile) or once the subscription
  failed or closed. A lapse alone, a loop too busy to hear a heartbeat's answer in time, so loses no
  record and repeats none.
- **At-least-once**: offsets are committed manually, periodically, on revocation and on close, and
  only up to the first record that is not handled yet (a record is handled once acknowledged, skipped
  or dead-lettered). A record is never committed before it was handled; after a crash or a
  rebalance the records after the last commit are delivered again (handlers are idempotent).
- **Rebalancing**: the group assigns partitions stickily (aiokafka's sticky assignor, round robin for
  members that lack it): a partition stays with its member unless the balance needs it elsewhere. When a
  rebalance begins the subscription commits what was handled and calls the listener's
  ``on_rebalance``; once the new assignment is known it calls ``on_revoked`` with the partitions that
  went elsewhere, drops their buffered records (their new owner re-reads them), then ``on_assigned``
  with the new ones. A partition kept keeps its records and its place: the records the consumer fetches
  again from the committed offset are skipped. Only a member known current when the rebalance began
  (its lease held, in a generation) keeps partitions, and only into the very next generation: one
  deposed meanwhile, or a rebalance that took more than one generation, revokes them all (another
  member may have held them in between). Acknowledgements of records of a revoked partition are
  ignored. Closing a subscription reports its partitions as revoked.
- **A lost log is fatal**: at each assignment the subscription compares what the broker holds with
  what it read and committed before (kept across rebalances). A partition now empty that had records,
  or a group that lost offsets it had committed, means the broker lost its
  log (an in-memory broker restarted, a topic deleted): the subscription fails with :class:`LogLost`
  and its receivers get the error, so the process stops instead of serving state the log no longer has.
- **Shutdown** is bounded by ``close_timeout`` (aiokafka's ``stop()`` can hang on a dead broker) and
  shielded: a close runs to its end when its caller is cancelled, so members leave their groups and
  no connection stays open.

The consumer and committer run as asyncio tasks (aiokafka is asyncio-only) owned by the subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Literal, NamedTuple, Self, get_args

import anyio
import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.errors import KafkaConnectionError, KafkaError, UnknownTopicOrPartitionError
from aiokafka.helpers import create_ssl_context
from aiokafka.partitioner import murmur2
from aiokafka.protocol.group import LeaveGroupRequest
from aiokafka.protocol.produce import ProduceRequest

from sniper.messages.codec import (
    decision_json,
    decision_msgpack,
    feed_json,
    feed_msgpack,
    msgpack_encoder,
    proposal_msgpack,
    view_msgpack,
)
from sniper.messages.deadletter import DeadLetter, deadletter_msgpack
from sniper.messages.wire import HEADERS, WireDecoder, WireFormat, content_type, encode
from sniper.transport.broker import BOOTSTRAP_ENV, resolve_bootstrap
from sniper.transport.bus import DEADLETTER, DECISIONS, FEED, PROPOSALS, SNAPSHOTS, VIEW, Bus, Subscription
from sniper.transport.handshake import security_failure
from sniper.transport.kafka_batch import hand_over, landed
from sniper.transport.layout import Layout, TopicLayoutError, ensure_layout, layout_problem

log = logging.getLogger(__name__)

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
OffsetReset = Literal["earliest", "latest"]
BadRecords = Literal["dead_letter", "deliver", "skip"]
Validator = Callable[[Any], str | None]  # why a decoded message is invalid, or None

ENV_PREFIX = "SNIPER_KAFKA_"
_DEADLETTER_MARGIN = 4096  # room for the dead-letter envelope around a payload
_DEADLETTER_RETRIES = (0.2, 1.0, 3.0)  # backoff after each failed attempt to publish a dead letter
_ABANDON_GRACE = 0.5  # seconds a cancelled shutdown step gets before it is abandoned
_PARTITION_MEMO = 65_536  # keys whose Kafka partition is remembered
_LOG_CHECK_TIMEOUT = 5.0  # seconds a check that the broker still holds a log may take
_PROBE_SECONDS = 2.0  # a failed TLS or SASL first contact is probed this long to name what failed
_CONNECT_RETRY = 0.5  # seconds between first-contact attempts while no broker answers


class KafkaTransportError(RuntimeError):
    """The Kafka transport failed (a subscription's consumer stopped on an error)."""


class KafkaConnectTimeout(KafkaTransportError):
    """No broker answered at the bootstrap address within ``KafkaSettings.connect_timeout``."""


class _BootstrapAttempts(logging.Filter):
    """Drops aiokafka's line for one failed bootstrap attempt (``Unable connect to "host:port"``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith('Unable connect to "')


class KafkaSecurityFailure(KafkaTransportError):
    """The first contact failed in its TLS handshake or SASL authentication (the message says which)."""


class MessageTooLarge(ValueError):
    """An encoded message exceeds ``KafkaSettings.max_message_bytes``."""


class LogLost(KafkaTransportError):
    """The broker no longer holds records or committed offsets this subscription saw (see the module)."""


class LeaseLapsed(KafkaError):  # type: ignore[misc]  # aiokafka is untyped
    """A record of a fenced topic was not sent: the group membership it depends on may be lost."""

    retriable = False  # aiokafka's sender fails the batch instead of sending it again


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class KafkaSettings:
    """How to reach the brokers and how the bus uses them (``from_env`` reads ``SNIPER_KAFKA_*``)."""

    bootstrap: str
    prefix: str = "sniper."
    partitions: int = 8
    replication: int = 1
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    max_message_bytes: int = 1 << 20
    client_id: str = "sniper"
    # How long the broker may hold a fetch that finds nothing new. Kafka answers as soon as a record
    # arrives whatever this is; the bundled broker looks again at a fraction of it, so a lower value buys
    # a few ms of latency there at the cost of an empty fetch (hundreds of µs of CPU) every few ms.
    fetch_max_wait_ms: int = 20
    # How long a process's feed subscription keeps fetching after a fetch brought records, before its
    # reader sees them (0: at once). Each hosted partition then runs one allocation chain (view delta,
    # cycle, proposal, commit) per linger instead of per fetch: less CPU per event, more latency.
    feed_linger_ms: int = 0
    auto_offset_reset: OffsetReset = "earliest"
    commit_interval: float = 1.0
    close_timeout: float = 10.0
    # The bundled broker holds a group join for about half the session timeout; 6 s is Kafka's minimum.
    session_timeout_ms: int = 6_000
    heartbeat_interval_ms: int = 1_000
    request_timeout_ms: int = 30_000
    connect_timeout: float = 30.0  # first contact (topics, producer): give up after this many seconds
    decisions_format: WireFormat = "msgpack"  # how decisions are encoded (either is read)
    feed_format: WireFormat = "msgpack"  # how feed events are encoded (either is read)

    def __post_init__(self) -> None:
        if not self.bootstrap.strip():
            raise ValueError("KafkaSettings.bootstrap is empty")
        if self.security_protocol not in get_args(SecurityProtocol):
            raise ValueError(f"security_protocol must be one of {get_args(SecurityProtocol)}")
        if self.security_protocol.startswith("SASL_"):
            if self.sasl_mechanism not in get_args(SaslMechanism):
                raise ValueError(f"{self.security_protocol} needs sasl_mechanism in {get_args(SaslMechanism)}")
            if not self.username or self.password is None:
                raise ValueError(f"{self.security_protocol} needs a username and a password")
        else:
            given = [name for name in ("username", "password", "sasl_mechanism") if getattr(self, name) is not None]
            if given:  # they would be ignored: the connection would be made without authentication
                raise ValueError(
                    f"{' and '.join(given)} given with security_protocol {self.security_protocol}, which does "
                    "not authenticate: use SASL_SSL (or SASL_PLAINTEXT), or drop them"
                )
        if self.auto_offset_reset not in get_args(OffsetReset):
            raise ValueError(f"auto_offset_reset must be one of {get_args(OffsetReset)}")
        if self.partitions < 1 or self.replication < 1:
            raise ValueError("partitions and replication must be at least 1")
        if self.fetch_max_wait_ms < 0 or self.feed_linger_ms < 0:
            raise ValueError("fetch_max_wait_ms and feed_linger_ms must not be negative")
        if self.max_message_bytes < 2 * _DEADLETTER_MARGIN:
            raise ValueError(f"max_message_bytes must be at least {2 * _DEADLETTER_MARGIN}")
        if self.commit_interval <= 0 or self.close_timeout <= 0 or self.connect_timeout <= 0:
            raise ValueError("commit_interval, close_timeout and connect_timeout must be positive")
        for name, fmt in (("decisions_format", self.decisions_format), ("feed_format", self.feed_format)):
            if fmt not in get_args(WireFormat):
                raise ValueError(f"{name} must be one of {get_args(WireFormat)}, not {fmt!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> KafkaSettings:
        """Settings from ``SNIPER_KAFKA_*`` variables; keyword ``overrides`` win over the environment.

        Variables: BOOTSTRAP (required unless given as an override), PREFIX, PARTITIONS,
        SECURITY_PROTOCOL, SASL_MECHANISM, USERNAME, PASSWORD, SSL_CAFILE, SSL_CERTFILE, SSL_KEYFILE,
        MAX_MESSAGE_BYTES, CLIENT_ID, FETCH_MAX_WAIT_MS, FEED_LINGER_MS.
        """
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            value = env.get(ENV_PREFIX + name, "").strip()
            return value or None

        values: dict[str, Any] = {}
        text_fields = {
            "prefix": "PREFIX",
            "security_protocol": "SECURITY_PROTOCOL",
            "sasl_mechanism": "SASL_MECHANISM",
            "username": "USERNAME",
            "password": "PASSWORD",
            "ssl_cafile": "SSL_CAFILE",
            "ssl_certfile": "SSL_CERTFILE",
            "ssl_keyfile": "SSL_KEYFILE",
            "client_id": "CLIENT_ID",
        }
        for field, name in text_fields.items():
            value = get(name)
            if value is not None:
                values[field] = value.upper() if field in ("security_protocol", "sasl_mechanism") else value
        for field, name in {
            "partitions": "PARTITIONS",
            "max_message_bytes": "MAX_MESSAGE_BYTES",
            "fetch_max_wait_ms": "FETCH_MAX_WAIT_MS",
            "feed_linger_ms": "FEED_LINGER_MS",
        }.items():
            value = get(name)
            if value is not None:
                try:
                    values[field] = int(value)
                except ValueError:
                    raise ValueError(f"{ENV_PREFIX}{name}={value!r} is not an integer") from None
        bootstrap = resolve_bootstrap(None) if environ is None else get("BOOTSTRAP")
        if bootstrap is not None:
            values["bootstrap"] = bootstrap
        values.update(overrides)
        if "bootstrap" not in values:
            raise ValueError(f"no Kafka bootstrap address: set {BOOTSTRAP_ENV} or start an EmbeddedBroker")
        return cls(**values)

    def topic(self, name: str) -> str:
        """The Kafka topic name of the logical topic ``name``."""
        return self.prefix + name

    def format_of(self, topic: str) -> WireFormat:
        """The format this bus writes records of the logical ``topic`` in."""
        if topic == DECISIONS:
            return self.decisions_format
        return self.feed_format if topic == FEED else "msgpack"

    def client_options(self) -> dict[str, Any]:
        """Connection and security keyword arguments shared by aiokafka's clients."""
        options: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
            "request_timeout_ms": self.request_timeout_ms,
        }
        if self.security_protocol in ("SSL", "SASL_SSL"):
            for flag, path in (
                ("ssl_cafile", self.ssl_cafile),
                ("ssl_certfile", self.ssl_certfile),
                ("ssl_keyfile", self.ssl_keyfile),
            ):
                if path is not None and not os.path.isfile(path):  # ssl's own error names no file
                    raise FileNotFoundError(errno.ENOENT, f"{flag}: no such file", path)
            options["ssl_context"] = create_ssl_context(
                cafile=self.ssl_cafile, certfile=self.ssl_certfile, keyfile=self.ssl_keyfile
            )
        if self.security_protocol.startswith("SASL_"):
            options["sasl_mechanism"] = self.sasl_mechanism
            options["sasl_plain_username"] = self.username  # aiokafka uses these for SCRAM too
            options["sasl_plain_password"] = self.password
        return options


def kafka_partition(key: str, partitions: int) -> int:
    """The Kafka partition aiokafka's default partitioner picks for ``key`` among ``partitions``."""
    return int(murmur2(key.encode()) & 0x7FFFFFFF) % partitions


DEFAULT_DECODERS: Mapping[str, WireDecoder[Any]] = {
    FEED: WireDecoder(feed_msgpack, feed_json),
    DECISIONS: WireDecoder(decision_msgpack, decision_json),
    VIEW: WireDecoder(view_msgpack),
    PROPOSALS: WireDecoder(proposal_msgpack),
    SNAPSHOTS: WireDecoder(msgspec.msgpack.Decoder()),
    DEADLETTER: WireDecoder(deadletter_msgpack),
}


class RebalanceListener:
    """Hooks a subscription calls with its Kafka partition numbers when the group assigns or revokes them.

    A rebalance is reported by what it changes: ``on_rebalance`` when it begins (the partitions held
    then may move: a listener holds back what it would publish for them), then, once the new assignment
    is known, ``on_revoked`` with the partitions that went elsewhere (before the subscription drops
    their records, so per-partition actors can finish) and ``on_assigned`` with the ones that are new
    here (possibly none: it always ends the rebalance). A partition kept through a rebalance is never
    revoked. Closing reports every partition revoked. Exceptions are logged and ignored.
    """

    async def on_rebalance(self, partitions: frozenset[int]) -> None:
        """A rebalance began: these partitions, held until now, may be taken away."""

    async def on_assigned(self, partitions: frozenset[int]) -> None:
        """The group gave these Kafka partitions to this subscription (empty: the rebalance ended, none new)."""

    async def on_revoked(self, partitions: frozenset[int]) -> None:
        """These Kafka partitions are no longer this subscription's (rebalance or close)."""


# ---------------------------------------------------------------------------------------------- bus


class KafkaBus(Bus):
    """The bus on Kafka. Starts lazily on first use; ``await bus.start()`` surfaces errors early."""

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        decoders: Mapping[str, WireDecoder[Any]] | None = None,
        validators: Mapping[str, Validator] | None = None,
    ) -> None:
        self.settings = settings
        self._decoders = {**DEFAULT_DECODERS, **(decoders or {})}
        self._validators = dict(validators or {})
        self._producer: Any = None
        self._start_lock = asyncio.Lock()
        self._closed = False
        self._subscriptions: set[KafkaSubscription] = set()
        self.published = 0
        self.dead_lettered = 0
        self._partition_of: dict[str, int] = {}  # partition_for's memo (murmur2 is pure Python)
        self._fence: tuple[KafkaSubscription, frozenset[str]] | None = None
        self._held: HeldBack | None = None  # the producer's records of unleased topics (see the lease invariant)

    # ---- lifecycle
    async def start(self) -> None:
        """Create the missing topics and start the producer (idempotent)."""
        if self._producer is not None:
            return
        async with self._start_lock:
            if self._closed:
                raise anyio.ClosedResourceError("the Kafka bus is closed")
            if self._producer is not None:
                return
            limit = self.settings.connect_timeout
            producer = AIOKafkaProducer(
                **self.settings.client_options(),
                acks="all",
                enable_idempotence=False,
                max_request_size=self.settings.max_message_bytes,
                linger_ms=0,
            )
            try:
                async with asyncio.timeout(limit):
                    await self._first_contact()
                    await producer.start()
            except BaseException as err:
                await self._bounded(producer.stop(), "producer stop after a failed start")
                if isinstance(err, TimeoutError | KafkaError):
                    options = self.settings.client_options()
                    failure = await security_failure(self.settings.bootstrap, options, min(limit, _PROBE_SECONDS))
                    if failure is not None:
                        raise KafkaSecurityFailure(failure) from None
                if isinstance(err, TimeoutError):
                    raise KafkaConnectTimeout(
                        f"no Kafka broker answered at {self.settings.bootstrap} within {limit:g} s: "
                        "check --bootstrap / SNIPER_KAFKA_BOOTSTRAP, or raise --connect-timeout"
                    ) from None
                raise
            if self._closed:  # closed while starting
                await self._bounded(producer.stop(), "producer stop")
                raise anyio.ClosedResourceError("the Kafka bus is closed")
            self._held = _hold_back_unleased(producer, self._unleased_topics, self._lost_topics)
            self._producer = producer

    async def _first_contact(self) -> None:
        """Create the topics, trying again while no broker answers (one starting after this process):
        the caller's ``connect_timeout`` bounds it. A TLS or SASL failure is named at once. Meanwhile
        aiokafka's own error line for each failed attempt is held back: waiting is said once, and the
        outcome in one error line."""
        quiet = _BootstrapAttempts()
        logging.getLogger("aiokafka").addFilter(quiet)
        try:
            await self._until_a_broker_answers()
        finally:
            logging.getLogger("aiokafka").removeFilter(quiet)

    async def _until_a_broker_answers(self) -> None:
        waiting = False
        while True:
            try:
                await self.ensure_topics()
                return
            except KafkaConnectionError:
                options = self.settings.client_options()
                failure = await security_failure(self.settings.bootstrap, options, _PROBE_SECONDS)
                if failure is not None:
                    raise KafkaSecurityFailure(failure) from None
                if not waiting:  # said once, not at every attempt
                    log.info(
                        "no Kafka broker answered at %s yet; trying again for up to %g s",
                        self.settings.bootstrap,
                        self.settings.connect_timeout,
                    )
                    waiting = True
                await asyncio.sleep(_CONNECT_RETRY)  # a pause between attempts, not a synchronisation

    def fence(self, subscription: KafkaSubscription, topics: Iterable[str]) -> None:
        """Send records of ``topics`` only while ``subscription``'s lease holds (see the module invariants)."""
        self._fence = (subscription, frozenset(self.settings.topic(t) for t in topics))

    def _unleased_topics(self) -> frozenset[str]:
        """The Kafka topics whose records must not be sent now (their lease has lapsed)."""
        fence = self._fence
        if fence is None or fence[0].lease_valid():
            return frozenset()
        return fence[1]

    def _lost_topics(self) -> frozenset[str]:
        """The fenced topics whose lease can never be renewed: their subscription failed or closed."""
        fence = self._fence
        if fence is None or not fence[0].over():
            return frozenset()
        return fence[1]

    def lease_renewed(self, subscription: KafkaSubscription) -> None:
        """``subscription``'s lease was renewed: send what was held back for it."""
        if self._held is not None and self._fence is not None and self._fence[0] is subscription:
            self._held.wake()

    def lease_lost(self, subscription: KafkaSubscription) -> None:
        """A rebalance began while ``subscription``'s lease was lapsed: fail what was held back for it."""
        if self._held is not None and self._fence is not None and self._fence[0] is subscription:
            self._held.fail(self._fence[1])

    def topic_configs(self, topic: str) -> dict[str, str]:
        """Kafka topic configuration of a topic this bus creates (snapshots are compacted)."""
        configs = {"max.message.bytes": str(self.settings.max_message_bytes)}
        if topic == SNAPSHOTS:
            configs["cleanup.policy"] = "compact"
        return configs

    @property
    def layout(self) -> Layout:
        """The topics this bus uses (every topic it decodes), with their configs and partition count."""
        settings = self.settings
        topics = {settings.topic(name): self.topic_configs(name) for name in self._decoders}
        return Layout(topics, settings.partitions, settings.replication)

    async def ensure_topics(self) -> None:
        """Create every topic this bus uses, if missing, and check the partition count of each.

        Raises :class:`~sniper.transport.layout.TopicLayoutError` if one has another count
        (see :mod:`sniper.transport.layout`).
        """
        admin = AIOKafkaAdminClient(**self.settings.client_options())
        try:
            await admin.start()
            created = await ensure_layout(admin, self.layout)
            if created:
                log.info("created topics %s", created)
        finally:
            await self._bounded(admin.close(), "admin client close")

    async def check_layout(self) -> TopicLayoutError | None:
        """What is wrong with this bus's topics on the broker now (gone, or another count); None if nothing.

        Raises the client's error if the broker cannot be asked.
        """
        producer = self._producer
        if producer is None:
            return None
        return layout_problem(self.layout, await producer.client.fetch_all_metadata())

    async def aclose(self) -> None:
        """Close every subscription (their receivers get ``EndOfStream``), then the producer.

        Bounded by ``close_timeout`` plus short graces: a step that overruns is cancelled or abandoned. It
        runs to its end even when its caller is cancelled (a deadline, a shutdown): members leave their
        groups at once rather than a session timeout later, and no connection is left open.
        """
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + self.settings.close_timeout
        with anyio.CancelScope(shield=True):
            subscriptions = list(self._subscriptions)
            if subscriptions:
                await asyncio.gather(*(sub._close(anyio.EndOfStream, deadline) for sub in subscriptions))
            producer, self._producer = self._producer, None
            if producer is not None:
                grace = max(deadline - time.monotonic(), _ABANDON_GRACE)
                await self._bounded(producer.stop(), "producer stop", grace)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- producing
    def partition_for(self, key: str) -> int:
        """The Kafka partition of ``key`` (assuming the topics have ``settings.partitions`` partitions)."""
        known = self._partition_of
        part = known.get(key)
        if part is None:
            if len(known) >= _PARTITION_MEMO:
                known.clear()  # keys come from the input: keep the memo bounded
            part = known[key] = kafka_partition(key, self.settings.partitions)
        return part

    async def publish(self, topic: str, key: str, message: Any) -> None:
        if topic not in self._decoders:
            raise ValueError(f"unknown topic {topic!r} (known: {sorted(self._decoders)})")
        fmt = self.settings.format_of(topic)
        payload = encode(message, fmt)
        if len(payload) > self.settings.max_message_bytes:
            raise MessageTooLarge(
                f"{type(message).__name__} on {topic} is {len(payload)} bytes, "
                f"over max_message_bytes={self.settings.max_message_bytes}"
            )
        await self.publish_raw(topic, key, payload, fmt)

    async def publish_many(self, topic: str, items: Iterable[tuple[str, Any]], *, partition: int | None = None) -> None:
        """Send several ``(key, message)`` pairs in order and wait until the broker acknowledged them all.

        The records are handed to the producer one after the other (so one key's records keep their
        order) and awaited together: a burst costs about one round trip instead of one per record.
        ``partition``: the Kafka partition of every record (default: each key's own).
        """
        sent = await self.send_many(topic, items, partition=partition)
        if sent is not None:
            await sent

    async def send_many(
        self, topic: str, items: Iterable[tuple[str, Any]], *, partition: int | None = None
    ) -> asyncio.Future[dict[int, int]] | None:
        """Hand several ``(key, message)`` pairs to the producer in order, without waiting for the broker.

        Returns a future that is done once the broker acknowledged every one of them (it fails with the
        first error), or ``None`` if there was nothing to send; its result says, per Kafka partition,
        one past the highest offset they got there. The records of one Kafka partition go to the
        producer as one batch where they can (:mod:`sniper.transport.kafka_batch`). Records handed over
        while a request is in flight are batched into the next one, so a caller that awaits the future
        later (or never blocks on it) pays no round trip per call. Returns after the records are in the
        producer's buffer: it waits only when that buffer is full.
        """
        if topic not in self._decoders:
            raise ValueError(f"unknown topic {topic!r} (known: {sorted(self._decoders)})")
        by_partition: dict[int, list[tuple[bytes, bytes]]] = {}
        fmt = self.settings.format_of(topic)
        limit = self.settings.max_message_bytes
        count = 0
        for key, message in items:
            payload = encode(message, fmt)
            if len(payload) > limit:
                raise MessageTooLarge(
                    f"{type(message).__name__} on {topic} is {len(payload)} bytes, over max_message_bytes={limit}"
                )
            # The partition is the memoised one: aiokafka's murmur2 is pure Python, once per record.
            part = self.partition_for(key) if partition is None else partition
            records = by_partition.get(part)
            if records is None:
                records = by_partition[part] = []
            records.append((key.encode(), payload))
            count += 1
        if not count:
            return None
        if self._closed:
            raise anyio.ClosedResourceError("the Kafka bus is closed")
        await self.start()
        producer = self._producer
        if producer is None:
            raise anyio.ClosedResourceError("the Kafka bus is closed")
        name = self.settings.topic(topic)
        headers = HEADERS[fmt]
        sent = [
            s for part, records in by_partition.items() for s in await hand_over(producer, name, part, records, headers)
        ]
        self.published += count
        return landed(sent)

    async def flush(self) -> None:
        """Wait until every record handed to the producer so far was sent (or failed)."""
        producer = self._producer
        if producer is not None:
            await producer.flush()

    async def publish_raw(
        self, topic: str, key: str | bytes | None, payload: bytes, fmt: WireFormat = "msgpack"
    ) -> None:
        """Send bytes already encoded in ``fmt`` on the logical ``topic``; returns once the broker acknowledged."""
        if self._closed:
            raise anyio.ClosedResourceError("the Kafka bus is closed")
        await self.start()
        producer = self._producer
        if producer is None:
            raise anyio.ClosedResourceError("the Kafka bus is closed")
        raw_key = key.encode() if isinstance(key, str) else key
        await producer.send_and_wait(self.settings.topic(topic), payload, key=raw_key, headers=HEADERS[fmt])
        self.published += 1

    async def dead_letter(self, letter: DeadLetter, *, may_write: Callable[[], Awaitable[bool]] | None = None) -> bool:
        """Publish ``letter`` on the deadletter topic, retrying a few times; never raises.

        False if it could not be published: the letter is then only logged (with the start of its payload).
        ``may_write``, awaited before each attempt, says whether the writer may still write it (an owner
        under its lease); when it says no, nothing is written and the letter is left to whoever may.
        """
        limit = self.settings.max_message_bytes - _DEADLETTER_MARGIN
        if len(letter.payload) > limit:
            letter = msgspec.structs.replace(
                letter,
                payload=letter.payload[:limit],
                reason=f"{letter.reason} (payload truncated from {len(letter.payload)} bytes)",
            )
        where = f"{letter.topic}[{letter.partition}]@{letter.offset} key={letter.key!r}"
        log.warning("dead letter: %s: %s", where, letter.reason)
        encoded = msgpack_encoder.encode(letter)
        for attempt, pause in enumerate(_DEADLETTER_RETRIES):
            if may_write is not None and not await may_write():
                log.info("dead letter for %s left to the owner of its partition", where)
                return False
            try:
                await self.publish_raw(DEADLETTER, letter.key, encoded)
            except anyio.ClosedResourceError:
                break
            except Exception as err:
                log.warning("publishing the dead letter for %s failed (attempt %d): %r", where, attempt + 1, err)
                await asyncio.sleep(pause)  # a retry backoff, not a synchronisation
                continue
            self.dead_lettered += 1
            return True
        log.error("dead letter for %s lost: %s; payload starts %r", where, letter.reason, letter.payload[:200])
        return False

    # ---- consuming
    def subscribe(
        self,
        topic: str,
        *,
        group: str,
        key: str | None = None,
        capacity: int = 1024,
        listener: RebalanceListener | None = None,
        bad: BadRecords = "dead_letter",
        linger_ms: int = 0,
    ) -> KafkaSubscription:
        """A consumer of ``topic`` in consumer group ``group`` (must be called inside a running event loop).

        Use ``await subscription.ready()`` to wait until it joined its group and got its partitions.
        ``bad`` says what becomes of bad records (see the module invariants). ``linger_ms``: after a
        fetch brought records to an empty inbox, go on fetching for that long (or until the inbox is
        full) before the receiver sees any of them, so that it takes them as one batch.
        """
        if self._closed:
            raise anyio.ClosedResourceError("the Kafka bus is closed")
        if topic not in self._decoders:
            raise ValueError(f"unknown topic {topic!r} (known: {sorted(self._decoders)})")
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        if bad not in get_args(BadRecords):
            raise ValueError(f"bad must be one of {get_args(BadRecords)}, not {bad!r}")
        if linger_ms < 0:
            raise ValueError("linger_ms must not be negative")
        sub = KafkaSubscription(
            self, topic, group=group, key=key, capacity=capacity, listener=listener, bad=bad, linger_ms=linger_ms
        )
        self._subscriptions.add(sub)
        sub._start()
        return sub

    async def subscribe_ready(
        self,
        topic: str,
        *,
        group: str,
        key: str | None = None,
        capacity: int = 1024,
        listener: RebalanceListener | None = None,
        bad: BadRecords = "dead_letter",
        linger_ms: int = 0,
    ) -> KafkaSubscription:
        """:meth:`subscribe`, then wait until the subscription has its assignment."""
        sub = self.subscribe(
            topic, group=group, key=key, capacity=capacity, listener=listener, bad=bad, linger_ms=linger_ms
        )
        try:
            await sub.ready()
        except BaseException:
            await sub.aclose()
            raise
        return sub

    def decode(
        self,
        topic: str,
        value: bytes | None,
        headers: Iterable[tuple[str, bytes | None]] | None = None,
        key: bytes | None = None,
    ) -> tuple[Any, str]:
        """``(message, "")`` for a good record of ``topic``, ``(None, reason)`` for a bad one.

        Bad: no value, larger than ``max_message_bytes``, undecodable in the format its ``content-type``
        header names (or, without one, its bytes show), refused by the topic's validator, or a feed
        record whose ``key`` (when given) is not its event's partition. Subscriptions and readers of the
        log outside the group (recovery) judge alike.
        """
        if value is None:
            return None, "empty record (no value)"
        limit = self.settings.max_message_bytes
        if len(value) > limit:
            return None, f"record of {len(value)} bytes is over max_message_bytes={limit}"
        try:
            message = self._decoders[topic].decode(value, content_type(headers))
        except msgspec.ValidationError as err:
            return None, f"invalid {topic} message: {err}"
        except msgspec.DecodeError as err:
            return None, f"undecodable {topic} record: {err}"
        except Exception as err:  # whatever else a decoder may raise must not stop the consumer
            return None, f"undecodable {topic} record: {err!r}"
        validate = self._validators.get(topic)
        reason = validate(message) if validate is not None else None
        if not reason and key is not None and topic == FEED and key != message.partition.encode():
            reason = (
                f"record key {key.decode(errors='replace')!r} is not the partition its event names "
                f"({message.partition!r}): feed records are keyed by their partition's name"
            )
        return (None, reason) if reason else (message, "")

    def _forget(self, sub: KafkaSubscription) -> None:
        self._subscriptions.discard(sub)

    async def _bounded(self, awaitable: Any, what: str, limit: float | None = None) -> bool:
        """Run ``awaitable`` for at most ``limit`` seconds (default ``close_timeout``); False if it failed or timed out.

        On timeout the work is cancelled and given a short grace; if it still does not finish it is
        abandoned (aiokafka's ``stop()`` can hang on a dead broker), so this never waits much longer.
        """
        limit = self.settings.close_timeout if limit is None else limit
        task = asyncio.ensure_future(awaitable)
        try:
            done, _ = await asyncio.wait({task}, timeout=max(0.0, limit))
            if not done:
                task.cancel()
                done, _ = await asyncio.wait({task}, timeout=_ABANDON_GRACE)
                if not done:
                    log.warning("%s did not finish within %.3gs and ignored cancellation; abandoned", what, limit)
                    return False
                log.warning("%s did not finish within %.3gs; cancelled", what, limit)
                return False
        except asyncio.CancelledError:
            task.cancel()
            raise
        if task.cancelled():
            return False
        error = task.exception()
        if error is not None:
            log.warning("%s failed: %r", what, error)
            return False
        return True


# ---------------------------------------------------------------------------------------------- subscription


@dataclasses.dataclass(slots=True, eq=False)
class _Partition:
    """One assigned Kafka partition: its records not yet handled, and what may be committed.

    Only records still to be handled are kept (skipped ones just advance ``fetched``), so the memory
    held is bounded by the inbox capacity plus the records received and not yet acknowledged.
    """

    tp: Any  # aiokafka TopicPartition
    pending: deque[_Record] = dataclasses.field(default_factory=deque)  # in offset order
    fetched: int | None = None  # the offset after the last record taken from the consumer
    committed: int | None = None
    live: bool = True

    def handled(self, record: _Record) -> None:
        record.handled = True
        pending = self.pending
        while pending and pending[0].handled:
            pending.popleft()

    @property
    def committable(self) -> int | None:
        """The offset to commit: the first record not yet handled, else the one after the last fetched."""
        return self.pending[0].offset if self.pending else self.fetched


@dataclasses.dataclass(slots=True, eq=False)
class _Record:
    part: _Partition
    offset: int
    message: Any
    value: bytes | None = None  # the record's bytes, kept from its fetch until it is received (``deliver`` only)
    handled: bool = False


class Received(NamedTuple):
    """One record as :meth:`KafkaSubscription.receive_record` hands it over."""

    kafka_partition: int
    offset: int
    message: Any  # the decoded message (a :class:`DeadLetter` for a bad record with ``bad="deliver"``)
    value: bytes | None  # the record's value as produced (``bad="deliver"``; None otherwise)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    def __init__(self, sub: KafkaSubscription) -> None:
        self._sub = sub

    async def on_partitions_revoked(self, revoked: Iterable[Any]) -> None:
        await self._sub._on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: Iterable[Any]) -> None:
        await self._sub._on_assigned(assigned)


class KafkaSubscription(Subscription):
    """One consumer-group member's bounded, ordered inbox on one topic (see the module invariants).

    ``ack()`` acknowledges the oldest received and not yet acknowledged message (in a receive, handle,
    ack loop: the last one received).
    """

    def __init__(
        self,
        bus: KafkaBus,
        topic: str,
        *,
        group: str,
        key: str | None,
        capacity: int,
        listener: RebalanceListener | None,
        bad: BadRecords = "dead_letter",
        linger_ms: int = 0,
    ) -> None:
        self._bus = bus
        self.bad = bad
        self.linger = linger_ms / 1000
        self._gathering = False  # records taken in within a linger are not handed over before it ends
        self.topic = topic
        self.kafka_topic = bus.settings.topic(topic)
        self.group = group
        self.key = key
        self.capacity = capacity
        self._key_bytes = key.encode() if key is not None else None
        self._listener = listener
        self._lease_until = 0.0  # monotonic time until which the group membership is known current
        self._read_to: dict[int, int] = {}  # per Kafka partition, the offset after the last record read (ever)
        self._committed_to: dict[int, int] = {}  # per Kafka partition, the last offset committed (ever)
        self._lease_renewed = asyncio.Event()
        self._queue: deque[_Record] = deque()
        self._unacked: deque[_Record] = deque()
        self._parts: dict[int, _Partition] = {}
        self._assigned: frozenset[int] = frozenset()
        self._unsettled: frozenset[int] = frozenset()  # held while a rebalance decides whether they stay
        self._held_generation = -1  # the group generation they were held in
        self._nonempty = asyncio.Event()
        self._space = asyncio.Event()
        self._ready = asyncio.Event()
        self._commit_lock = asyncio.Lock()
        self._consumer: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self._error: BaseException | None = None
        self._end: type[Exception] | None = None  # set once closed: what receive() raises
        self._closing = False
        self.skipped = 0  # records of other keys
        self.dead_lettered = 0
        self.commits = 0
        self.pauses = 0  # times fetching paused because the inbox was full

    # ---- the Subscription interface
    async def receive(self) -> Any:
        return (await self.receive_record()).message

    def receive_nowait(self) -> Any:
        if self._queue and not self._gathering:
            return self._take().message
        self._raise_if_over()
        raise anyio.WouldBlock

    def ack(self) -> None:
        if not self._unacked:
            return
        record = self._unacked.popleft()
        if record.part.live:
            record.part.handled(record)

    def depth(self) -> int:
        return 0 if self._gathering else len(self._queue)

    async def aclose(self) -> None:
        """Commit what was handled, report the partitions revoked and leave the group (bounded in time, and
        run to its end even when the caller is cancelled, as :meth:`KafkaBus.aclose`)."""
        with anyio.CancelScope(shield=True):
            await self._close(anyio.ClosedResourceError, time.monotonic() + self._bus.settings.close_timeout)

    # ---- extras
    async def ready(self) -> frozenset[int]:
        """Wait until the consumer joined its group and got an assignment; returns its Kafka partitions.

        Raises :class:`KafkaTransportError` if the consumer failed first.
        """
        await self._ready.wait()
        if self._error is not None:
            raise KafkaTransportError(f"subscription to {self.kafka_topic} failed: {self._error!r}") from self._error
        if self._end is not None:
            raise self._end()
        return self._assigned

    @property
    def assigned(self) -> frozenset[int]:
        """The Kafka partitions this subscription currently owns."""
        return self._assigned

    @property
    def unacked(self) -> int:
        return len(self._unacked)

    def lease_valid(self) -> bool:
        """The group membership is known current now (see the module's lease invariant); never once failed."""
        return self._error is None and time.monotonic() < self._lease_until

    async def leased(self) -> None:
        """Return at once while the lease holds; else wait until a heartbeat or an assignment renews it.

        A member deposed meanwhile never gets it back before the group revoked its partitions (callers
        stop their work there). Raises like :meth:`receive` once the subscription failed or closed.
        """
        while not self.lease_valid():
            self._raise_if_over()
            self._lease_renewed.clear()
            await self._lease_renewed.wait()

    def _renew_lease(self, since: float) -> None:
        """The broker knew this member as current at monotonic time ``since`` (a heartbeat's send)."""
        until = since + self._bus.settings.session_timeout_ms / 1000
        if until > self._lease_until:
            lapsed = not self.lease_valid()
            self._lease_until = until
            self._lease_renewed.set()
            if lapsed:
                self._bus.lease_renewed(self)

    async def receive_record(self) -> Received:
        """Like :meth:`receive`, with where the record was and, with ``bad="deliver"``, its bytes."""
        while True:
            if self._queue and not self._gathering:
                return self._take()
            self._raise_if_over()
            self._nonempty.clear()
            await self._nonempty.wait()

    def lag(self) -> dict[int, int]:
        """Per owned Kafka partition, records in the log after the last one fetched (consumer lag)."""
        consumer = self._consumer
        out: dict[int, int] = {}
        if consumer is None:
            return out
        for number, part in list(self._parts.items()):
            try:
                high = consumer.highwater(part.tp)
            except Exception:  # not fetched yet, or the partition went away meanwhile
                high = None
            if high is not None:
                out[number] = max(0, high - (part.fetched if part.fetched is not None else 0))
        return out

    def committable(self) -> dict[int, int]:
        """Per owned Kafka partition, the offset a commit would store now (only partitions with progress)."""
        offsets = {p: part.committable for p, part in self._parts.items()}
        return {p: offset for p, offset in offsets.items() if offset is not None}

    async def commit(self) -> None:
        """Commit the offsets of handled records now (also done every ``commit_interval`` and on close)."""
        await self._commit(None)

    # ---- internals: delivery
    def _take(self) -> Received:
        record = self._queue.popleft()
        value, record.value = record.value, None  # the receiver holds the bytes from here, if it wants them
        self._unacked.append(record)
        self._space.set()
        return Received(record.part.tp.partition, record.offset, record.message, value)

    def over(self) -> bool:
        """The subscription failed or closed: it receives nothing more and its lease never comes back."""
        return self._error is not None or self._end is not None

    def _raise_if_over(self) -> None:
        if self._error is not None:
            raise KafkaTransportError(f"subscription to {self.kafka_topic} failed: {self._error!r}") from self._error
        if self._end is not None:
            raise self._end()

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._consume(), name=f"kafka-consume-{self.kafka_topic}-{self.group}"))

    async def _consume(self) -> None:
        try:
            await self._bus.start()
            settings = self._bus.settings
            consumer = AIOKafkaConsumer(
                **settings.client_options(),
                group_id=self.group,
                enable_auto_commit=False,
                auto_offset_reset=settings.auto_offset_reset,
                fetch_max_wait_ms=settings.fetch_max_wait_ms,
                max_partition_fetch_bytes=max(settings.max_message_bytes, 1 << 20),
                fetch_max_bytes=max(settings.max_message_bytes, 50 << 20),
                session_timeout_ms=settings.session_timeout_ms,
                heartbeat_interval_ms=settings.heartbeat_interval_ms,
                partition_assignment_strategy=(_sticky_assignor(), RoundRobinPartitionAssignor),
            )
            self._consumer = consumer
            await consumer.start()
            _watch_heartbeats(consumer, self._renew_lease)
            consumer.subscribe([self.kafka_topic], listener=_Listener(self))
            self._tasks.append(asyncio.get_running_loop().create_task(self._commit_periodically()))
            await self._fetch(consumer)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.exception("subscription to %s (group %s) failed", self.kafka_topic, self.group)
            self._error = err
            self._ready.set()
            self._nonempty.set()

    async def _fetch(self, consumer: Any) -> None:
        # How long one fetch call may block: short, so a full inbox and the closing are noticed promptly.
        keepalive_ms = max(100, int(min(self._bus.settings.commit_interval, 1.0) * 1000))
        paused = False
        while True:
            free = self.capacity - len(self._queue)
            if free <= 0:
                # Full inbox: stop fetching (paused partitions drop their prefetched data), and keep
                # polling with nothing to return so the group does not consider this member dead.
                if not paused:
                    self.pauses += 1
                consumer.pause(*consumer.assignment())
                paused = True
                self._space.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._space.wait(), keepalive_ms / 1000)
                if len(self._queue) >= self.capacity:
                    consumer.pause(*consumer.assignment())
                    batches = await consumer.getmany(timeout_ms=0, max_records=1)
                    # Normally empty; a partition assigned after the pause may return one record
                    # (the inbox then holds capacity + 1), which must not be dropped.
                    await self._ingest_all(batches)
                continue
            if paused:
                consumer.resume(*consumer.assignment())
                paused = False
            batches = await consumer.getmany(timeout_ms=keepalive_ms, max_records=free)
            if batches and self.linger and not self._queue:  # a reader still behind batches anyway
                await self._gather(consumer, batches)
            else:
                await self._ingest_all(batches)

    async def _gather(self, consumer: Any, batches: Mapping[Any, list[Any]]) -> None:
        """Take in ``batches`` and whatever further fetches bring within the linger (or until the inbox is
        full), then hand them all over at once (the inbox was empty: none is held back that was there)."""
        deadline = time.monotonic() + self.linger
        self._gathering = True
        try:
            while True:
                await self._ingest_all(batches, wake=False)
                left = deadline - time.monotonic()
                free = self.capacity - len(self._queue)
                if left <= 0 or free <= 0:
                    return
                batches = await consumer.getmany(timeout_ms=max(1, int(left * 1000)), max_records=free)
        finally:
            self._gathering = False
            if self._queue:
                self._nonempty.set()

    async def _ingest_all(self, batches: Mapping[Any, list[Any]], *, wake: bool = True) -> None:
        """Take in a fetch's records: the good ones go to the inbox, its receiver woken (unless ``wake`` is
        false: the caller wakes it) once per fetch whenever the inbox holds records. The wake-up does not
        count what was added: while a bad record's dead letter is published, the receiver may drain the
        inbox, so a record added after it would leave the length unchanged and the receiver asleep."""
        try:
            for tp, records in batches.items():
                part = self._parts.get(tp.partition)
                if part is None or tp.topic != self.kafka_topic:
                    continue  # records of a partition revoked meanwhile: its new owner reads them
                for record in records:
                    if not part.live:
                        break  # revoked while a dead letter was published: its new owner reads the rest
                    letter = self._ingest(tp.partition, part, record)
                    if letter is not None:
                        await self._set_aside(tp, part, letter)
        finally:
            if wake and self._queue:
                self._nonempty.set()

    def _ingest(self, number: int, part: _Partition, record: Any) -> tuple[_Record, DeadLetter] | None:
        """Take in one record of Kafka partition ``number``: queued if good, else the dead letter it needs."""
        offset = record.offset
        if part.fetched is not None and offset < part.fetched:
            return None  # fetched again after a rebalance that kept the partition here: taken already
        part.fetched = offset + 1
        if self._read_to.get(number, 0) <= offset:
            self._read_to[number] = offset + 1
        key = record.key
        if self._key_bytes is not None and key != self._key_bytes:
            self.skipped += 1  # handled by skipping it: nothing to keep
            return None
        value: bytes | None = record.value
        message, reason = self._bus.decode(self.topic, value, record.headers, key or b"")
        entry = _Record(part, offset, message, value if self.bad == "deliver" else None)
        part.pending.append(entry)
        if not reason:
            self._queue.append(entry)
            return None
        letter = DeadLetter(
            topic=self.topic,
            partition=number,
            offset=offset,
            key=(key or b"").decode(errors="replace"),
            reason=reason,
            payload=value or b"",
            t=time.time(),
        )
        if self.bad == "deliver":
            entry.message = letter  # the receiver dead-letters it (once) and acknowledges it
            self._queue.append(entry)
            return None
        return entry, letter

    async def _set_aside(self, tp: Any, part: _Partition, bad: tuple[_Record, DeadLetter]) -> None:
        """A bad record this subscription handles itself: logged (on the deadletter topic, or ``skip``)
        or dead-lettered, then handled."""
        entry, letter = bad
        if self.topic == DEADLETTER:
            log.error(
                "bad record on the deadletter topic %s[%d]@%d: %s", tp.topic, tp.partition, entry.offset, letter.reason
            )
        elif self.bad == "skip":
            log.debug("bad record skipped: %s[%d]@%d: %s", tp.topic, tp.partition, entry.offset, letter.reason)
        else:
            await self._bus.dead_letter(letter)
        self.dead_lettered += 1
        if part.live:
            part.handled(entry)

    # ---- internals: offsets and rebalancing
    async def _commit(self, partitions: frozenset[int] | None) -> None:
        consumer = self._consumer
        if consumer is None or isinstance(self._error, LogLost):
            return  # offsets of a lost log must not land in the new one (the next member would skip records)
        async with self._commit_lock:
            offsets: dict[Any, int] = {}
            for number, part in self._parts.items():
                if partitions is not None and number not in partitions:
                    continue
                offset = part.committable
                if part.live and offset is not None and offset != part.committed:
                    offsets[part.tp] = offset
            if not offsets:
                return
            try:
                await consumer.commit(offsets)
            except (KafkaError, ValueError) as err:
                log.warning("commit of %s for group %s failed: %r", offsets, self.group, err)
                return
            self.commits += 1
            for tp, offset in offsets.items():
                self._committed_to[tp.partition] = offset
                current = self._parts.get(tp.partition)
                if current is not None and current.tp == tp:
                    current.committed = offset

    async def _commit_periodically(self) -> None:
        interval = self._bus.settings.commit_interval
        while True:
            await asyncio.sleep(interval)  # a timer, not a synchronisation
            try:
                await self._commit(None)
            except Exception:
                log.warning("periodic commit failed", exc_info=True)

    async def _on_assigned(self, assigned: Iterable[Any]) -> None:
        mine = [tp for tp in assigned if tp.topic == self.kafka_topic]
        numbers = frozenset(tp.partition for tp in mine)
        held, self._unsettled = self._unsettled, frozenset()
        # Kept only through one generation: after more, another member may have held them meanwhile.
        kept = numbers if _generation(self._consumer) == self._held_generation + 1 else frozenset()
        if held - kept:
            await self._revoke(held - kept, committed=True)
        gained = [tp for tp in mine if tp.partition not in self._parts]
        for tp in gained:
            self._parts[tp.partition] = _Partition(TopicPartition(tp.topic, tp.partition))
        self._assigned = frozenset(self._parts)
        self._renew_lease(time.monotonic())  # the group has just taken this member in
        log.debug("%s group %s assigned %s", self.kafka_topic, self.group, sorted(self._assigned))
        if await self._check_log(mine):
            return
        await self._fix_positions(gained)
        if self._listener is not None:
            try:
                await self._listener.on_assigned(frozenset(tp.partition for tp in gained))
            except Exception:
                log.exception("rebalance listener on_assigned failed")
        self._ready.set()

    async def _fix_positions(self, partitions: list[Any]) -> None:
        """Resolve where reading starts on newly assigned ``partitions`` before the assignment is reported.

        aiokafka resolves a partition's position lazily, in its fetcher; with ``auto_offset_reset="latest"``
        the end it resolves to would then depend on when that happens, and records published after
        :meth:`ready` returned could lie before it and never be delivered.
        """
        consumer = self._consumer
        if consumer is None or self._bus.settings.auto_offset_reset != "latest":
            return
        try:
            with anyio.fail_after(_LOG_CHECK_TIMEOUT):
                for tp in partitions:
                    await consumer.position(tp)
        except (KafkaError, TimeoutError) as err:
            log.warning("cannot resolve the start of %s: %r", self.kafka_topic, err)

    async def _check_log(self, partitions: list[Any]) -> bool:
        """Fail the subscription with :class:`LogLost` if the broker lost the log of ``partitions``.

        Checked at each assignment and before each revocation's commit (a member the broker forgot
        would otherwise commit its old offsets into the new log). True if it is lost.
        """
        if isinstance(self._error, LogLost):
            return True
        lost = await self._lost_log(partitions)
        if not lost:
            return False
        log.critical("%s", lost)
        self._error = LogLost(lost)
        self._ready.set()
        self._nonempty.set()
        self._lease_renewed.set()
        return True

    async def _lost_log(self, partitions: list[Any]) -> str:
        """Why the broker lost the log of these partitions ("" when it did not, or cannot tell)."""
        consumer = self._consumer
        known = [tp for tp in partitions if tp.partition in self._read_to or tp.partition in self._committed_to]
        if consumer is None or not known:
            return ""
        try:
            with anyio.fail_after(_LOG_CHECK_TIMEOUT):
                ends = await consumer.end_offsets(known)
        except UnknownTopicOrPartitionError as err:
            return f"the broker lost {self.kafka_topic}: {err!r}"
        except (KafkaError, TimeoutError) as err:
            log.warning("cannot check the log of %s: %r", self.kafka_topic, err)
            return ""
        for tp in known:
            read = self._read_to.get(tp.partition, 0)
            # The bundled broker reports the base offset of its last batch + 1 as the end, so only an
            # empty log proves records were lost; a lost group (below) covers a log that grew again.
            if ends.get(tp, 0) == 0 and read > 0:
                return (
                    f"the broker lost the log of {self.kafka_topic}[{tp.partition}]: it ends at offset "
                    f"{ends.get(tp, 0)}, and this process had read up to {read}"
                )
            committed_before = self._committed_to.get(tp.partition)
            if committed_before is not None and await consumer.committed(tp) is None:
                return (
                    f"the broker lost the committed offsets of group {self.group} on {self.kafka_topic}"
                    f"[{tp.partition}] (this process had committed {committed_before})"
                )
        return ""

    async def _on_revoked(self, revoked: Iterable[Any]) -> None:
        """A rebalance begins: commit, tell the listener, and keep the partitions until the assignment
        says which of them went elsewhere (:meth:`_on_assigned` revokes only those)."""
        numbers = frozenset(tp.partition for tp in revoked if tp.topic == self.kafka_topic)
        if not numbers:
            return
        generation = _generation(self._consumer)
        if generation < 0 or not self.lease_valid():  # this member may have been deposed meanwhile
            self._bus.lease_lost(self)
            await self._revoke(numbers)
            return
        log.debug("%s group %s rebalancing %s", self.kafka_topic, self.group, sorted(numbers))
        # Before the commit: offsets must not reach a new log.
        if await self._check_log([self._parts[n].tp for n in numbers if n in self._parts]):
            return
        if self._listener is not None:
            try:
                await self._listener.on_rebalance(numbers)
            except Exception:
                log.exception("rebalance listener on_rebalance failed")
        await self._commit(numbers)
        self._unsettled, self._held_generation = numbers, generation

    async def _revoke(self, numbers: frozenset[int], *, committed: bool = False) -> None:
        """Revoke ``numbers`` for good: the listener's ``on_revoked``, a commit (unless the rebalance that
        took them ``committed`` already), and their buffered records dropped."""
        if not numbers:
            return
        log.debug("%s group %s revoked %s", self.kafka_topic, self.group, sorted(numbers))
        if not committed:  # checked before the listener's last words (final snapshots) and the commit
            await self._check_log([self._parts[n].tp for n in numbers if n in self._parts])
        if self._listener is not None:
            try:
                await self._listener.on_revoked(numbers)
            except Exception:
                log.exception("rebalance listener on_revoked failed")
        if not committed:
            await self._commit(numbers)
        for number in numbers:
            part = self._parts.pop(number, None)
            if part is not None:
                part.live = False
        self._assigned = frozenset(self._parts)
        if any(not record.part.live for record in self._queue):
            self._queue = deque(record for record in self._queue if record.part.live)
            self._space.set()

    # ---- internals: shutdown
    async def _close(self, end: type[Exception], deadline: float) -> None:
        if self._closing:
            return
        self._closing = True
        bus = self._bus
        try:
            for task in self._tasks:
                task.cancel()
            if self._tasks:
                await asyncio.wait(self._tasks, timeout=_ABANDON_GRACE)
            for task in self._tasks:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    log.debug("subscription task ended with %r", task.exception())
            consumer = self._consumer
            if consumer is not None:
                # Commit while still a member (the final revoke), then leave the group; half the time
                # left goes to the commit (without it records are only delivered again).
                await bus._bounded(
                    self._revoke(frozenset(self._parts)),
                    f"final commit on {self.kafka_topic}",
                    (deadline - time.monotonic()) / 2,
                )
                self._consumer = None
                _leave_even_at_generation_zero(consumer)
                await bus._bounded(
                    consumer.stop(), f"consumer stop on {self.kafka_topic}", max(deadline - time.monotonic(), 0.1)
                )
        finally:
            self._end = end
            self._consumer = None
            self._queue.clear()
            self._unacked.clear()
            self._parts.clear()
            self._assigned = frozenset()
            self._ready.set()
            self._nonempty.set()
            self._space.set()
            self._lease_renewed.set()
            bus._forget(self)


def _generation(consumer: Any) -> int:
    """The consumer's group generation (-1: none, or not known): aiokafka keeps it on its coordinator."""
    generation = getattr(getattr(consumer, "_coordinator", None), "generation", -1)
    return generation if isinstance(generation, int) else -1


def _sticky_assignor() -> type[StickyPartitionAssignor]:
    """aiokafka's sticky assignor, a class of its own per consumer: the assignor keeps the member's last
    assignment on its class, which consumers of one process must not share."""
    return type("StickyPartitionAssignor", (StickyPartitionAssignor,), {"member_assignment": None})


@dataclasses.dataclass(frozen=True)
class HeldBack:
    """What :func:`_hold_back_unleased` lets the bus do with the records it holds back."""

    fail: Callable[[frozenset[str]], None]  # fail the buffered records of these topics
    wake: Callable[[], None]  # have the producer look at its buffer again (a lease was renewed)


def _hold_back_unleased(
    producer: Any, unleased: Callable[[], frozenset[str]], lost: Callable[[], frozenset[str]]
) -> HeldBack | None:
    """Hold back, instead of sending, the batches of the topics ``unleased()`` names; fail those of the
    topics ``lost()`` names (and those the returned :class:`HeldBack` fails).

    aiokafka's sender drains its accumulator, then sends a produce request once the connection is ready;
    a process may stop in between. Both steps are wrapped (internals, like :func:`_watch_heartbeats`;
    without them nothing is held back, and a warning says so): the drain leaves the buffered batches of
    unleased topics in the buffer (their partitions muted for it), and a produce request holding any is
    refused just before it is written (the lease lapsed between the two: its batches fail).
    """
    accumulator: Any = getattr(producer, "_message_accumulator", None)
    original = getattr(accumulator, "drain_by_nodes", None)
    batches = getattr(accumulator, "_batches", None)
    client: Any = getattr(producer, "client", None)
    send = getattr(client, "send", None)
    ready = getattr(client, "ready", None)
    if (
        original is None
        or batches is None
        or not hasattr(accumulator, "_pop_batch")
        or not hasattr(accumulator, "_waiter_future")
        or send is None
        or ready is None
    ):
        log.warning("aiokafka's producer is not as expected: records are not held back when the lease lapses")
        return None

    async def send_if_leased(node_id: Any, request: Any, **options: Any) -> Any:
        if isinstance(request, ProduceRequest):
            await ready(node_id, **options)  # the last wait before the write: check the lease after it
            topics = unleased()
            held = [name for name, _ in getattr(request, "_topics", ()) if name in topics]
            if held:
                raise LeaseLapsed(f"not sent to {held[0]}: lease lapsed")
        return await send(node_id, request, **options)

    def fail(topics: frozenset[str]) -> None:
        for tp in [tp for tp in batches if tp.topic in topics]:
            while tp in batches:
                accumulator._pop_batch(tp).failure(exception=LeaseLapsed(f"not sent to {tp.topic}: lease lapsed"))

    def wake() -> None:
        waiter = accumulator._waiter_future
        if not waiter.done():
            waiter.set_result(None)

    def drain(ignore_nodes: Any, muted_partitions: Any = frozenset()) -> Any:
        gone = lost()
        if gone:
            fail(gone)
        topics = unleased()
        if topics:
            muted_partitions = frozenset(muted_partitions) | {tp for tp in batches if tp.topic in topics}
        return original(ignore_nodes, muted_partitions)

    accumulator.drain_by_nodes = drain
    client.send = send_if_leased
    return HeldBack(fail, wake)


def _watch_heartbeats(consumer: Any, renewed: Callable[[float], None]) -> None:
    """Call ``renewed(sent_at)`` after each heartbeat the group coordinator accepted.

    aiokafka has no hook for it: this wraps its coordinator's heartbeat (internals, like
    :func:`_leave_even_at_generation_zero`). Without those internals the lease is renewed only at
    assignments and so lapses: publishing would wait forever, so then the lease is made permanent.
    """
    coordinator = getattr(consumer, "_coordinator", None)
    original = getattr(coordinator, "_do_heartbeat", None)
    if coordinator is None or original is None:
        log.warning("aiokafka's heartbeat is not where expected: group membership is not leased")
        renewed(float("inf"))
        return

    async def heartbeat() -> bool:
        sent = time.monotonic()
        ok = bool(await original())
        rejoin = getattr(coordinator, "_rejoin_needed_fut", None)
        if ok and not (rejoin is not None and rejoin.done()):  # still a member, no rebalance under way
            renewed(sent)
        return ok

    coordinator._do_heartbeat = heartbeat


def _leave_even_at_generation_zero(consumer: Any) -> None:
    """Make ``consumer.stop()`` send LeaveGroup even when the group generation is 0.

    aiokafka only leaves a group whose generation is above 0 (Kafka starts at 1), but tansu numbers a
    group's first generation 0: without this the next member of the group waits for the departed one
    to time out (the session timeout) before it gets its assignment. Best effort: this relies on
    aiokafka's coordinator internals and does nothing if they are not there.
    """
    coordinator = getattr(consumer, "_coordinator", None)
    original = getattr(coordinator, "_maybe_leave_group", None)
    if coordinator is None or original is None or not hasattr(coordinator, "_send_req"):
        return

    async def leave() -> None:
        if (
            getattr(coordinator, "generation", None) == 0
            and getattr(coordinator, "member_id", "")
            and getattr(coordinator, "_group_instance_id", None) is None
        ):
            try:
                await coordinator._send_req(LeaveGroupRequest(coordinator.group_id, coordinator.member_id))
            except KafkaError as err:
                log.debug("LeaveGroup (generation 0) failed: %r", err)
        await original()

    coordinator._maybe_leave_group = leave


__all__ = [
    "DEFAULT_DECODERS",
    "KafkaBus",
    "KafkaSettings",
    "KafkaSubscription",
    "KafkaTransportError",
    "LeaseLapsed",
    "LogLost",
    "MessageTooLarge",
    "RebalanceListener",
    "Received",
    "kafka_partition",
]
