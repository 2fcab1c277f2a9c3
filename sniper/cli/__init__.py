"""The ``sniper`` command line: one typer app (:mod:`sniper.cli.app`) with the simulation commands
(:mod:`sniper.cli.sim`), the Kafka cluster commands (:mod:`sniper.cli.kafka`),
the Kubernetes shim (:mod:`sniper.cli.k8s`) and the importers
(:mod:`sniper.cli.importing`). Exit codes: 0 fine, 1 an invariant was violated, 2 bad input or usage,
3 a runtime failure.
"""

from sniper.cli import importing, k8s, kafka, sim
from sniper.cli.app import app

__all__ = ["app", "importing", "k8s", "kafka", "main", "sim"]


def main() -> None:
    app()
