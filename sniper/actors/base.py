"""The actor runtime: one inbox per actor, handlers that never crash the loop, and supervision.

An actor handles one message at a time. When its inbox runs dry it gets :meth:`Actor.on_idle`, the
place to publish coalesced output (a burst of events becomes one delta, one cycle). A message is
acknowledged only after everything it caused has been published, so a quiescent bus really means
nothing is left to do. A handler exception is logged with the actor and partition and counted; the
loop goes on. A crash of the loop itself is the supervisor's business. Long work (a replica's reset,
a snapshot, a restore) runs in slices that give the event loop back between them (:func:`in_slices`).
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from sniper.core.slicing import Steps
from sniper.transport.bus import Subscription

log = logging.getLogger("sniper.actors")
BURST = 64  # messages handled back to back before an actor yields to the event loop
T = TypeVar("T")


async def in_slices(steps: Steps[T]) -> T:
    """What ``steps`` returns, giving the event loop back between its slices (heartbeats, ticks and the
    other partitions run there; the caller's own state stays still, its only writer being here)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        await anyio.lowlevel.checkpoint()


class MergedInbox(Subscription):
    """Several subscriptions seen as one ordered-per-source inbox (pumps feed one local stream)."""

    def __init__(self, sources: Sequence[Subscription]) -> None:
        self._sources = list(sources)
        send, receive = anyio.create_memory_object_stream[tuple[Any, Subscription]](0)
        self._send: MemoryObjectSendStream[tuple[Any, Subscription]] = send
        self._receive: MemoryObjectReceiveStream[tuple[Any, Subscription]] = receive
        self._last: list[Subscription] = []
        self._holding = 0  # pumps that took a message and wait to hand it over

    async def pump_all(self) -> None:
        try:
            async with anyio.create_task_group() as tg:
                for source in self._sources:
                    tg.start_soon(self._pump, source)
        finally:
            # The sources ended or the actor stopped: the receiver gets EndOfStream, both ends are released.
            self._send.close()
            self._receive.close()

    async def _pump(self, source: Subscription) -> None:
        while True:
            try:
                message = await source.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
            self._holding += 1  # the receiver takes it back off when it takes the message
            try:
                await self._send.send((message, source))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._holding -= 1
                return

    async def receive(self) -> Any:
        message, source = await self._receive.receive()
        self._holding -= 1
        self._last.append(source)
        return message

    def receive_nowait(self) -> Any:
        message, source = self._receive.receive_nowait()
        self._holding -= 1
        self._last.append(source)
        return message

    def ack(self) -> None:
        if self._last:
            self._last.pop(0).ack()

    def depth(self) -> int:
        return self._holding + sum(s.depth() for s in self._sources)

    async def aclose(self) -> None:
        for s in self._sources:
            await s.aclose()
        await self._receive.aclose()


class Actor(abc.ABC):
    """A task with one inbox that owns its state and talks only by messages."""

    kind = "actor"

    def __init__(self, partition: str, inbox: Subscription) -> None:
        self.partition = partition
        self.inbox = inbox
        self.handled = 0
        self.errors = 0
        self.log = logging.LoggerAdapter(log, {"partition": partition, "actor": self.kind})
        # Where a host that measures wants (kind of work, seconds): allocation cycles, preemption rounds.
        self.timer: Callable[[str, float], None] | None = None

    @property
    def name(self) -> str:
        return f"{self.kind}[{self.partition}]"

    @abc.abstractmethod
    async def handle(self, message: Any) -> None: ...

    def timed(self, kind: str, began: float) -> None:
        """Report work of ``kind`` that began at ``began`` (``time.perf_counter``) to the timer, if any."""
        if self.timer is not None:
            self.timer(kind, time.perf_counter() - began)

    async def on_idle(self) -> None:  # noqa: B027 - a hook, empty by default
        """Called when the inbox is empty after at least one message; publish coalesced output here."""

    async def on_start(self) -> None:  # noqa: B027 - a hook, empty by default
        """Called once before the first message (restore, announce, ...)."""

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            if isinstance(self.inbox, MergedInbox):
                tg.start_soon(self.inbox.pump_all)
            await self.on_start()
            task_status.started()
            try:
                await self._loop()
            finally:
                tg.cancel_scope.cancel()

    async def _loop(self) -> None:
        inbox = self.inbox
        unacked = 0
        burst = 0
        while True:
            try:
                # Drain what is buffered without a scheduler round trip per message; yield every
                # BURST messages so the publishers and the other actors keep running.
                if burst < BURST:
                    try:
                        message = inbox.receive_nowait()
                        burst += 1
                    except anyio.WouldBlock:
                        burst = 0
                        message = await inbox.receive()
                else:
                    burst = 0
                    await anyio.lowlevel.checkpoint()
                    message = await inbox.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
            unacked += 1
            try:
                await self.handle(message)
            except Exception:
                self.errors += 1
                self.log.exception("%s failed to handle %s", self.name, type(message).__name__)
            self.handled += 1
            if inbox.depth() == 0:
                try:
                    await self.on_idle()
                except Exception:
                    self.errors += 1
                    self.log.exception("%s failed in its idle step", self.name)
                for _ in range(unacked):
                    inbox.ack()
                unacked = 0


ActorFactory = Callable[[], Actor]


class _StartedOnce:
    """Hands ``started()`` on to the supervisor once, whichever run of a restarted actor gets there."""

    def __init__(self, inner: TaskStatus[None]) -> None:
        self._inner = inner
        self._done = False

    def started(self, value: None = None) -> None:
        if not self._done:
            self._done = True
            self._inner.started(value)


async def supervise(
    name: str,
    factories: Sequence[tuple[ActorFactory, bool]],
    *,
    max_restarts: int = 3,
    on_give_up: Callable[[str, BaseException], Awaitable[None]] | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run actors side by side; ``(factory, restartable)`` pairs.

    A restartable actor whose loop crashes is rebuilt from its factory (its state comes back from
    the cache) up to ``max_restarts`` times. Any other crash, or one restart too many, stops the
    whole group cleanly: the error is logged, ``on_give_up`` is told, and the exception propagates
    so nothing is silently lost.
    """
    started = 0
    async with anyio.create_task_group() as tg:

        async def keep(factory: ActorFactory, restartable: bool, *, task_status: TaskStatus[None]) -> None:
            restarts = 0
            status = _StartedOnce(task_status)  # a restart of an actor that never started still reports it
            while True:
                actor = factory()
                try:
                    await actor.run(task_status=status)
                    return
                except Exception as err:
                    log.exception("%s: actor %s crashed", name, actor.name)
                    try:
                        await actor.inbox.aclose()  # what it held is never handled: release it
                    except Exception:
                        log.exception("%s: closing the inbox of %s failed", name, actor.name)
                    if not restartable or restarts >= max_restarts:
                        if on_give_up is not None:
                            await on_give_up(actor.name, err)
                        raise
                    restarts += 1
                    log.warning("%s: restarting %s (%d/%d)", name, actor.name, restarts, max_restarts)

        for factory, restartable in factories:
            await tg.start(keep, factory, restartable)
            started += 1
        task_status.started()
