"""The documentation keeps up with the code: README links resolve inside the repo, and docs/ names every
config key, feed and decision field, and report key the code has."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import msgspec
import pytest

from sniper.core import config
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.simulator.run import SimulationSettings, run_simulation
from sniper.simulator.scenarios import scenario

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = ("architecture.md", "feed.md", "config.md", "report.md", "yarn-baseline.md")


def _text(page: str) -> str:
    return (DOCS / page).read_text(encoding="utf-8")


def test_readme_links_every_page_and_every_link_resolves() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    pages = sorted(DOCS.glob("*.md"))
    linked_from_docs = {target for page in pages for target in re.findall(r"\]\(([\w.-]+\.md)", page.read_text())}
    for page in pages:
        assert f"(docs/{page.name})" in readme or page.name in linked_from_docs, f"nothing links {page.name}"
    for source in [ROOT / "README.md", *pages]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", source.read_text(encoding="utf-8")):
            if "://" not in target:
                assert (source.parent / target).exists(), f"{source.name} links to missing {target}"


def _struct_keys(struct: type[msgspec.Struct]) -> tuple[str, ...]:
    return struct.__struct_fields__


def test_config_page_names_every_key() -> None:
    text = _text("config.md")
    keys = [fld.name for fld in dataclasses.fields(config.PreemptionConfig)]
    keys += ["enabled", "quotapreemptionenabled", *config.KNOWN_PROPERTIES, *config.UNSUPPORTED_PROPERTIES]
    keys += [*_struct_keys(config._RawQueue), *_struct_keys(config._RawPartition)]
    keys += [*config.POLICIES, *config.VICTIM_COSTS, *config.NODE_SORT_POLICIES, *config.APP_SORT_POLICIES]
    keys += [*config.QUEUE_PREEMPTION_POLICIES, *config.OTHER_SPELLINGS]
    missing = sorted({k for k in keys if f"`{k}`" not in text and f"`{k}:" not in text})
    assert not missing


@pytest.mark.parametrize("union", [f.Feed, d.DecisionMsg], ids=["feed", "decisions"])
def test_feed_page_names_every_event_and_field(union: object) -> None:
    text = _text("feed.md")
    for struct in typing.get_args(union):
        tag = struct.__struct_config__.tag
        assert f"### `{tag}`" in text, tag
        missing = [k for k in _struct_keys(struct) if f"`{k}`" not in text]
        assert not missing, (tag, missing)


def test_report_page_defines_every_key_of_a_report() -> None:
    sc = scenario("large_containers", 0)
    report = run_simulation(sc.events, sc.config, SimulationSettings(until=100)).report
    assert report["preemption_log"]
    text = _text("report.md")
    keys = set(report) | {f"preemptions.{k}" for k in report["preemptions"]} | {f"mask.{k}" for k in report["mask"]}
    keys |= {k for entry in report["preemption_log"][:1] for k in entry}
    keys |= {k for ttg in report["time_to_guarantee"].values() for k in ttg}
    missing = sorted(k for k in keys if f"`{k}`" not in text)
    assert not missing
