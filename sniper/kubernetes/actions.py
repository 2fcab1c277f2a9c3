"""What the shim does to the cluster for a decision: bind, nominate, evict, kill, mark unschedulable.

What it owns: the API calls of Sniper's decisions and what each answer means. Invariants: a Binding
carries the allocation id in the pod annotation ``sniper.apache.org/allocation`` (the API server copies a
Binding's annotations onto the pod, so a restarted shim reads it back); a ``409`` for a pod already bound to the
same node is a success; an eviction's ``gracePeriodSeconds`` is an integer, ``ceil(deadline - now)``;
a ``429`` (a disruption budget spent) is retried until the deadline, after which the core's ``kill``
comes; a kill is a DELETE with grace 0 and a UID precondition, so it never deletes a new pod that took
the name. Each call answers :class:`Outcome`: done, gone (the pod no longer exists as the decision
knew it), or refused with the API server's reason.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

import anyio

from sniper.kubernetes.client import Answer, Apis, call
from sniper.kubernetes.objects import ALLOCATION_ANNOTATION

log = logging.getLogger("sniper.k8s")


class Outcome(enum.Enum):
    DONE = "done"
    GONE = "gone"
    REFUSED = "refused"


def _outcome(answer: Answer, what: str) -> Outcome:
    if answer.ok:
        return Outcome.DONE
    if answer.status in (404, 409):  # 409 on a DELETE or eviction: the UID precondition failed
        return Outcome.GONE
    log.warning("%s refused: %s", what, answer.reason)
    return Outcome.REFUSED


class Actions:
    """The decisions' calls, for pods of the scheduler ``scheduler``; ``clock`` is the feed's clock."""

    def __init__(self, apis: Apis, scheduler: str, clock: Callable[[], float], *, retry_delay: float = 1.0) -> None:
        self.apis = apis
        self.scheduler = scheduler
        self.clock = clock
        self.retry_delay = retry_delay
        self.calls: dict[str, int] = {}  # action -> calls made, for the operator and the tests

    def _count(self, action: str) -> None:
        self.calls[action] = self.calls.get(action, 0) + 1

    async def bind(self, namespace: str, name: str, node: str, allocation: str) -> Outcome:
        """Bind the pod to ``node``; the Binding is answered with a ``Status``, never a Binding."""
        self._count("bind")
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "annotations": {ALLOCATION_ANNOTATION: allocation}},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        answer = await call(self.apis.core.create_namespaced_pod_binding, name, namespace, body)
        if answer.status == 409:
            pod = await call(self.apis.core.read_namespaced_pod, name, namespace)
            if pod.ok and (pod.body.get("spec") or {}).get("nodeName") == node:
                return Outcome.DONE
            if pod.status == 404:
                return Outcome.GONE
            log.warning("bind %s/%s to %s refused: %s", namespace, name, node, answer.reason)
            return Outcome.REFUSED
        if answer.status == 404:
            return Outcome.GONE
        return _outcome(answer, f"bind {namespace}/{name} to {node}")

    async def nominate(self, namespace: str, name: str, node: str | None) -> Outcome:
        """Set (or clear, with None) the pod's ``status.nominatedNodeName``, as kube-scheduler does."""
        self._count("nominate")
        patch = {"status": {"nominatedNodeName": node}}
        answer = await call(self.apis.core.patch_namespaced_pod_status, name, namespace, patch)
        return _outcome(answer, f"nominate {node} for {namespace}/{name}")

    async def evict(self, namespace: str, name: str, uid: str, deadline: float) -> Outcome:
        """The Eviction API with the grace left until ``deadline``; a ``429`` is retried until then."""
        while True:
            self._count("evict")
            grace = max(0, math.ceil(deadline - self.clock()))
            body = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": {"gracePeriodSeconds": grace, "preconditions": {"uid": uid}},
            }
            answer = await call(self.apis.core.create_namespaced_pod_eviction, name, namespace, body)
            if answer.status != 429:
                return _outcome(answer, f"evict {namespace}/{name}")
            wait = min(self.retry_delay, deadline - self.clock())
            if wait <= 0:
                log.info(
                    "evict %s/%s: refused until its deadline (%s); the kill follows", namespace, name, answer.reason
                )
                return Outcome.REFUSED
            await anyio.sleep(wait)  # a budget's retry interval, bounded by the deadline

    async def kill(self, namespace: str, name: str, uid: str) -> Outcome:
        """DELETE with grace 0, only the pod with ``uid`` (a new pod of the same name is left alone)."""
        self._count("kill")
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        answer = await call(self.apis.core.delete_namespaced_pod, name, namespace, body=body)
        return _outcome(answer, f"kill {namespace}/{name}")

    async def reject(self, pod: Mapping[str, Any], reason: str, event_name: str) -> Outcome:
        """``PodScheduled=False``, reason ``Unschedulable``, and a Warning Event saying ``reason``."""
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "default")), str(meta.get("name", ""))
        self._count("reject")
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": reason}
        answer = await call(
            self.apis.core.patch_namespaced_pod_status, name, namespace, {"status": {"conditions": [condition]}}
        )
        outcome = _outcome(answer, f"mark {namespace}/{name} unschedulable")
        await self.event(pod, "FailedScheduling", reason, event_name)
        return outcome

    async def event(self, pod: Mapping[str, Any], reason: str, message: str, event_name: str) -> None:
        """A Warning Event on the pod; ``event_name`` derives from what caused it, so a replay is a 409."""
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace", "default"))
        self._count("event")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event_name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": namespace,
                "name": meta.get("name", ""),
                "uid": meta.get("uid", ""),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning",
            "source": {"component": self.scheduler},
            "reportingComponent": self.scheduler,
            "count": 1,
        }
        answer = await call(self.apis.core.create_namespaced_event, namespace, body)
        if not answer.ok and answer.status != 409:
            log.warning("event on %s/%s refused: %s", namespace, meta.get("name", ""), answer.reason)
