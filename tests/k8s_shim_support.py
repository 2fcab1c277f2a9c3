"""The whole path for the shim's scenario tests: the API-server stand-in, the real broker, a real core.

:func:`whole_path` runs a core (in this process, on the test's Kafka topics) and a reader of its
decisions, and hands a :class:`WholePath` whose :meth:`~WholePath.start_shim` runs ``sniper k8s``'s
:func:`~sniper.kubernetes.process.run_shim` against the stand-in through its kubeconfig; a shim can be
killed (cancelled mid-way, as SIGTERM stops it: nothing it was doing is finished) and started again.
Tests wait on conditions with :meth:`WholePath.until`, woken by every change of the stand-in and every
decision, never by sleeping.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from sniper.cluster.process import CoreOptions
from sniper.cluster.roles import core_process
from sniper.core.config import load_config
from sniper.kubernetes.objects import ALLOCATION_ANNOTATION
from sniper.kubernetes.process import ProcessOptions, run_shim
from sniper.kubernetes.shim import QueuesSource, Shim, ShimOptions
from sniper.messages import decisions as d
from sniper.transport.bus import DECISIONS
from sniper.transport.kafka import KafkaBus, KafkaSettings
from tests.kube_apiserver import KubeApiServer, node, pod

# Two queues with equal guarantees; batch may borrow what prod does not use, and gives it back with a grace.
QUEUES = """
partitions:
  - name: default
    preemption: {policy: sniper, interval: 0.2, grace: 3.0, total_preemption_per_round: 1.0}
    queues:
      - name: root
        queues:
          - name: prod
            resources: {guaranteed: {vcore: 4, memory: 8Gi}}
          - name: batch
            resources: {guaranteed: {vcore: 4, memory: 8Gi}}
"""


@dataclasses.dataclass(eq=False)
class RunningShim:
    identity: str
    scope: anyio.CancelScope
    shims: list[Shim] = dataclasses.field(default_factory=list)  # one per leadership term
    done: anyio.Event = dataclasses.field(default_factory=anyio.Event)

    @property
    def shim(self) -> Shim:
        return self.shims[-1]

    def kill(self) -> None:
        self.scope.cancel()


@dataclasses.dataclass(eq=False)
class WholePath:
    api: KubeApiServer
    settings: KafkaSettings
    queues: Path | None
    tg: anyio.abc.TaskGroup
    decisions: list[Any] = dataclasses.field(default_factory=list)
    changed: anyio.Event = dataclasses.field(default_factory=anyio.Event)

    def wake(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    async def until(self, condition: Callable[[], Any], timeout: float = 60.0) -> Any:  # noqa: ASYNC109
        """Wait until ``condition()`` is truthy, looking again at every change of the stand-in and every
        decision; returns its value."""
        with anyio.fail_after(timeout):
            while True:
                mine, theirs = self.changed, self.api.changed
                value = condition()
                if value:
                    return value
                async with anyio.create_task_group() as tg:

                    async def wake(event: anyio.Event) -> None:
                        await event.wait()
                        tg.cancel_scope.cancel()

                    tg.start_soon(wake, mine)
                    tg.start_soon(wake, theirs)

    def of(self, kind: type[Any]) -> list[Any]:
        return [x for x in self.decisions if isinstance(x, kind)]

    async def start_shim(
        self, identity: str = "shim-a", *, elect: bool = True, queues: QueuesSource | None = None, group: str = ""
    ) -> RunningShim:
        running = RunningShim(identity, anyio.CancelScope())

        def started(shim: Shim) -> None:
            running.shims.append(shim)
            self.wake()

        options = ProcessOptions(
            shim=ShimOptions(queues=queues or QueuesSource(path=self.queues), retry_delay=0.2, group=group),
            kubeconfig=self.api.kubeconfig,
            identity=identity,
            elect=elect,
            lease_duration=3,
            renew_deadline=2.0,
            retry_period=0.5,
        )

        async def run() -> None:
            with running.scope:
                await run_shim(self.settings, options, started=started)
            running.done.set()
            self.wake()

        self.tg.start_soon(run)
        return running

    async def ready(self, running: RunningShim) -> Shim:
        """The shim once it leads, has listed everything and reads decisions."""
        await self.until(lambda: running.shims and running.shims[-1].ready.is_set())
        return running.shim

    async def start_leading(
        self, identity: str = "shim-a", *, queues: QueuesSource | None = None, group: str = ""
    ) -> RunningShim:
        """A shim started and waited for until it is :meth:`ready`."""
        running = await self.start_shim(identity, queues=queues, group=group)
        await self.ready(running)
        return running

    async def kill(self, running: RunningShim) -> None:
        """Kill the shim and wait until it has stopped."""
        running.kill()
        await self.until(running.done.is_set)

    async def until_bound(self, *keys: str) -> None:
        """Wait until every pod of ``keys`` (``namespace/name``) is bound."""
        await self.until(lambda: set(keys) <= set(self.api.bound()))

    def allocations_of(self, ask: str) -> list[str]:
        """The allocations of every ``allocated`` decision for ``ask`` read so far, in order (the decisions
        reach the test after the binding the API shows: wait with :meth:`until` for the ones expected)."""
        return [a.allocation for a in self.of(d.Allocated) if a.ask == ask]

    def released(self) -> set[str]:
        """The allocations released so far."""
        return {r.allocation for r in self.of(d.Released)}


@contextlib.asynccontextmanager
async def whole_path(
    api: KubeApiServer, settings: KafkaSettings, tmp_path: Path, queues: str | None = QUEUES
) -> AsyncIterator[WholePath]:
    """The whole path with ``queues`` (None: no queues file, as a trial runs: the shim's placement creates
    each namespace's queue)."""
    path: Path | None = None
    if queues is not None:
        path = tmp_path / "queues.yaml"
        path.write_text(queues)
    config = load_config(path) if path is not None else None
    async with KafkaBus(settings) as bus, anyio.create_task_group() as tg:
        core = core_process(settings, CoreOptions(group=f"{settings.prefix}core", config=config, tick=0.1))
        tg.start_soon(core.run)
        sub = await bus.subscribe_ready(DECISIONS, group=f"{settings.prefix}test-reader")
        world = WholePath(api, settings, path, tg)

        async def read() -> None:
            while True:
                try:
                    decision = await sub.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    return
                sub.ack()
                if isinstance(decision, d.Decision):
                    world.decisions.append(decision)
                    world.wake()

        tg.start_soon(read)
        try:
            yield world
        finally:
            tg.cancel_scope.cancel()


def add_nodes(api: KubeApiServer, *names: str, cpu: str = "4", memory: str = "8Gi") -> None:
    """One node of ``cpu`` and ``memory`` for each name."""
    for name in names:
        api.create(node(name, cpu=cpu, memory=memory))


def add_etl_budget(api: KubeApiServer) -> None:
    """A PodDisruptionBudget on the batch app ``etl``: at most one of its pods unavailable."""
    api.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "etl", "namespace": "batch"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"applicationId": "etl"}}},
        }
    )


