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


def _anchor(heading: str) -> str:
    """A heading's anchor as GitHub and most renderers make it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_anchor(h) for h in re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M)}


def test_every_link_to_a_heading_names_a_heading_that_exists() -> None:
    for source in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", source.read_text(encoding="utf-8")):
            page = source.parent / target if target else source
            if "://" not in target and page.suffix == ".md":
                assert anchor in _anchors(page), f"{source.name} links to {target}#{anchor}, no such heading"


def test_every_citation_of_the_architecture_names_one_of_its_headings_or_invariants() -> None:
    """Code, tests and docs cite a heading of docs/architecture.md, or an invariant by its number there,
    never a section by its number: reordering the page breaks no citation unseen."""
    page = _text("architecture.md")
    headings = re.findall(r"^## (.+)$", page, re.M)
    invariants = page.split("\n## Invariants\n", 1)[1].split("\n## ", 1)[0]
    numbers = set(re.findall(r"^(\d+)\. ", invariants, re.M)) | set(re.findall(r"\((\d+[a-z])\b", invariants))
    sources = [*(ROOT / "sniper").rglob("*.py"), *(ROOT / "tests").glob("*.py"), *DOCS.glob("*.md"), ROOT / "README.md"]
    by_number = re.compile(r"ARCHITECTURE,? (?:sections?|invariant|\d)|[Ss]ections? ?-?\d")
    cited = 0
    for source in sources:
        text = " ".join(source.read_text(encoding="utf-8").split())
        assert not by_number.search(text), f"{source.name} cites a section by its number"
        for rest in re.findall(r"[Aa]rchitecture: ([^)]{0,60})", text):
            cited += 1
            invariant = re.match(r"invariants? (\d+[a-z]?)", rest)
            if invariant:
                assert invariant[1] in numbers, f"{source.name}: no invariant {invariant[1]}"
            else:
                assert any(rest.startswith(h) for h in headings), f"{source.name}: no heading begins {rest!r}"
    assert cited


def test_every_test_and_source_file_the_docs_name_exists() -> None:
    """The pages say where a rule is enforced and tested (docs/design.md): each test they name by its
    function and each ``sniper/`` or ``tests/`` path they name is there."""
    tests = {name for path in (ROOT / "tests").glob("*.py") for name in re.findall(r"def (test_\w+)", path.read_text())}
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        named = set(re.findall(r"`(test_\w+)`", text))
        assert named <= tests, f"{page.name} names tests that do not exist: {sorted(named - tests)}"
        paths = set(re.findall(r"`((?:sniper|tests)/[\w./-]+)`", text))
        missing = sorted(path for path in paths if not (ROOT / path).exists())
        assert not missing, f"{page.name} names files that do not exist: {missing}"
    assert "test_stale_placements_are_rejected_with_the_reason" in _text("design.md")
