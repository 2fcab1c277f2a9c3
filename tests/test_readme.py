"""The README's set-up is what CI runs, and the repository stands alone.

CI (``.ci/run``) clones the repository into a folder with nothing beside it and runs the README's two
set-up commands there; these tests keep the two in step and make sure no file reaches outside the clone.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _setup_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Set-up: two commands", 1)[1]
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block is not None, "the set-up section has no code block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def test_the_readme_gives_two_setup_commands_and_ci_runs_both_verbatim() -> None:
    commands = _setup_commands()
    assert len(commands) == 2
    assert "sniper simulate" in commands[0]
    assert "pytest" in commands[1]
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    for command in commands:
        assert command in ci_lines, f"CI does not run the README's {command!r}"


def test_ci_runs_in_a_clone_with_nothing_beside_it() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "git clone" in script and "mktemp -d" in script


def test_no_tracked_file_points_outside_the_repository() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    pattern = re.compile(r"\.\./shared|[\"']shared/|shared/(conformance|design|seeds)")
    offenders = [
        name
        for name in tracked.split()
        if (ROOT / name).is_file()
        and not (ROOT / name).is_symlink()
        and pattern.search((ROOT / name).read_text(encoding="utf-8", errors="replace"))
    ]
    assert offenders == []
