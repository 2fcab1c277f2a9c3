"""``sniper check-config`` prints every queue property the configuration reads: each known property set
to a value other than its default changes the queue's line, and the queue keys beside ``properties``
(``reservable``, ``parent``) show too."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sniper.cli import app
from sniper.core.config import KNOWN_PROPERTIES

# A value other than the default for each queue property the configuration reads.
SET = {
    "application.sort.policy": "fair",
    "priority.offset": "5",
    "preemption.policy": "fence",
    "preemption.delay": "45s",
    "preemption.min.runtime": "10m",
    "queue.state": "stopped",
    "quota.preemption.delay": "5m",
    "fairshare.halflife": "8h",
}


def check_config(tmp_path: Path, **queue: object) -> str:
    """``check-config``'s line for leaf ``root.a`` (guarantee 1 GiB) with ``queue``'s keys."""
    return run(tmp_path, **queue)[0]


def run(tmp_path: Path, **queue: object) -> tuple[str, str]:
    """``check-config`` on leaf ``root.a`` (guarantee 1 GiB) with ``queue``'s keys: its line, and the
    whole output with line wrapping undone."""
    raw = {
        "partitions": [
            {
                "name": "default",
                "queues": [
                    {
                        "name": "root",
                        "queues": [{"name": "a", "resources": {"guaranteed": {"memory": "1Gi"}}, **queue}],
                    }
                ],
            }
        ]
    }
    path = tmp_path / "queues.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["check-config", str(path)])
    assert result.exit_code == 0, result.output
    [line] = [x.strip() for x in result.output.splitlines() if x.strip().startswith("a: ")]
    return line, " ".join(result.output.split())


def test_every_known_queue_property_has_a_value_in_this_test() -> None:
    assert set(SET) == set(KNOWN_PROPERTIES)


@pytest.mark.parametrize("key", sorted(SET))
def test_check_config_prints_each_queue_property_it_reads(tmp_path: Path, key: str) -> None:
    assert check_config(tmp_path, properties={key: SET[key]}) != check_config(tmp_path)


def test_check_config_prints_the_fair_share_half_life_and_the_quota_preemption_delay(tmp_path: Path) -> None:
    line = check_config(tmp_path, properties={"fairshare.halflife": "8h", "quota.preemption.delay": "5m"})
    assert "; quota preempted 300 s over its max" in line
    assert "; fair share half-life 28800 s" in line


def test_a_half_life_that_is_no_duration_prints_nothing_and_warns(tmp_path: Path) -> None:
    line, text = run(tmp_path, properties={"fairshare.halflife": "8"})
    assert line == check_config(tmp_path)
    assert "warning: queue root.a.fairshare.halflife: '8' is not a positive duration" in text


def test_check_config_prints_a_reservable_queue_and_a_declared_parent(tmp_path: Path) -> None:
    assert "; reservable (SLO reservations)" in check_config(tmp_path, reservable=True)
    assert "; parent for placement rules (a leaf until they add queues)" in check_config(tmp_path, parent=True)
