"""Codecs: feed events as JSON Lines and msgpack, the actors' protocol on the wire, and trace reading
that reports each bad line (line number and reason) instead of raising."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from sniper.messages import codec
from sniper.messages import decisions as d
from sniper.messages import feed as f
from sniper.messages import protocol as p
from sniper.messages.codec import BadInput, decode_feed_lines, encode_json_line, feed_json, feed_msgpack, read_trace

FEED_EVENTS: list[f.Feed] = [
    f.PartitionConfigEvent(t=0, config={"name": "default", "queues": [{"name": "root"}]}),
    f.NodeAdded(t=0, node="n1", capacity={"memory": 65536, "vcore": 16000}, labels={"zone": "a"}),
    f.NodeUpdated(t=1, node="n1", schedulable=False),
    f.NodeRemoved(t=9, node="n1", id="ev-9"),
    f.AppAdded(t=1, app="a1", queue="root.a", user="u1", priority=3),
    f.AskAdded(t=1, app="a1", ask="m", resource={"memory": 4096}, count=10, am=True, duration=30.5, retry=False),
    f.AskAdded(t=2, app="a1", ask="pinned", resource={"gpu": 1}, node="n1"),
    f.AskRemoved(t=5, app="a1", ask="m"),
    f.AllocationReleased(t=7, allocation="alloc-1"),
    f.AppRemoved(t=50, app="a1", partition="other"),
]


@pytest.mark.parametrize("event", FEED_EVENTS, ids=lambda e: type(e).__name__)
def test_feed_events_round_trip(event: f.Feed) -> None:
    line = encode_json_line(event)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert codec.feed_json.decode(line) == event
    assert codec.feed_msgpack.decode(codec.msgpack_encoder.encode(event)) == event


def test_the_architecture_feed_examples_decode() -> None:
    lines = [
        '{"t":0,"type":"node_added","partition":"default","node":"n1","capacity":{"memory":65536,"vcore":16000},'
        '"labels":{}}',
        '{"t":9,"type":"node_removed","partition":"default","node":"n1"}',
        '{"t":1,"type":"app_added","partition":"default","app":"a1","queue":"root.a","user":"u1","priority":0}',
        '{"t":1,"type":"ask_added","partition":"default","app":"a1","ask":"a1-map","resource":{"memory":4096,'
        '"vcore":1000},"count":10,"priority":0,"am":false,"duration":30}',
        '{"t":5,"type":"ask_removed","partition":"default","app":"a1","ask":"a1-map"}',
        '{"t":7,"type":"allocation_released","partition":"default","allocation":"alloc-3"}',
        '{"t":50,"type":"app_removed","partition":"default","app":"a1"}',
        '{"t":3,"type":"node_updated","node":"n1","capacity":{"memory":1},"schedulable":true,"future_field":1}',
    ]
    decoded = list(decode_feed_lines(lines))
    assert not [x for x in decoded if isinstance(x, BadInput)]
    assert [type(x).__name__ for x in decoded] == [
        "NodeAdded",
        "NodeRemoved",
        "AppAdded",
        "AskAdded",
        "AskRemoved",
        "AllocationReleased",
        "AppRemoved",
        "NodeUpdated",
    ]
    ask = decoded[3]
    assert isinstance(ask, f.AskAdded)
    assert (ask.count, ask.duration, ask.retry, ask.node) == (10, 30.0, True, None)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"{not json", "malformed"),
        (b'{"type":"bogus"}', "Invalid value 'bogus'"),
        (b'{"node":"n1"}', "missing required field `type`"),
        (b'{"type":"app_added","app":"a"}', "missing required field `queue`"),
        (b'{"type":"node_added","node":"n1","capacity":{"memory":-1}}', "capacity: memory: -1 is outside 0 to 2**53"),
        (b'{"type":"node_added","node":"n1","capacity":{"memory":1.5}}', "capacity: memory: 1.5 is not an amount"),
        (b'{"type":"node_added","node":"n1","capacity":{"memory":"4Gx"}}', "capacity: memory: cannot parse quantity"),
        (b'{"type":"ask_added","app":"a","ask":"k","resource":{"vcore":"1e99"}}', "resource: vcore: cannot parse"),
        (
            b'{"type":"ask_added","app":"a","ask":"k","resource":{},"usage":{"gpu":"3m"}}',
            "usage: gpu: the milli suffix",
        ),
        (
            b'{"type":"ask_added","app":"a","ask":"k","resource":{"memory":"9000Ei"}}',
            "resource: memory: '9000Ei' is outside",
        ),
        (b'{"type":"node_added","node":"n1","capacity":{"gpu":true}}', "capacity: gpu: True is not an amount"),
        (b'{"type":"node_removed","node":""}', "length >= 1"),
        (b'{"t":-1,"type":"node_removed","node":"n1"}', ">= 0.0"),
        (b'{"type":"ask_added","app":"a","ask":"x","resource":{},"count":"3"}', "Expected `int`, got `str`"),
        (b"[1, 2]", "Expected `object`, got `array`"),
        (b'{"type":"node_removed","node":"n1"} trailing', "trailing characters"),
        (b'{"type":"node_removed","node":"\xff\xfe"}', "utf-8"),  # not UTF-8: reported, never raised
    ],
)
def test_bad_lines_are_reported_with_their_number_and_reason(line: bytes, reason: str) -> None:
    good = b'{"type":"node_removed","node":"n1"}'
    items = list(decode_feed_lines([good, line, good], source="trace.jsonl"))
    assert len(items) == 3
    assert items[0] == items[2] == f.NodeRemoved(node="n1")
    bad = items[1]
    assert isinstance(bad, BadInput)
    assert bad.where == "trace.jsonl:2"
    assert reason.lower() in bad.reason.lower()
    assert str(bad) == f"trace.jsonl:2: {bad.reason}"


@pytest.mark.parametrize("decoder", [feed_json, feed_msgpack], ids=["json", "msgpack"])
def test_resources_written_as_kubernetes_quantities_decode_to_sniper_units(decoder: Any) -> None:
    """``"4Gi"``, ``"500m"`` and ``"2"`` in a node, an ask, its usage and a reservation stage are read as
    the configuration reads them (memory bytes, vcore cores when bare), into the same integers an event
    written in Sniper's units holds; integers keep meaning Sniper's units."""
    written = {
        "node_added": {"node": "n1", "capacity": {"memory": "64Gi", "vcore": "16", "gpu": "4", "gpu-milli": 460}},
        "ask_added": {
            "app": "a",
            "ask": "k",
            "resource": {"memory": "1536Mi", "vcore": "500m", "pods": 1},
            "usage": {"memory": "1G", "vcore": "0.25"},
        },
        "reservation_submitted": {
            "reservation": "r",
            "queue": "root.q",
            "arrival": 0,
            "deadline": 10,
            "stages": [{"resource": {"memory": "2Gi", "vcore": 2000}, "duration": 5}],
        },
    }
    expected = [
        f.NodeAdded(node="n1", capacity={"memory": 65536, "vcore": 16000, "gpu": 4, "gpu-milli": 460}),
        f.AskAdded(
            app="a", ask="k", resource={"memory": 1536, "vcore": 500, "pods": 1}, usage={"memory": 954, "vcore": 250}
        ),
        f.ReservationSubmitted(
            reservation="r",
            queue="root.q",
            arrival=0,
            deadline=10,
            stages=[f.ReservationStage(resource={"memory": 2048, "vcore": 2000}, duration=5)],
        ),
    ]
    encode = msgspec.json.encode if decoder is feed_json else msgspec.msgpack.encode
    decoded = [decoder.decode(encode({"type": kind, **fields})) for kind, fields in written.items()]
    assert decoded == expected
    assert all(type(v) is int for e in decoded for v in getattr(e, "capacity", getattr(e, "resource", {})).values())


def test_blank_lines_and_comments_are_skipped_but_counted() -> None:
    lines = ["# a comment", "", "   ", '{"type":"node_removed","node":"n1"}', "{oops}"]
    items = list(decode_feed_lines(lines, source="t"))
    assert items[0] == f.NodeRemoved(node="n1")
    assert isinstance(items[1], BadInput) and items[1].where == "t:5"


def test_read_trace_skips_bad_lines_and_keeps_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(
        b"# hand-written\n"
        b'{"t":0,"type":"node_added","node":"n1","capacity":{"memory":8192}}\r\n'
        b'{"t":1,"type":"app_added","app":"a1"}\n'
        b"\n"
        b'{"t":1,"type":"app_added","app":"a1","queue":"root.a"}\n'
        b'{"t":2,"type":"ask_added","app":"a1","ask":"k","resource":{"memory":"4 GB"}}\n'
        b"\xff\xfe\n"
        b'{"t":3,"type":"ask_removed","app":"a1","ask":"k"}'  # no final newline
    )
    events, bad = read_trace(path)
    assert [type(e).__name__ for e in events] == ["NodeAdded", "AppAdded", "AskRemoved"]
    assert [b.where for b in bad] == [f"{path}:3", f"{path}:6", f"{path}:7"]
    assert "queue" in bad[0].reason
    assert "resource: memory: cannot parse quantity '4 GB'" in bad[1].reason


def test_read_trace_of_a_missing_file_raises_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        read_trace(tmp_path / "nope.jsonl")


DECISIONS: list[d.DecisionMsg] = [
    d.Allocated(allocation="alloc-1", app="a", ask="k", queue="root.a", node="n1", resource={"memory": 1}, seq=1),
    d.Preempt(
        allocation="alloc-1",
        app="a",
        queue="root.a",
        node="n1",
        resource={"memory": 1},
        for_ask="k2",
        for_app="b",
        for_queue="root.b",
        deadline=15.0,
        reservation="r1",
    ),
    d.Kill(allocation="alloc-1", app="a", queue="root.a", node="n1"),
    d.Released(allocation="alloc-1", app="a", queue="root.a", node="n1", resource={"memory": 1}),
    d.AllocationLost(allocation="alloc-1", app="a", ask="k", queue="root.a", node="n1", resource={}),
    d.Rejected(reason="why", app="a", ask="k", event="e1", epoch=4),
    d.ReservationEnded(reservation="r1", app="a", ask="k", node="n1", reason="timeout"),
]


@pytest.mark.parametrize("decision", DECISIONS, ids=lambda x: type(x).__name__)
def test_decisions_round_trip(decision: d.DecisionMsg) -> None:
    assert codec.decision_msgpack.decode(codec.msgpack_encoder.encode(decision)) == decision
    assert codec.decision_json.decode(codec.json_encoder.encode(decision)) == decision


def test_the_protocol_round_trips_on_the_wire() -> None:
    changes: list[p.ChangeMsg] = [
        p.ConfigSet(config={"name": "default"}),
        p.NodeSet(node="n1", capacity={"memory": 1}),
        p.AppSet(app="a", queue="root.a", submit_seq=1),
        p.AskSet(app="a", ask="k", resource={"memory": 1}, count=2, required_node="n1"),
        p.AllocationSet(allocation="x", app="a", ask="k", node="n1", resource={"memory": 1}),
        p.AllocationGone(allocation="x"),
        p.Clock(now=3.5),
    ]
    view = p.ViewDelta(
        seq=7, now=3.5, changes=changes, outcomes=[p.ProposalOutcome(proposal="q", accepted=1, rejected={"a": "b"})]
    )
    assert codec.view_msgpack.decode(codec.msgpack_encoder.encode(view)) == view
    proposal = p.AllocationProposal(id="q", view_seq=7, placements=[p.Placement(app="a", ask="k", node="n1")])
    resync = p.ResyncRequest(reader="allocator", after_seq=3)
    for message in (proposal, resync):
        assert codec.proposal_msgpack.decode(codec.msgpack_encoder.encode(message)) == message


def test_a_feed_decoder_refuses_other_messages() -> None:
    with pytest.raises(msgspec.DecodeError):
        codec.feed_msgpack.decode(codec.msgpack_encoder.encode(p.Tick(now=1.0)))
