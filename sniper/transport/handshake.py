"""Why a first contact over TLS or SASL failed: one probe connection that names the TLS or SASL failure.

aiokafka reports a failed TLS handshake as silence (its clients retry until the connect timeout) and a
refused SASL authentication as "Unable to bootstrap"; both read like an unreachable broker.
:func:`security_failure` opens one TCP connection, then one Kafka connection with the same security
options, each bounded by ``seconds``, and says what failed: nothing listening is not a security failure
(``None``), a handshake that fails or never completes is, and so is a SASL error.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from aiokafka.conn import create_conn
from aiokafka.errors import KafkaError


def first_address(bootstrap: str) -> tuple[str, int] | None:
    """The host and port of the first ``host:port`` of a bootstrap list (``None``: not one)."""
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    return (host.strip("[]"), int(port)) if host and port.isdigit() else None


async def security_failure(bootstrap: str, options: dict[str, Any], seconds: float) -> str | None:
    """What the TLS handshake or SASL authentication with the first bootstrap broker says, in one line,
    or ``None`` when it cannot be blamed (nothing listens there, or the probe connected fine).
    ``options`` are the clients' connection options (``KafkaSettings.client_options``)."""
    address = first_address(bootstrap)
    protocol = str(options.get("security_protocol", "PLAINTEXT"))
    if address is None or protocol == "PLAINTEXT":
        return None
    host, port = address
    try:
        async with asyncio.timeout(seconds):
            _, writer = await asyncio.open_connection(host, port)
        writer.close()
    except (OSError, TimeoutError):
        return None  # nobody listens: the caller's own message says so
    tls = protocol in ("SSL", "SASL_SSL")
    if tls:
        failure = await _tls_failure(host, port, options.get("ssl_context"), seconds, protocol)
        if failure is not None:
            return failure
    conn_options = {k: v for k, v in options.items() if k != "bootstrap_servers"}
    try:
        async with asyncio.timeout(seconds):
            conn = await create_conn(host, port, **conn_options)
    except TimeoutError:
        if not tls:
            return None
        return (
            f"{host}:{port} accepts connections but completed no TLS handshake within {seconds:g} s "
            f"(security_protocol {protocol}): is that listener TLS?"
        )
    except ssl.SSLError as err:
        return f"TLS handshake with {host}:{port} failed: {err.reason or err} (security_protocol {protocol})"
    except KafkaError as err:
        if not protocol.startswith("SASL_"):
            return None
        return (
            f"SASL {options.get('sasl_mechanism')} authentication of {options.get('sasl_plain_username')!r} "
            f"at {host}:{port} failed: {type(err).__name__} ({getattr(err, 'description', '') or err})"
        )
    except OSError as err:
        return f"TLS or SASL connection to {host}:{port} failed: {err}" if tls else None
    conn.close()
    return None


async def _tls_failure(host: str, port: int, context: Any, seconds: float, protocol: str) -> str | None:
    """What a TLS handshake with ``host:port`` says (``None``: it completed). The event loop bounds the
    handshake itself (``ssl_handshake_timeout``), so a listener that never answers it leaves no
    connection open behind the probe, whichever loop runs it."""
    if not isinstance(context, ssl.SSLContext):
        context = ssl.create_default_context()
    try:
        async with asyncio.timeout(seconds + 1):  # the connect itself; the handshake has its own bound
            _, writer = await asyncio.open_connection(host, port, ssl=context, ssl_handshake_timeout=seconds)
    except ssl.SSLError as err:
        return f"TLS handshake with {host}:{port} failed: {err.reason or err} (security_protocol {protocol})"
    except (TimeoutError, ConnectionAbortedError):
        return (
            f"{host}:{port} accepts connections but completed no TLS handshake within {seconds:g} s "
            f"(security_protocol {protocol}): is that listener TLS?"
        )
    except OSError as err:
        return f"TLS connection to {host}:{port} failed: {err}"
    writer.close()
    return None
