"""The import graph of the source packages, read from the source (every ``import``, whether at run time,
inside a function or under ``TYPE_CHECKING``): the decision logic in ``sniper.core`` imports only ``sniper.messages``,
the standard library and the third-party libraries the project declares for it (msgspec, PyYAML,
sortedcontainers); ``sniper.messages`` imports only the standard library and msgspec; and no two modules of a
package import each other, directly or around a circle. Of the tests: no module imports a test module.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "sniper"
# The parts of the one package: its first level (``sniper.core``, ...) and ``sniper`` itself for the
# modules directly in it (the Python API, the preview).
PACKAGES = ("sniper", *sorted(f"sniper.{p.parent.name}" for p in SOURCE.glob("*/__init__.py")))
CORE_LIBRARIES = {"msgspec", "yaml", "sortedcontainers"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(SOURCE.rglob("*.py"))}


def _part(name: str) -> str:
    """The part of the package a dotted name belongs to (``sniper.core.cache`` -> ``sniper.core``); a name
    outside the package is its top-level name (``msgspec.json`` -> ``msgspec``)."""
    parts = name.split(".")
    if parts[0] != "sniper":
        return parts[0]
    if len(parts) > 1 and f"sniper.{parts[1]}" in PACKAGES:
        return f"sniper.{parts[1]}"
    return "sniper"


def _imported(path: Path) -> set[str]:
    """Every dotted name an import in ``path`` names (``from a import b`` names ``a`` and ``a.b``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _module_of(name: str) -> str | None:
    """The source module a dotted import name lands in (``None``: not one of ours)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


GRAPH = {
    module: {m for m in map(_module_of, _imported(path)) if m is not None and m != module}
    for module, path in MODULES.items()
}


def _outside(package: str) -> dict[str, set[str]]:
    """Per module of ``package``, the parts (or outside top-level names) it imports from outside it."""
    out: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        if _part(module) == package:
            tops = {_part(name) for name in _imported(path)} - {package}
            if tops:
                out[module] = tops
    return out


def _circles(modules: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(modules):
        if start in index:
            continue
        work = [(start, iter(sorted(modules[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next((e for e in edges if e in modules), None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(modules[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_core_imports_only_messages_the_standard_library_and_its_declared_libraries() -> None:
    allowed = {"sniper.messages", *CORE_LIBRARIES, *sys.stdlib_module_names}
    stray = {module: sorted(tops - allowed) for module, tops in _outside("sniper.core").items() if tops - allowed}
    assert stray == {}


# What would let a decision depend on something but its inputs: a clock, a random draw, the process's
# environment, other threads or tasks, the network.
NONDETERMINISTIC = {"time", "datetime", "random", "secrets", "uuid", "os", "threading", "asyncio", "socket", "select"}


def test_core_reads_no_clock_draws_no_random_number_and_runs_nothing_concurrently() -> None:
    """Time is a message: the core's clock is the feed's and the ticks' time, so the same inputs give
    the same decisions, in the simulator, on replay and in a new owner."""
    stray = {
        module: sorted(tops & NONDETERMINISTIC)
        for module, tops in _outside("sniper.core").items()
        if tops & NONDETERMINISTIC
    }
    assert stray == {}


def test_the_libraries_core_uses_are_declared_dependencies() -> None:
    declared = (ROOT / "pyproject.toml").read_text().lower()
    distributions = {"msgspec": "msgspec", "yaml": "pyyaml", "sortedcontainers": "sortedcontainers"}
    assert all(f'"{distributions[name]}>=' in declared for name in CORE_LIBRARIES)


def test_messages_import_only_the_standard_library_and_msgspec() -> None:
    allowed = {"msgspec", *sys.stdlib_module_names}
    stray = {module: sorted(tops - allowed) for module, tops in _outside("sniper.messages").items() if tops - allowed}
    assert stray == {}


@pytest.mark.parametrize("package", PACKAGES)
def test_no_modules_of_a_package_import_each_other_around_a_circle(package: str) -> None:
    inside = {
        module: {m for m in deps if _part(m) == package} for module, deps in GRAPH.items() if _part(module) == package
    }
    assert _circles(inside) == []


def test_every_module_is_in_a_part_and_the_core_is_seen() -> None:
    assert len(MODULES) > 100 and all(name.startswith("sniper") for name in MODULES)
    assert "sniper.core" in PACKAGES and _outside("sniper.core")


def test_the_circle_finder_finds_a_circle_through_three_modules() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


TESTS = ROOT / "tests"
TEST_MODULES = {path.stem for path in TESTS.glob("test_*.py")}


def _test_modules_named(source: str, test_modules: set[str]) -> set[str]:
    """The test modules the imports of ``source`` name, absolute or relative, at any depth of a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            dotted = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            dotted = [node.module or "", *(f"{node.module or ''}.{alias.name}" for alias in node.names)]
        else:
            continue
        found.update(part for name in dotted for part in name.split(".") if part in test_modules)
    return found


def test_no_test_module_imports_another_the_shared_set_ups_live_in_support_modules() -> None:
    """A test module imported by another ties the two files' set-ups together (a change made for one
    file's tests changes the other's): what tests share lives in ``tests/*_support.py``."""
    importing = {
        path.relative_to(ROOT).as_posix(): sorted(names)
        for path in sorted(TESTS.rglob("*.py"))
        if (names := _test_modules_named(path.read_text(encoding="utf-8"), TEST_MODULES - {path.stem}))
    }
    assert importing == {}, "move what they share into a tests/*_support.py module"


def test_the_test_import_finder_sees_every_spelling_of_an_import() -> None:
    spellings = [
        "from tests.test_cli import TINY",
        "import tests.test_cli",
        "from tests import test_cli",
        "from . import test_cli",
        "from .test_cli import TINY",
        "def f() -> None:\n    from tests.test_cli import TINY",
    ]
    assert all(_test_modules_named(source, {"test_cli"}) == {"test_cli"} for source in spellings)
    assert _test_modules_named("from tests.simulation_support import TINY", {"test_cli"}) == set()
