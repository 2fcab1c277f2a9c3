"""The source layout: one path per file, and the layers' import rules.

Every top-level folder with an ``__init__.py`` is an import package of its own name, so tracebacks, mypy,
ruff, grep and editors name a file the same way. The sans-IO ``core`` imports only ``messages``, the
standard library and pure data libraries: never an actor, a transport or the command line.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PURE_LIBRARIES = {"msgspec", "sortedcontainers", "yaml"}


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / name for name in out.split()]


def _packages() -> list[str]:
    return sorted(p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name != "tests")


def _imports(path: Path) -> set[str]:
    """Top-level names a module imports, at run time or for typing, anywhere in its body."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_tracked_file_is_a_symbolic_link() -> None:
    assert [str(p.relative_to(ROOT)) for p in _tracked() if p.is_symlink()] == []


def test_every_top_level_package_is_installed_and_type_checked_under_its_own_name() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    found = config["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted(name.rstrip("*") for name in found) == _packages()
    assert sorted(config["tool"]["mypy"]["packages"]) == _packages()


def test_the_sans_io_core_imports_only_messages_the_standard_library_and_pure_data_libraries() -> None:
    allowed = {"core", "messages", "__future__"} | PURE_LIBRARIES | set(sys.stdlib_module_names)
    offenders = {
        str(path.relative_to(ROOT)): sorted(_imports(path) - allowed) for path in sorted((ROOT / "core").rglob("*.py"))
    }
    assert {name: bad for name, bad in offenders.items() if bad} == {}


def test_messages_import_nothing_of_the_project_but_messages() -> None:
    project = set(_packages()) - {"messages"}
    modules = sorted((ROOT / "messages").rglob("*.py"))
    offenders = {str(path.relative_to(ROOT)): sorted(_imports(path) & project) for path in modules}
    assert {name: bad for name, bad in offenders.items() if bad} == {}