def add_app_pods(
    api: KubeApiServer, namespace: str, app: str, *names: str, cpu: str = "1", memory: str = "1Gi"
) -> None:
    """One pod of the app ``app`` in ``namespace`` for each name, asking ``cpu`` and ``memory``."""
    for name in names:
        api.create(pod(name, namespace, cpu=cpu, memory=memory, labels={"applicationId": app}))


async def fill_with_batch(world: WholePath, count: int = 8) -> list[str]:
    """``count`` one-core pods of the app ``etl`` in the namespace (and queue) batch, waited for until all
    are bound; their keys."""
    names = [f"batch-{i}" for i in range(count)]
    add_app_pods(world.api, "batch", "etl", *names)
    keys = [f"batch/{n}" for n in names]
    await world.until_bound(*keys)
    return keys


def evicted(world: WholePath) -> dict[str, int]:
    """``namespace/name`` -> the gracePeriodSeconds of each eviction the API server accepted."""
    out = {}
    for served in world.api.served(verb="create", resource="pods/eviction"):
        if served.code in (200, 201):
            out[f"{served.namespace}/{served.name}"] = served.body["deleteOptions"]["gracePeriodSeconds"]
    return out


def victims(world: WholePath) -> set[str]:
    """The pods Sniper chose as victims: the pods carrying the ``preempt`` decisions' allocations."""
    chosen = {p.allocation for p in world.of(d.Preempt)}
    return {
        f"{o['metadata']['namespace']}/{o['metadata']['name']}"
        for o in world.api.list_of("pods")
        if (o["metadata"].get("annotations") or {}).get(ALLOCATION_ANNOTATION) in chosen
    }


def prod_bound(api: KubeApiServer) -> dict[str, str]:
    """The pods of the namespace prod that are bound, and their nodes."""
    return {k: v for k, v in api.bound().items() if k.startswith("prod/")}


def spend_etl_budget(api: KubeApiServer) -> None:
    """Two pods of ``etl`` fall unready (a kubelet reports them not Ready): the budget of
    :func:`add_etl_budget` over eight pods is spent, so every eviction is refused."""

    def unready(target: dict[str, Any]) -> None:
        target["status"]["conditions"] = [{"type": "Ready", "status": "False"}]

    api.modify("pods", "batch-0", unready, "batch")
    api.modify("pods", "batch-1", unready, "batch")
