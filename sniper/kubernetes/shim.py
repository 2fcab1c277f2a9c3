"""``sniper k8s``'s work while it leads: informers onto the feed, decisions onto the API server.

What it owns: the wiring of one partition's :class:`~sniper.kubernetes.view.ClusterView` between the
informers, the ``feed`` and ``decisions`` topics (a Kafka client of the documented wire like any adapter)
and :class:`~sniper.kubernetes.actions.Actions`. Invariants: the view changes without awaiting and its
events go to Kafka through one publisher, so the feed carries one partition's events in the order the view
made them; decisions are read only once every informer has listed (the view knows every pod a decision
names); each ``(partition, seq)`` is acted on once and a lower epoch than the highest seen is dropped; the
decisions waiting are acted on together, those about one allocation or ask in their order and the others
at once, and acknowledged (their offsets committed) only after their actions, so a shim killed mid-way acts
on them again when restarted, and acting again is harmless: a pod already bound is not bound twice, a
victim already gone is released (``allocation_released``) instead of evicted, a kill names the pod's UID.
A shim that starts publishes a ``sync`` marker after its view and reads its partition's decisions from the
start up to it (what Sniper holds); an ``allocated`` older than the marker whose allocation Sniper no
longer holds is not bound, and once every decision up to the marker is acted on, an allocation Sniper holds
that no pod carries is released: its pod went while no shim watched.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from sniper.core.config import ConfigError, PartitionConfig, load_config
from sniper.kubernetes.actions import Actions, Outcome
from sniper.kubernetes.client import Apis
from sniper.kubernetes.informer import Informer
from sniper.kubernetes.view import ClusterView, Notice, Out, config_map_partition, default_partition
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.transport.bus import DECISIONS, FEED
from sniper.transport.kafka import KafkaBus, KafkaSubscription

log = logging.getLogger("sniper.k8s")

POD_GROUPS = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")


@dataclasses.dataclass(frozen=True, slots=True)
class QueuesSource:
    """Where the queue configuration comes from: a file read once, or a ConfigMap watched."""

    path: Path | None = None
    config_map: tuple[str, str] | None = None  # (namespace, name)

    @classmethod
    def parse(cls, text: str | None) -> QueuesSource:
        """``FILE`` or ``configmap:NAMESPACE/NAME`` (``--queues``); raises ``ValueError`` on a bad one."""
        if not text:
            return cls()
        if text.startswith("configmap:"):
            namespace, _, name = text.removeprefix("configmap:").partition("/")
            if not namespace or not name or "/" in name:
                raise ValueError(f"--queues {text}: expected configmap:NAMESPACE/NAME")
            return cls(config_map=(namespace, name))
        return cls(path=Path(text))


@dataclasses.dataclass(frozen=True, slots=True)
class ShimOptions:
    scheduler_name: str = "sniper"
    partition: str = "default"
    queues: QueuesSource = QueuesSource()
    group: str = ""  # the decisions' consumer group (default: decisions_group's)
    watch_timeout: int = 300  # seconds the API server keeps one watch open
    retry_delay: float = 1.0  # between eviction attempts refused by a budget, and after a failed list


def decisions_group(prefix: str, options: ShimOptions) -> str:
    """The consumer group the leader reads its partition's decisions in, committing what it acted on: one
    per scheduler and partition, so the shims of two partitions never split each other's Kafka partitions,
    and a new leader goes on where the last one stopped."""
    return f"{prefix}k8s-{options.scheduler_name}-{options.partition}"


def initial_config(options: ShimOptions) -> PartitionConfig:
    """The configuration the shim starts with; raises ``ConfigError`` on a bad file."""
    if options.queues.path is not None:
        return load_config(options.queues.path).partition(options.partition)
    return default_partition(options.partition)


class Shim:
    """One partition's shim over ``apis`` and ``bus``; ``clock`` is the feed's clock (epoch seconds)."""

    def __init__(
        self,
        apis: Apis,
        bus: KafkaBus,
        options: ShimOptions,
        *,
        config: PartitionConfig | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.apis = apis
        self.bus = bus
        self.options = options
        self.clock = clock
        self.view = ClusterView(options.partition, options.scheduler_name, config or initial_config(options))
        self.actions = Actions(apis, options.scheduler_name, clock, retry_delay=options.retry_delay)
        self.outbox: list[f.Feed] = []  # events made by the view, not yet handed to Kafka
        self.notices: list[Notice] = []
        self.pending = anyio.Event()  # set when the outbox has something
        self.informers: dict[str, Informer] = {}
        self.acted: tuple[int, int] = (-1, -1)  # (epoch, seq) of the last decision acted on
        self.published = 0
        self.ready = anyio.Event()  # every informer listed; decisions are being read
        self.stopped = anyio.Event()  # it no longer watches nor acts (its leadership ended, or a shutdown)
        self.marker = f"k8s/start/{uuid.uuid4().hex}"  # the sync event this shim publishes after its view
        self.history: dict[str, tuple[str, str]] = {}  # allocation -> (app, ask), up to the marker
        self.history_read = anyio.Event()
        self.before_marker = True  # the decisions read so far were made before this shim's view
        self.changed = anyio.Event()  # set (and replaced) after every change: what tests wait on

    # --- the feed --------------------------------------------------------------------------------------

    def _emit(self, out: Out) -> None:
        self.outbox.extend(out.events)
        self.notices.extend(out.notices)
        if out.events or out.notices:
            self.pending.set()

    async def _publisher(self) -> None:
        """Hand the view's events to Kafka in the order it made them, as many at a time as are waiting."""
        while True:
            await self.pending.wait()
            self.pending = anyio.Event()
            events, self.outbox = self.outbox, []
            notices, self.notices = self.notices, []
            if events:
                await self.bus.publish_many(FEED, [(self.options.partition, e) for e in events])
                self.published += len(events)
            for notice in notices:
                await self.actions.event(notice.pod, notice.reason, notice.message, notice.name)
            self._wake()

    async def _change(self, apply: Callable[[float], Out]) -> None:
        self._emit(apply(self.clock()))
        self._wake()

    def _wake(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    def _sink(self, kind: str) -> Callable[[str, dict[str, Any]], Awaitable[None]]:
        view = self.view

        async def sink(change: str, obj: dict[str, Any]) -> None:
            if kind == "node":
                await self._change(lambda t: view.on_node(change, obj, t))
            elif kind == "pod":
                await self._change(lambda t: view.on_pod(change, obj, t))
            elif kind == "podgroup":
                await self._change(lambda t: view.on_pod_group(change, obj, t))
            elif kind == "configmap":
                await self._on_config_map(change, obj)
            else:
                {"namespace": view.on_namespace, "priorityclass": view.on_priority_class, "pdb": view.on_pdb}[kind](
                    change, obj
                )
                self._wake()

        return sink

    async def _on_config_map(self, change: str, obj: dict[str, Any]) -> None:
        if change == "DELETED":
            log.warning("the queues ConfigMap was deleted; the partition keeps its last configuration")
            return
        try:
            config = config_map_partition(obj, self.options.partition)
        except ConfigError as e:
            log.error("queues ConfigMap refused, the partition keeps its last configuration: %s", e)
            return
        meta = obj.get("metadata") or {}
        await self._change(lambda t: self.view.on_config(config, t, f"configmap/{meta.get('uid', '')}"))

    def _informer(self, name: str, kind: str, lister: Callable[..., Awaitable[Any]]) -> Informer:
        informer = Informer(
            name,
            lister,
            self._sink(kind),
            server_timeout=self.options.watch_timeout,
            retry_delay=self.options.retry_delay,
        )
        self.informers[name] = informer
        return informer

    # --- the run ---------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Watch, publish and act until cancelled."""
        try:
            await self._run()
        finally:
            self.stopped.set()
            self._wake()

    async def _run(self) -> None:
        core, apis = self.apis.core, self.apis
        queues = self.options.queues
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._publisher)
            if queues.config_map is None:
                await self._change(lambda t: self.view.on_config(self.view.config, t, "queues"))
            stages: list[list[Informer]] = [
                [
                    self._informer("namespaces", "namespace", core.list_namespace),
                    self._informer("priorityclasses", "priorityclass", apis.scheduling.list_priority_class),
                    self._informer(
                        "poddisruptionbudgets", "pdb", apis.policy.list_pod_disruption_budget_for_all_namespaces
                    ),
                    self._informer(
                        "podgroups", "podgroup", functools.partial(apis.custom.list_cluster_custom_object, *POD_GROUPS)
                    ),
                ],
                [self._informer("nodes", "node", core.list_node)],
                # One watch of every pod (ours waiting, ours bound, everyone else's for the room they take):
                # one stream keeps a pod's changes in order, where a watch of waiting pods and one of bound
                # pods would race at each Binding (the pod leaves the first as DELETED, joins the second).
                [self._informer("pods", "pod", core.list_pod_for_all_namespaces)],
            ]
            if queues.config_map is not None:
                namespace, name = queues.config_map
                lister = functools.partial(
                    core.list_namespaced_config_map, namespace, field_selector=f"metadata.name={name}"
                )
                stages[0].insert(0, self._informer("configmap", "configmap", lister))
            self.view.hold_asks()
            for stage in stages:
                for informer in stage:
                    tg.start_soon(informer.run)
                for informer in stage:
                    await informer.synced.wait()
            await self._change(self.view.release_asks)
            # A marker after the view: the decisions before it name every allocation Sniper holds.
            self._emit(Out([f.Sync(t=self.clock(), partition=self.options.partition, id=self.marker)]))
            tg.start_soon(self._read_history)
            await self._decisions(tg)

    async def _read_history(self) -> None:
        """The allocations Sniper holds up to the marker: the partition's decisions read from the start."""
        prefix, partition = self.bus.settings.prefix, self.options.partition
        group = f"{prefix}k8s-history-{self.marker.rsplit('/', 1)[-1]}"
        sub = await self.bus.subscribe_ready(DECISIONS, group=group, key=partition)
        try:
            while True:
                decision = await sub.receive()
                sub.ack()
                if isinstance(decision, d.Synced) and decision.event == self.marker:
                    break
                if isinstance(decision, d.Allocated):
                    self.history[decision.allocation] = (decision.app, decision.ask)
                elif isinstance(decision, d.Released | d.AllocationLost):
                    self.history.pop(decision.allocation, None)
        finally:
            with anyio.CancelScope(shield=True):
                await sub.aclose()
        self.history_read.set()

    async def _reconcile(self) -> None:
        """Release what Sniper holds for pods that went while no shim watched (a deletion no list shows),
        once every decision up to the marker has been acted on: then an allocation of a one-pod ask that no
        pod carries (nor a Binding on the way) has no pod, even if a pod of the same name waits again (a
        StatefulSet's); its ask goes with it, so that pod is a new ask."""
        await self.history_read.wait()
        view, t, partition = self.view, self.clock(), self.options.partition
        for allocation, (app, ask) in sorted(self.history.items()):
            if ":" in ask or allocation in view.allocations or allocation in view.gone:
                continue  # a gang's ask (NAMESPACE/task-group:NAME), or a pod carries it, or it was released
            log.info("allocation %s of pod %s: the pod went while unwatched; released", allocation, ask)
            view.gone.add(allocation)
            release = f.AllocationReleased(
                t=t, partition=partition, id=f"allocation/{allocation}/gone", allocation=allocation
            )
            ask_gone = f.AskRemoved(t=t, partition=partition, id=f"allocation/{allocation}/ask", app=app, ask=ask)
            self._emit(Out([release, ask_gone]))
            self._emit(view.ask_again(ask, t, f"after-{allocation}"))
        self.history.clear()

    async def _decisions(self, tg: anyio.abc.TaskGroup) -> None:
        group = self.options.group or decisions_group(self.bus.settings.prefix, self.options)
        sub = await self.bus.subscribe_ready(DECISIONS, group=group, key=self.options.partition)
        self.ready.set()
        self._wake()
        await self.history_read.wait()  # what Sniper still holds, before acting on anything older
        try:
            while True:
                batch, ended = await _next_batch(sub)
                cut = next(
                    (i + 1 for i, x in enumerate(batch) if isinstance(x, d.Synced) and x.event == self.marker), 0
                )
                await self._act(batch[:cut], tg)
                if cut:
                    await self._reconcile()  # every decision up to the marker is acted on
                    self.before_marker = False
                await self._act(batch[cut:], tg)
                for _ in batch:
                    sub.ack()
                self._wake()
                if ended:
                    return
        finally:
            with anyio.CancelScope(shield=True):
                await sub.aclose()

    async def _act(self, decisions: list[Any], tg: anyio.abc.TaskGroup) -> None:
        """Act on ``decisions``: one allocation's or ask's in their order, the others at once."""
        chains: dict[str, list[d.Decision]] = {}
        for decision in decisions:
            if self._fresh(decision):
                chains.setdefault(_subject(decision), []).append(decision)
        async with anyio.create_task_group() as acting:
            for chain in chains.values():
                acting.start_soon(self._act_in_order, chain, tg)

    def _fresh(self, decision: Any) -> bool:
        """Whether to act on ``decision``: this partition's, not a deposed core's, not acted on already."""
        if not isinstance(decision, d.Decision) or decision.partition != self.options.partition:
            return False
        epoch, seq = self.acted
        if decision.epoch < epoch:
            return False  # a deposed core's late output
        if decision.epoch == epoch and decision.seq <= seq:
            return False  # acted on already
        self.acted = (decision.epoch, decision.seq)
        return True

    async def _act_in_order(self, chain: list[d.Decision], tg: anyio.abc.TaskGroup) -> None:
        for decision in chain:
            await self._decide(decision, tg)

    async def _decide(self, decision: d.Decision, tg: anyio.abc.TaskGroup) -> None:
        match decision:
            case d.Allocated():
                await self._bind(decision)
            case d.Preempt(observe_only=False):
                await self._nominate(decision.for_app, decision.for_ask, decision.node)
                tg.start_soon(self._evict, decision)
            case d.NodeReserved():
                await self._nominate(decision.app, decision.ask, decision.node)
            case d.Kill():
                await self._kill(decision)
            case d.Rejected() if decision.ask or decision.app:
                for pod in self.view.pods_of(decision.app, decision.ask):
                    name = (
                        f"{(pod.get('metadata') or {}).get('name', '')}.sniper-rejected-{decision.epoch}-{decision.seq}"
                    )
                    await self.actions.reject(pod, decision.reason, name)
            case d.Released() | d.AllocationLost():
                self.view.released(decision.allocation)
            case _:
                pass

    async def _release(self, allocation: str, why: str) -> None:
        """Tell Sniper an allocation has no pod (any more): the loop closes (once: a pod seen going was
        released by the view already)."""
        if allocation in self.view.gone:
            return
        event = f.AllocationReleased(
            t=self.clock(), partition=self.options.partition, id=f"allocation/{allocation}/{why}", allocation=allocation
        )
        self.view.released(allocation)
        self._emit(Out([event]))

    async def _bind(self, decision: d.Allocated) -> None:
        if self.before_marker and decision.allocation not in self.history:
            return  # released or lost since: its pod is not this one, even if one waits under the name
        pod = self.view.pod_for(decision.app, decision.ask)
        if pod is None:
            await self._release(decision.allocation, "no-pod")
            return
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if spec.get("nodeName"):
            if self.view.allocation_of_pod.get(f"{meta.get('namespace')}/{meta.get('name')}") != decision.allocation:
                await self._release(decision.allocation, "bound-elsewhere")
            return  # bound already (a decision read again after a restart)
        self.view.promise(decision.allocation, pod)
        outcome = await self.actions.bind(
            str(meta.get("namespace", "")), str(meta.get("name", "")), decision.node, decision.allocation
        )
        if outcome is not Outcome.DONE:
            await self._release(decision.allocation, f"bind-{outcome.value}")

    async def _nominate(self, app: str, ask: str, node: str) -> None:
        for pod in self.view.pods_of(app, ask):
            meta = pod.get("metadata") or {}
            if (
                not (pod.get("spec") or {}).get("nodeName")
                and (pod.get("status") or {}).get("nominatedNodeName") != node
            ):
                await self.actions.nominate(str(meta.get("namespace", "")), str(meta.get("name", "")), node)

    def _victim(self, allocation: str) -> tuple[str, str, str] | None:
        pod = self.view.victim(allocation)
        if pod is None:
            return None
        meta = pod.get("metadata") or {}
        return str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", ""))

    async def _evict(self, decision: d.Preempt) -> None:
        victim = self._victim(decision.allocation)
        if victim is None:
            await self._release(decision.allocation, "gone")
            return
        if await self.actions.evict(*victim, deadline=decision.deadline) is Outcome.GONE:
            await self._release(decision.allocation, "gone")

    async def _kill(self, decision: d.Kill) -> None:
        victim = self._victim(decision.allocation)
        if victim is None:
            await self._release(decision.allocation, "gone")
            return
        if await self.actions.kill(*victim) is Outcome.GONE:
            await self._release(decision.allocation, "gone")


BATCH = 512  # decisions acted on together at most


async def _next_batch(sub: KafkaSubscription) -> tuple[list[Any], bool]:
    """The decisions waiting (at least one, at most :data:`BATCH`), and whether the stream ended."""
    batch: list[Any] = []
    try:
        batch.append(await sub.receive())
        while len(batch) < BATCH:
            batch.append(sub.receive_nowait())
    except anyio.WouldBlock:
        return batch, False
    except anyio.EndOfStream:
        return batch, True
    return batch, False


def _subject(decision: d.Decision) -> str:
    """What a decision acts on, so that two decisions about one pod are acted on in their order: the
    allocation it names, else its ask."""
    allocation = getattr(decision, "allocation", None)
    if isinstance(allocation, str):
        return f"allocation/{allocation}"
    return f"ask/{getattr(decision, 'app', '')}/{getattr(decision, 'ask', '')}"
