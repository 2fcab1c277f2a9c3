"""What the package ships: its version on the command line, the Apache-2.0 licence, and PEP 561
``py.typed`` marker of its one import package."""

from __future__ import annotations

import tomllib
from importlib.metadata import version
from pathlib import Path

from typer.testing import CliRunner

from sniper.cli import app

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_sniper_version_prints_the_installed_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"sniper {version('sniper-scheduler')}\n"


def test_the_licence_is_apache_2_in_full_and_declared() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a pointer to it
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]


def test_the_package_ships_py_typed() -> None:
    assert (ROOT / "sniper" / "py.typed").is_file()
    assert PYPROJECT["tool"]["setuptools"]["package-data"]["sniper"] == ["py.typed"]
