"""``sniper k8s``: the Kubernetes shim (:mod:`sniper.kubernetes`) as a command.

A thin shell like the rest of the CLI: it parses flags, builds the Kafka settings (flags, then
``SNIPER_KAFKA_*``) and runs :func:`sniper.kubernetes.process.run_shim` on uvloop until SIGINT or SIGTERM;
``--embedded`` runs the bundled broker and a core in the same process. Errors become one line on
stderr and exit 2 (bad flags, kubeconfig or queues) or 3 (the API server or Kafka unreachable).
"""

from __future__ import annotations

import contextlib
import logging
import socket
from pathlib import Path
from typing import Annotated, Any

import typer

from sniper.cli.app import EXIT_RUNTIME, LogFormat, LogLevel, app, console, fail, literal
from sniper.cli.kafka import _run, _until_signal_or, with_kafka_flags


@app.command("k8s")
@with_kafka_flags
def k8s(
    bootstrap: Annotated[
        str | None,
        typer.Option(help="Kafka bootstrap HOST:PORT (default: $SNIPER_KAFKA_BOOTSTRAP; --embedded for a trial)"),
    ] = None,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(help="kubeconfig file (default: the in-cluster service account, $KUBECONFIG, ~/.kube/config)"),
    ] = None,
    scheduler_name: Annotated[str, typer.Option(help="the pods' spec.schedulerName this shim schedules")] = "sniper",
    partition: Annotated[str, typer.Option(help="the scheduler partition the cluster is")] = "default",
    queues: Annotated[
        str | None,
        typer.Option(
            help="queues.yaml FILE, or configmap:NAMESPACE/NAME (watched: a change is a new partition_config)"
        ),
    ] = None,
    embedded: Annotated[
        bool, typer.Option("--embedded", help="run the bundled Kafka broker and a core in this process")
    ] = False,
    identity: Annotated[
        str | None, typer.Option(help="this replica's name in the Lease (default: the host name, a pod's name)")
    ] = None,
    namespace: Annotated[
        str | None, typer.Option(help="namespace of the sniper-k8s Lease (default: the kubeconfig's or the pod's)")
    ] = None,
    elect: Annotated[
        bool, typer.Option("--elect/--no-elect", help="elect a leader with a Lease (--no-elect: one replica only)")
    ] = True,
    log_format: Annotated[LogFormat, typer.Option(help="log line format")] = LogFormat.kv,
    log_level: Annotated[LogLevel, typer.Option(case_sensitive=False, help="least severe log records written")] = (
        LogLevel.info
    ),
    *,
    kafka_flags: dict[str, Any],
) -> None:
    """Schedule Kubernetes pods with Sniper: watch the cluster onto the feed, act on the decisions."""
    from sniper.cluster.kafka_env import bootstrap_or_embedded, build_settings
    from sniper.cluster.obs import setup_logging
    from sniper.core.config import ConfigError
    from sniper.kubernetes.client import KubeConfigError
    from sniper.kubernetes.process import KubeUnavailable, ProcessOptions, run_embedded, run_shim
    from sniper.kubernetes.shim import QueuesSource, ShimOptions, initial_config
    from sniper.transport.broker import EmbeddedBroker, resolve_bootstrap

    setup_logging(log_format.value, log_level.level)
    # A failed command is one line on stderr; its traceback only at --log-level debug.
    logging.getLogger("sniper.cli").setLevel(max(log_level.level, logging.WARNING))
    if not embedded and resolve_bootstrap(bootstrap) is None:
        fail("no Kafka: give --bootstrap HOST:PORT (or SNIPER_KAFKA_BOOTSTRAP), or --embedded for a trial")
    if embedded and bootstrap is not None:
        fail("--embedded runs its own broker: give --bootstrap or --embedded, not both")
    options = ProcessOptions(
        shim=ShimOptions(scheduler_name=scheduler_name, partition=partition, queues=QueuesSource.parse(queues)),
        kubeconfig=kubeconfig,
        namespace=namespace,
        identity=identity or socket.gethostname(),
        elect=elect,
    )
    try:
        initial_config(options.shim)
    except ConfigError as e:
        fail(" ".join(f"--queues: {e}".split()))  # a YAML error's lines as one

    async def main() -> None:
        async with contextlib.AsyncExitStack() as stack:
            if embedded:
                broker = await stack.enter_async_context(EmbeddedBroker())
                console.print(literal(f"embedded broker at {broker.bootstrap} and a core in this process"))
                address, own = broker.bootstrap, True
            else:
                address, own = await stack.enter_async_context(bootstrap_or_embedded(bootstrap))
            settings = build_settings(address, embedded=own, **kafka_flags)
            work = run_embedded if embedded else run_shim
            try:
                await _until_signal_or(lambda: work(settings, options))
            except* KubeConfigError as group:
                fail(str(group.exceptions[0]))
            except* KubeUnavailable as group:
                fail(str(group.exceptions[0]), EXIT_RUNTIME)

    logging.getLogger("sniper.k8s").debug("options: %s", options)
    with contextlib.suppress(KeyboardInterrupt):
        _run(main)
