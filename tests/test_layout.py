"""The source layout: one import package, ``sniper``, whose first level holds the design's parts.

The wheel installs that one top-level name and nothing else, so a folder named ``core/`` or ``tools/`` in
a user's working directory cannot shadow a part of Sniper, and every file has one path for tracebacks,
mypy, ruff, grep and editors alike. The import rules between the parts are in ``test_import_graph``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / name for name in out.split()]


def test_no_tracked_file_is_a_symbolic_link() -> None:
    assert [str(p.relative_to(ROOT)) for p in _tracked() if p.is_symlink()] == []


def test_the_repository_holds_one_import_package_and_it_is_the_one_installed_and_type_checked() -> None:
    top = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))
    assert top == ["sniper", "tests"]
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["tool"]["setuptools"]["packages"]["find"]["include"] == ["sniper", "sniper.*"]
    assert config["tool"]["mypy"]["packages"] == ["sniper"]
    assert {"actors", "messages", "core", "transport", "cluster"} <= {
        p.parent.name for p in (ROOT / "sniper").glob("*/__init__.py")
    }


def test_the_wheel_installs_exactly_one_top_level_package(tmp_path: Path) -> None:
    source = tmp_path / "source"  # a copy, so the build leaves nothing in the checkout
    shutil.copytree(ROOT / "sniper", source / "sniper", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path, source],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("sniper_scheduler-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"sniper"}
    assert "sniper/py.typed" in names and "sniper/core/cache.py" in names


def test_sniper_imports_from_a_working_directory_with_folders_named_like_its_parts(tmp_path: Path) -> None:
    for name in ("core", "tools", "messages", "actors", "cluster"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise ImportError('the working directory, not Sniper')\n")
    (tmp_path / "core" / "config.py").write_text("raise ImportError('the working directory, not Sniper')\n")
    run = subprocess.run(
        [sys.executable, "-m", "sniper", "--version"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("sniper ")
    api = subprocess.run(
        [sys.executable, "-c", "import sniper, sniper.core.config; print(sniper.simulate.__module__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert api.returncode == 0, api.stderr
    assert api.stdout.strip() == "sniper"
