"""A CPU limit on one process through a Linux cgroup: what a container's ``cpus:`` or a pod's CPU limit does.

:class:`CpuLimit` makes one cgroup per limited process under the ``cpu`` controller (cgroup v2 where
the unified hierarchy offers it, v1's ``cpu`` hierarchy otherwise), caps it at ``cpus`` CPUs per
scheduling period, moves the process (all its threads) in, and removes the group on close. It needs a
writable cgroup file system (root on Linux); without one it raises :class:`CpuLimitUnavailable` with
the reason instead of running unlimited.
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path
from types import TracebackType

PERIOD_US = 100_000
CGROUP_ROOT = Path("/sys/fs/cgroup")


class CpuLimitUnavailable(RuntimeError):
    """No writable cgroup ``cpu`` controller here: CPU limits cannot be applied."""


def _controller() -> tuple[Path, bool]:
    """The directory to make groups in and whether it is cgroup v2."""
    unified = CGROUP_ROOT / "cgroup.controllers"
    if unified.exists() and "cpu" in unified.read_text().split():
        return CGROUP_ROOT, True
    v1 = CGROUP_ROOT / "cpu"
    if (v1 / "cpu.cfs_quota_us").exists():
        return v1, False
    raise CpuLimitUnavailable(f"no cgroup cpu controller under {CGROUP_ROOT}")


class CpuLimit:
    """Caps processes at ``cpus`` CPUs each, one cgroup per process; a context manager that cleans up."""

    def __init__(self, cpus: float) -> None:
        if not cpus >= 0.01:
            raise ValueError(f"a CPU limit must be at least 0.01 CPUs, got {cpus}")
        self.cpus = cpus
        self._groups: list[Path] = []

    def apply(self, pid: int) -> None:
        """Move process ``pid`` into a new group capped at ``self.cpus`` CPUs."""
        base, v2 = _controller()
        group = base / f"sniper-{uuid.uuid4().hex[:12]}"
        quota = max(1000, round(self.cpus * PERIOD_US))
        try:
            group.mkdir()
            self._groups.append(group)
            if v2:
                (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
            else:
                (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (group / "cpu.cfs_quota_us").write_text(str(quota))
            (group / "cgroup.procs").write_text(str(pid))
        except OSError as err:
            raise CpuLimitUnavailable(f"cannot limit process {pid} to {self.cpus} CPUs in {group}: {err}") from err

    def close(self) -> None:
        """Remove the groups (their processes must have exited, or they stay where they are)."""
        for group in self._groups:
            with contextlib.suppress(OSError):
                group.rmdir()
        self._groups.clear()

    def __enter__(self) -> CpuLimit:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
