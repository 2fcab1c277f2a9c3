"""The audit trail: each decision that takes room from someone is one INFO line on ``sniper.audit``
naming victim, beneficiary, node and reason; the per-queue tally counts containers and resources."""

from __future__ import annotations

import json
import logging

import pytest

from sniper.cluster.audit import BENEFICIARY, VICTIM, PreemptionTally, audit
from sniper.cluster.obs import StructuredFormatter
from sniper.messages import decisions as d

GPU_VICTIM = d.Preempt(
    t=10.0,
    allocation="a-1",
    app="train-7",
    queue="root.research",
    node="gpu-3",
    resource={"memory": 64 * 1024, "vcore": 8000, "gpu": 4},
    for_ask="serve",
    for_app="infer-2",
    for_queue="root.prod",
    deadline=40.0,
    reservation="r-1",
    reason="root.research over its ideal by 4 GPUs",
    over_ideal={"gpu": 4},
)


def _lines(caplog: pytest.LogCaptureFixture, style: str = "kv") -> list[str]:
    return [StructuredFormatter(style).format(r) for r in caplog.records if r.name == "sniper.audit"]


def test_a_kill_names_the_beneficiary_of_its_preemption(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sniper.audit")
    tally = PreemptionTally()
    kill = d.Kill(t=40.0, allocation="a-1", app="train-7", queue="root.research", node="gpu-3")
    audit("p", [GPU_VICTIM, kill], tally)
    preempt_line, kill_line = _lines(caplog)
    assert "action=preempt" in preempt_line and "victim=a-1" in preempt_line and "node=gpu-3" in preempt_line
    assert "beneficiary=infer-2/serve" in preempt_line and "beneficiary_queue=root.prod" in preempt_line
    assert 'resource={"memory":68719476736,"vcore":8,"gpu":4}' in preempt_line  # base units, numbers
    assert "(64 GiB, 8 cores, 4 GPUs)" in preempt_line  # the message, for people
    assert 'reason="root.research over its ideal by 4 GPUs"' in preempt_line
    assert "action=kill" in kill_line and "victim=a-1" in kill_line and "beneficiary=infer-2/serve" in kill_line
    assert 'reason="grace period expired"' in kill_line
    assert tally.in_flight == {}  # the kill closed it
    assert tally.by_queue[("root.research", VICTIM)].resource == GPU_VICTIM.resource
    assert tally.by_queue[("root.prod", BENEFICIARY)].containers == 1


def test_the_json_audit_line_gives_the_resource_as_numbers_in_base_units(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sniper.audit")
    audit("p", [GPU_VICTIM], PreemptionTally())
    (line,) = _lines(caplog, "json")
    record = json.loads(line)
    assert record["resource"] == {"memory": 64 * 2**30, "vcore": 8, "gpu": 4}
    assert "(64 GiB, 8 cores, 4 GPUs)" in record["msg"] and record["reason"].endswith("by 4 GPUs")


def test_a_kill_whose_preemption_this_process_never_saw_still_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sniper.audit")
    audit("p", [d.Kill(t=1.0, allocation="a-9", app="x", queue="root.b", node="n1")], PreemptionTally())
    (line,) = _lines(caplog, "json")
    assert '"victim": "a-9"' in line and '"beneficiary": ""' in line and "beneficiary not known" in line


def test_observe_only_preemptions_change_nothing_and_are_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sniper.audit")
    tally = PreemptionTally()
    from msgspec.structs import replace

    audit("p", [replace(GPU_VICTIM, observe_only=True)], tally)
    assert _lines(caplog) == [] and tally.by_queue == {} and tally.in_flight == {}


def test_preempt_requests_and_dereservations_are_on_the_trail(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sniper.audit")
    request = d.PreemptRequest(
        t=5.0,
        request="req-1",
        app="etl-1",
        queue="root.batch",
        resource={"memory": 8192, "vcore": 2000},
        deadline=35.0,
        containers=[
            d.ContractContainer(
                allocation=f"c-{i}",
                node=f"n{i}",
                resource={"memory": 4096, "vcore": 1000},
                for_app="web",
                for_ask="front",
                for_queue="root.prod",
            )
            for i in (1, 2)
        ],
        reason="root.batch over its ideal",
    )
    unreserved = d.NodeUnreserved(
        t=6.0,
        reservation="nr-1",
        app="etl-2",
        ask="big",
        queue="root.batch",
        node="n7",
        reason="dereserved",
        policy="sniper",
    )
    placed = d.NodeUnreserved(
        t=7.0, reservation="nr-2", app="etl-3", ask="big", queue="root.batch", node="n8", reason="placed"
    )
    audit("p", [request, unreserved, placed], PreemptionTally())
    first, second, dereserve = _lines(caplog)
    for line, victim, node in ((first, "c-1", "n1"), (second, "c-2", "n2")):
        assert "action=preempt_request" in line and f"victim={victim}" in line and f"node={node}" in line
        assert (
            "request=req-1" in line
            and "beneficiary=web/front" in line
            and 'resource={"memory":4294967296,"vcore":1}' in line
        )
    assert "action=dereserve" in dereserve and "victim=nr-1" in dereserve and "node=n7" in dereserve
    assert "victim_app=etl-2" in dereserve and "policy=sniper" in dereserve


def test_nothing_is_formatted_when_info_is_off(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="sniper.audit")
    tally = PreemptionTally()
    audit("p", [GPU_VICTIM], tally)
    assert _lines(caplog) == [] and tally.by_queue[("root.research", VICTIM)].containers == 1


def test_a_partition_removed_is_one_line_with_what_it_held(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sniper.audit")
    tally = PreemptionTally()
    removed = d.PartitionRemoved(t=50.0, apps=3, allocations=12, nodes=4, reason="next trace")
    audit("p", [removed], tally)
    (line,) = _lines(caplog)
    assert "action=partition_removed" in line and "allocations=12" in line and 'reason="next trace"' in line


def test_names_with_terminal_control_characters_reach_the_audit_log_escaped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An allocation, app and node named with ESC and BEL (feed data) are written escaped in both log
    formats: the line holds no control character and still names them."""
    caplog.set_level(logging.INFO, logger="sniper.audit")
    hostile = d.Preempt(
        t=1.0,
        allocation="a\x1b[2J",
        app="app\x07",
        queue="root.a",
        node="n\x1b]0;pwned\x07",
        resource={"memory": 1024},
        for_ask="k",
        for_app="b",
        for_queue="root.b",
        deadline=2.0,
        reservation="r",
        reason="over its ideal",
    )
    audit("p", [hostile], PreemptionTally())
    for style in ("kv", "json"):
        (line,) = _lines(caplog, style)
        assert line.isprintable(), line
        assert "\\u001b[2J" in line and "\\u0007" in line
