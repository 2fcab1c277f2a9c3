"""Where the Kafka settings of a command come from, and the embedded broker a command may start.

Owns: turning command-line flags and ``SNIPER_KAFKA_*`` variables into one
:class:`~sniper.transport.kafka.KafkaSettings` (flags win over the environment; TLS/SASL and the maximum
message size pass straight through), and :func:`bootstrap_or_embedded`, which yields the bootstrap
address to use: ``--bootstrap``, else ``$SNIPER_KAFKA_BOOTSTRAP``, else an
:class:`~sniper.transport.broker.EmbeddedBroker` started for the command and stopped when it ends.

Invariant: settings built for an embedded broker use short group sessions (the bundled broker holds a
group join for about half the session timeout); against any other broker the session timeout is the
Kafka default unless ``--session-timeout-ms`` / ``SNIPER_KAFKA_SESSION_TIMEOUT_MS`` says otherwise.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from sniper.transport.broker import EmbeddedBroker, resolve_bootstrap
from sniper.transport.kafka import ENV_PREFIX, KafkaSettings

EMBEDDED_SESSION_TIMEOUT_MS = 2_000
EMBEDDED_HEARTBEAT_MS = 500


def build_settings(
    bootstrap: str,
    *,
    embedded: bool = False,
    environ: dict[str, str] | None = None,
    **flags: Any,
) -> KafkaSettings:
    """Settings for ``bootstrap`` from ``SNIPER_KAFKA_*`` plus the flags that were given (None = not given).

    Raises ``ValueError`` with a clear message on a bad value (e.g. SASL without credentials).
    """
    env = dict(os.environ) if environ is None else environ
    overrides = {k: v for k, v in flags.items() if v is not None}
    session = env.get(ENV_PREFIX + "SESSION_TIMEOUT_MS", "").strip()
    if "session_timeout_ms" not in overrides:
        if session:
            try:
                overrides["session_timeout_ms"] = int(session)
            except ValueError:
                raise ValueError(f"{ENV_PREFIX}SESSION_TIMEOUT_MS={session!r} is not an integer") from None
        elif embedded:
            overrides["session_timeout_ms"] = EMBEDDED_SESSION_TIMEOUT_MS
    if "session_timeout_ms" in overrides and "heartbeat_interval_ms" not in overrides:
        overrides["heartbeat_interval_ms"] = max(100, min(1_000, overrides["session_timeout_ms"] // 4))
    for name in ("security_protocol", "sasl_mechanism"):
        if isinstance(overrides.get(name), str):
            overrides[name] = overrides[name].upper()
    overrides["bootstrap"] = bootstrap
    env_only = {k: v for k, v in env.items() if k.startswith(ENV_PREFIX)}
    return KafkaSettings.from_env(env_only, **overrides)


@contextlib.asynccontextmanager
async def bootstrap_or_embedded(explicit: str | None, *, announce: Any = None) -> AsyncIterator[tuple[str, bool]]:
    """``(bootstrap, embedded)``: the configured broker, or an embedded one for the duration."""
    address = resolve_bootstrap(explicit)
    if address is not None:
        yield address, False
        return
    async with EmbeddedBroker() as broker:
        if announce is not None:
            announce(f"no --bootstrap and no SNIPER_KAFKA_BOOTSTRAP: started an embedded broker at {broker.bootstrap}")
        yield broker.bootstrap, True
