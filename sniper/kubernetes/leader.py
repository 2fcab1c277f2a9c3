"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does.

What it owns: whether this replica may act. Invariants: a replica leads only while it holds the Lease
(``holderIdentity`` is its identity and its last renewal is younger than ``leaseDurationSeconds``); it
takes a Lease that is absent or expired with an update at the resourceVersion it read, so of two
replicas racing for it the API server's ``409`` leaves exactly one; a leader that cannot renew within
``renew_deadline`` stops leading (its work is cancelled) before another replica can take the Lease; one
that stops for any other reason (its work done, the process shut down) gives the Lease up at once.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import anyio

from sniper.kubernetes.client import Apis, call

log = logging.getLogger("sniper.k8s")

LEASE = "sniper-k8s"


def _micro_time(when: datetime.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


class LeaderElector:
    """Holds the Lease ``name`` in the shim's namespace for ``identity`` while :meth:`lead` runs."""

    def __init__(
        self,
        apis: Apis,
        identity: str,
        *,
        name: str = LEASE,
        lease_duration: int = 15,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError("need 0 < retry_period < renew_deadline < lease_duration")
        self.apis = apis
        self.identity = identity
        self.name = name
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.now = now
        self.leading = False
        self.terms = 0  # times this replica became the leader

    def _spec(self, acquired: str | None, transitions: int) -> dict[str, Any]:
        stamp = _micro_time(self.now())
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_duration,
            "acquireTime": acquired or stamp,
            "renewTime": stamp,
            "leaseTransitions": transitions,
        }

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this replica holds the Lease afterwards."""
        coordination, namespace = self.apis.coordination, self.apis.namespace
        current = await call(coordination.read_namespaced_lease, self.name, namespace)
        if current.status == 404:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": namespace},
                "spec": self._spec(None, 0),
            }
            return (await call(coordination.create_namespaced_lease, namespace, body)).ok
        if not current.ok:
            log.warning("lease %s/%s: %s", namespace, self.name, current.reason)
            return False
        spec = current.body.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder != self.identity:
            renewed = _parse_time(spec.get("renewTime"))
            duration = int(spec.get("leaseDurationSeconds") or self.lease_duration)
            if holder and renewed is not None and renewed + datetime.timedelta(seconds=duration) > self.now():
                return False
            transitions += 1
        lease = dict(current.body)
        lease["spec"] = self._spec(spec.get("acquireTime") if holder == self.identity else None, transitions)
        replaced = await call(coordination.replace_namespaced_lease, self.name, namespace, lease)
        return replaced.ok  # a 409: another replica wrote the Lease since we read it

    async def release(self) -> None:
        """Give the Lease up at once (a clean shutdown), so a standby need not wait for it to expire."""
        coordination, namespace = self.apis.coordination, self.apis.namespace
        current = await call(coordination.read_namespaced_lease, self.name, namespace)
        spec = current.body.get("spec") or {}
        if current.ok and spec.get("holderIdentity") == self.identity:
            lease = dict(current.body)
            lease["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1}
            await call(coordination.replace_namespaced_lease, self.name, namespace, lease)

    async def _acquire(self, period: float) -> None:
        """Return once this replica holds the Lease, trying every ``period`` seconds."""
        while True:
            try:
                if await self.try_acquire_or_renew():
                    return
            except (aiohttp.ClientError, OSError, TimeoutError) as e:
                log.warning("lease %s: %s", self.name, e or type(e).__name__)
            await anyio.sleep(period)  # the election's polling period

    async def lead(self, work: Callable[[], Awaitable[None]]) -> None:
        """Wait for the Lease, run ``work`` while holding it (cancelled when a renewal fails), and repeat
        after losing it. Returns when ``work`` returns."""
        while True:
            await self._acquire(self.retry_period)
            self.leading = True
            self.terms += 1
            log.info("%s leads (lease %s/%s)", self.identity, self.apis.namespace, self.name)
            finished = lost = False
            try:
                async with anyio.create_task_group() as tg:

                    async def renew() -> None:
                        nonlocal lost
                        while True:
                            await anyio.sleep(self.retry_period)  # the renewal period
                            with anyio.move_on_after(self.renew_deadline) as deadline:
                                await self._acquire(self.retry_period / 2)
                            if not deadline.cancelled_caught:
                                continue
                            log.warning("%s lost the lease %s: stepping down", self.identity, self.name)
                            lost = True
                            tg.cancel_scope.cancel()
                            return

                    tg.start_soon(renew)
                    await work()
                    finished = True
                    tg.cancel_scope.cancel()
            finally:
                self.leading = False
                if not lost:  # done or shut down: a standby need not wait for the Lease to expire
                    with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                        await self.release()
            if finished:
                return
