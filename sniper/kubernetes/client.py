"""The shim's connection to the API server: kubeconfig resolution as kubectl's, and raw JSON calls.

What it owns: which cluster ``sniper k8s`` talks to (``--kubeconfig PATH``, else the in-cluster service
account, else ``$KUBECONFIG``, else ``~/.kube/config``; a plain ``http://`` server without credentials
works) and :func:`call`, the one way the shim calls the API: a kubernetes-asyncio operation with
``_preload_content=False``, answered as ``(status, decoded JSON)``. Objects stay plain JSON dicts as the
API server serves them (camelCase keys), never the client's model classes; an answer that is not 2xx
is returned, not raised, so every caller decides what a 404, 409 or 429 means to it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
import anyio
import msgspec
import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.config.config_exception import ConfigException

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeConfigError(ValueError):
    """No usable cluster configuration (the message says which source and why)."""


class Answer(NamedTuple):
    status: int
    body: dict[str, Any]

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def reason(self) -> str:
        """The API server's own words for a refusal (a ``Status``'s message), else the HTTP status."""
        message = self.body.get("message")
        return str(message) if message else f"HTTP {self.status}"


class Apis(NamedTuple):
    """The typed API groups the shim uses, over one connection."""

    core: Any  # CoreV1Api
    coordination: Any  # CoordinationV1Api
    scheduling: Any  # SchedulingV1Api
    policy: Any  # PolicyV1Api
    custom: Any  # CustomObjectsApi
    namespace: str  # the shim's own namespace (its Lease lives there)


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and (SERVICE_ACCOUNT / "token").is_file()


async def load_configuration(kubeconfig: Path | None = None) -> tuple[Any, str]:
    """The client configuration and the shim's namespace, resolved as kubectl resolves them."""
    configuration = k8s.Configuration()
    try:
        if kubeconfig is None and _in_cluster():
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return configuration, (SERVICE_ACCOUNT / "namespace").read_text().strip() or "default"
        path = kubeconfig or Path(os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or "~/.kube/config")
        path = path.expanduser()
        if not path.is_file():
            raise KubeConfigError(f"no kubeconfig at {path} and not running in a cluster (--kubeconfig PATH)")
        loader = k8s_config.kube_config.KubeConfigLoader(
            config_dict=k8s_config.kube_config.KubeConfigMerger(str(path)).config,
            config_base_path=str(path.parent),
        )
        await loader.load_and_set(configuration)
        context = loader.current_context or {}
        namespace = (context.get("context") or {}).get("namespace") or "default"
    except ConfigException as e:
        raise KubeConfigError(f"kubeconfig: {e}") from None
    except yaml.YAMLError as e:
        raise KubeConfigError(" ".join(f"kubeconfig {kubeconfig or ''}: not valid YAML: {e}".split())) from None
    except (OSError, ValueError, KeyError, AttributeError, TypeError) as e:
        if isinstance(e, KubeConfigError):
            raise
        raise KubeConfigError(f"kubeconfig {kubeconfig or ''}: {e}".replace(" :", ":")) from None
    return configuration, str(namespace)


@contextlib.asynccontextmanager
async def connect(kubeconfig: Path | None = None, *, namespace: str | None = None) -> AsyncIterator[Apis]:
    """The API groups over one connection pool for the duration; ``namespace`` overrides the config's."""
    configuration, own = await load_configuration(kubeconfig)
    api = k8s.ApiClient(configuration)
    try:
        yield Apis(
            core=k8s.CoreV1Api(api),
            coordination=k8s.CoordinationV1Api(api),
            scheduling=k8s.SchedulingV1Api(api),
            policy=k8s.PolicyV1Api(api),
            custom=k8s.CustomObjectsApi(api),
            namespace=namespace or own,
        )
    finally:
        with anyio.CancelScope(shield=True):  # closed even when the shim is cancelled
            await api.close()


REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=30)


async def call(operation: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Answer:
    """``operation(*args, **kwargs)`` answered as ``(status, JSON body)``; a body that is not a JSON
    object (an empty one, a proxy's HTML page) reads as ``{}``."""
    kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
    response = await operation(*args, _preload_content=False, **kwargs)
    try:
        data = await response.read()
    finally:
        response.release()
    try:
        body = msgspec.json.decode(data) if data else {}
    except msgspec.DecodeError:
        body = {}
    return Answer(response.status, body if isinstance(body, dict) else {})
