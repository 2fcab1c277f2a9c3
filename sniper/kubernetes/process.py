"""The ``sniper k8s`` process: the API server connection, Kafka, the Lease and, embedded, a core.

What it owns: the composition of one shim process and its first-contact errors. Invariants: only the
replica holding the Lease runs a :class:`~sniper.kubernetes.shim.Shim` (a standby watches nothing and acts on
nothing, and a replica that becomes the leader starts from a fresh list, as a restarted one does); an
API server that cannot be reached or refuses the shim's first call stops the process with one line
(:class:`KubeUnavailable`) instead of retrying unseen; embedded, the broker and a core run in the same
process and stop with it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import anyio

from sniper.kubernetes.client import Apis, call, connect
from sniper.kubernetes.leader import LEASE, LeaderElector
from sniper.kubernetes.shim import Shim, ShimOptions, initial_config
from sniper.transport.kafka import KafkaBus, KafkaSettings


class KubeUnavailable(RuntimeError):
    """The API server cannot be reached, or refuses the shim's first call."""


@dataclasses.dataclass(frozen=True, slots=True)
class ProcessOptions:
    shim: ShimOptions = dataclasses.field(default_factory=ShimOptions)
    kubeconfig: Path | None = None
    namespace: str | None = None  # the Lease's namespace (default: the kubeconfig's or the pod's)
    identity: str = dataclasses.field(default_factory=socket.gethostname)  # the Lease holder's name
    elect: bool = True  # False: act without a Lease (one replica only)
    lease_duration: int = 15
    renew_deadline: float = 10.0
    retry_period: float = 2.0


async def first_contact(apis: Apis, server: str) -> None:
    """One cheap call, so a wrong address or a missing permission is said at once."""
    try:
        answer = await call(apis.coordination.read_namespaced_lease, LEASE, apis.namespace)
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        raise KubeUnavailable(f"cannot reach the Kubernetes API server at {server}: {e}") from None
    if answer.status in (401, 403):
        raise KubeUnavailable(f"the API server at {server} refused the shim ({answer.reason}); check its ClusterRole")


@contextlib.asynccontextmanager
async def shim_apis(options: ProcessOptions) -> AsyncIterator[Apis]:
    async with connect(options.kubeconfig, namespace=options.namespace) as apis:
        await first_contact(apis, apis.core.api_client.configuration.host)
        yield apis


@contextlib.asynccontextmanager
async def _bus(settings: KafkaSettings) -> AsyncIterator[KafkaBus]:
    """The shim's Kafka bus, closed (its records flushed) even when the shim is cancelled."""
    bus = KafkaBus(settings)
    try:
        await bus.start()
        yield bus
    finally:
        with anyio.CancelScope(shield=True):
            await bus.aclose()


async def run_shim(
    settings: KafkaSettings,
    options: ProcessOptions,
    *,
    started: Callable[[Shim], None] | None = None,
) -> None:
    """Run the shim until cancelled: wait for the Lease (if electing), then watch, publish and act while
    holding it. ``started`` sees each :class:`Shim` as it starts (a new one every time leadership is won)."""
    config = initial_config(options.shim)  # a bad --queues file fails here, before any connection
    async with shim_apis(options) as apis, _bus(settings) as bus:

        async def lead() -> None:
            shim = Shim(apis, bus, options.shim, config=config)
            if started is not None:
                started(shim)
            await shim.run()

        if not options.elect:
            await lead()
            return
        elector = LeaderElector(
            apis,
            options.identity,
            lease_duration=options.lease_duration,
            renew_deadline=options.renew_deadline,
            retry_period=options.retry_period,
        )
        await elector.lead(lead)


async def run_embedded(settings: KafkaSettings, options: ProcessOptions, core_group: str = "sniper-core") -> None:
    """The shim with a core in the same process (the broker is the caller's), as YuniKorn runs its core
    inside its scheduler pod."""
    from sniper.cluster.process import CoreOptions
    from sniper.cluster.roles import core_process

    core = core_process(settings, CoreOptions(group=core_group))
    async with anyio.create_task_group() as tg:
        tg.start_soon(core.run)
        await run_shim(settings, options)
        tg.cancel_scope.cancel()
