"""An informer as client-go's: list, then watch from the listed ``resourceVersion``, keeping a store.

What it owns: one resource's local store (``store``: key -> the object as the API server serves it) and
the stream of changes to it, handed to ``sink`` as ``(type, object)`` with type ``ADDED``, ``MODIFIED``
or ``DELETED``. Invariants: the sink sees every change once, in the order the API server made them; a
watch that ends or drops (a server timeout, a broken connection) resumes from the last version seen
(bookmarks advance it without a change); a ``410 Gone`` (an HTTP ``410``, or an ``ERROR`` event of code
``410`` inside a ``200`` stream) relists, and the relist is told to the sink as the differences from
the store (objects gone while unwatched arrive as ``DELETED`` with their last known state), as
client-go's ``Replace`` does. A list is read in pages. ``synced`` is set once the first list is in the store.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import anyio
import msgspec

from sniper.kubernetes.client import call

log = logging.getLogger("sniper.k8s")

Sink = Callable[[str, dict[str, Any]], Awaitable[None]]
WATCH_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_read=None, sock_connect=30)
PAGE = 500  # objects per list request, as client-go's reflector pages


class Gone(Exception):
    """The version the informer watches from is compacted away: relist."""


class Missing(Exception):
    """The resource does not exist on this cluster (an uninstalled CRD): nothing to watch."""


class WatchEvent(msgspec.Struct, frozen=True):
    type: str
    object: dict[str, Any]


_decode_event = msgspec.json.Decoder(WatchEvent).decode


def object_key(obj: Mapping[str, Any]) -> str:
    """``NAMESPACE/NAME``, or ``NAME`` for a cluster-scoped object."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name', '')}" if namespace else str(meta.get("name", ""))


def resource_version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


class Informer:
    """One resource's list and watch. ``lister(**kwargs)`` is a kubernetes-asyncio list operation with its
    selectors bound (``functools.partial(core.list_node)``); the informer adds the watch parameters."""

    def __init__(
        self,
        name: str,
        lister: Callable[..., Awaitable[Any]],
        sink: Sink,
        *,
        server_timeout: int = 300,
        retry_delay: float = 1.0,
    ) -> None:
        self.name = name
        self.lister = lister
        self.sink = sink
        self.server_timeout = server_timeout
        self.retry_delay = retry_delay
        self.store: dict[str, dict[str, Any]] = {}
        self.version = ""
        self.synced = anyio.Event()
        self.lists = 0  # lists made (1 + relists after a 410)
        self.resumes = 0  # watches resumed from the last version after a stream ended
        self.missing = False  # the resource is not served (its CRD is not installed)

    async def run(self) -> None:
        """List and watch until cancelled."""
        while True:
            try:
                await self._list()
                while True:
                    await self._watch()
                    self.resumes += 1
            except Gone:
                log.info("%s: resourceVersion %s is gone, relisting", self.name, self.version)
            except Missing:
                self.missing = True
                self.synced.set()
                log.warning("%s: not served by this API server; not watched", self.name)
                return
            except (aiohttp.ClientError, OSError, TimeoutError, msgspec.DecodeError) as e:
                log.warning("%s: %s; listing again in %gs", self.name, e or type(e).__name__, self.retry_delay)
                await anyio.sleep(self.retry_delay)  # a retry's back-off, not a synchronisation

    async def _list(self) -> None:
        """Every object, in pages of :data:`PAGE` (one consistent snapshot: the first page's version)."""
        items: list[dict[str, Any]] = []
        version, token = "", ""
        while True:
            answer = await call(self.lister, limit=PAGE, **({"_continue": token} if token else {}))
            if answer.status == 404:
                raise Missing
            if answer.status == 410:
                raise Gone  # the snapshot a continue token names was compacted: start over
            if not answer.ok:
                raise aiohttp.ClientError(f"list {self.name}: {answer.reason}")
            meta = answer.body.get("metadata") or {}
            version = version or str(meta.get("resourceVersion", ""))
            items.extend(answer.body.get("items") or [])
            token = str(meta.get("continue") or "")
            if not token:
                break
        self.version = version
        self.lists += 1
        fresh = {object_key(obj): obj for obj in items}
        old = self.store
        self.store = fresh
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                await self.sink("ADDED", obj)
            elif resource_version(before) != resource_version(obj):
                await self.sink("MODIFIED", obj)
        for key, obj in old.items():
            if key not in fresh:
                await self.sink("DELETED", obj)
        self.synced.set()

    async def _watch(self) -> None:
        response = await self.lister(
            watch="true",  # as text: the client would send a bool as "True"
            resource_version=self.version,
            allow_watch_bookmarks="true",
            timeout_seconds=self.server_timeout,
            _preload_content=False,
            _request_timeout=WATCH_TIMEOUT,
        )
        try:
            if response.status == 410:
                raise Gone
            if response.status == 404:
                raise Missing
            if response.status != 200:
                raise aiohttp.ClientError(f"watch {self.name}: HTTP {response.status}")
            async for line in response.content:
                if line.strip():
                    await self._apply(_decode_event(line))
        finally:
            response.release()

    async def _apply(self, event: WatchEvent) -> None:
        obj = event.object
        if event.type == "ERROR":
            if obj.get("code") == 410:
                raise Gone
            raise aiohttp.ClientError(f"watch {self.name}: {obj.get('message') or obj}")
        version = resource_version(obj)
        if version:
            self.version = version
        if event.type == "BOOKMARK":
            return
        key = object_key(obj)
        if event.type == "DELETED":
            if self.store.pop(key, None) is not None:
                await self.sink("DELETED", obj)
            return
        kind = "MODIFIED" if key in self.store else "ADDED"
        self.store[key] = obj
        await self.sink(kind, obj)
