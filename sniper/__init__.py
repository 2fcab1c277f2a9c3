"""Sniper's Python API: run a simulation or a policy comparison and get the report struct.

``sniper.simulate`` and ``sniper.compare`` run the same actors as ``sniper simulate`` and ``sniper
compare``, in virtual time on the memory bus: the same trace, configuration, policy and seed give the
same decisions and the same :class:`Report`. A trace is a path to a JSON Lines file, the name of a
bundled scenario (``"demo"``, ``"large_containers"``, ...), or a list of feed events already decoded.
``queues`` is a ``queues.yaml`` path, its parsed mapping, or a :class:`SchedulerConfig`; without it the
scenario's or the trace's own ``partition_config`` is used. Bad input raises :class:`ValueError`
(:class:`ConfigError` for a configuration), never a partial report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from sniper.core.config import ConfigError, SchedulerConfig, load_config, parse_config
from sniper.messages import feed as f
from sniper.messages.codec import read_trace
from sniper.simulator.report import Report

__all__ = ["ConfigError", "Report", "SchedulerConfig", "__version__", "compare", "simulate"]

try:
    __version__ = version("sniper-scheduler")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

Trace = str | Path | Sequence[f.Feed]
Queues = str | Path | Mapping[str, Any] | SchedulerConfig | None


def _inputs(trace: Trace, queues: Queues, seed: int) -> tuple[list[f.Feed], SchedulerConfig | None]:
    """The events and the configuration in force (``queues``, else the bundled scenario's)."""
    from sniper.simulator.scenarios import scenario

    if isinstance(queues, SchedulerConfig) or queues is None:
        config = queues
    elif isinstance(queues, Mapping):
        config = parse_config(queues)
    else:
        config = load_config(queues)
    events: list[f.Feed]
    path: Path | None = None
    if not isinstance(trace, str | Path):
        events = list(trace)
    elif (path := Path(trace)).exists():
        events, bad = read_trace(path)
        if bad:
            raise ValueError(f"{path}: {len(bad)} bad line(s), the first: {bad[0]}")
    else:
        sc = scenario(str(trace), seed)  # ValueError names the bundled scenarios
        events, config = sc.events, config or sc.config
    if config is None and not any(isinstance(e, f.PartitionConfigEvent) for e in events):
        raise ValueError(f"{path or 'the trace'} configures no partition (no partition_config event): pass queues=")
    return events, config


def simulate(
    trace: Trace = "demo",
    *,
    queues: Queues = None,
    policy: str | None = None,
    seed: int = 0,
    until: float | None = None,
) -> Report:
    """Replay ``trace`` through Sniper's actors in virtual time and return its report.

    ``policy`` (``"sniper"``, ``"proportional"`` or ``"none"``) overrides every partition's configured
    preemption policy; ``until`` stops at that simulated second. The report is the struct ``sniper
    simulate --report`` writes (``msgspec.json.encode(report)`` gives the same JSON).
    """
    from sniper.simulator.ideal_view import ideal_for_model
    from sniper.simulator.run import SimulationSettings, run_simulation

    events, config = _inputs(trace, queues, seed)
    settings = SimulationSettings(until=until, seed=seed, policy=policy)
    return run_simulation(events, config, settings, ideal_fn=ideal_for_model).summary


def compare(
    trace: Trace = "demo",
    *,
    queues: Queues = None,
    policies: Sequence[str] = ("sniper", "proportional", "none"),
    seed: int = 0,
    until: float | None = None,
) -> dict[str, Report]:
    """Run ``trace`` once per policy (the same events and configuration) and return ``{policy: report}``
    in the order of ``policies``, as ``sniper compare --report`` writes it."""
    from sniper.simulator.compare import compare as run_compare
    from sniper.simulator.run import SimulationSettings

    known = ("sniper", "proportional", "none")
    unknown = [p for p in policies if p not in known]
    if unknown or not policies:
        raise ValueError(f"unknown policies {unknown or list(policies)}: choose among {', '.join(known)}")
    events, config = _inputs(trace, queues, seed)
    results = run_compare(events, config, list(policies), SimulationSettings(until=until, seed=seed))
    return {name: run.summary for name, run in results.items()}
