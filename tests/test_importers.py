"""``sniper import sls`` and ``sniper import pods-csv``: every column and key used, SLS's defaults,
malformed rows reported with their line and skipped, the window, time-scale and node-sample options,
deterministic output that ``sniper simulate`` runs as it is."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from sniper.cli import app
from sniper.core.config import parse_partition
from sniper.core.resources import parse_resource
from sniper.importers.common import (
    AskSpec,
    ImportError_,
    ImportOptions,
    JobSpec,
    NodeSpec,
    Workload,
    build_trace,
    write_trace,
)
from sniper.importers.pods_csv import Arrival, GpuShare, read_pods_csv
from sniper.importers.sls import read_sls
from sniper.messages import feed as f

DATA = Path(__file__).parent / "data"
PODS = DATA / "gpu_v2023" / "pods.csv"
MULTIGPU = DATA / "gpu_v2023" / "multigpu.csv"
NODES = DATA / "gpu_v2023" / "nodes.csv"
SLS_JOBS = DATA / "sls" / "jobs.json"
SLS_NODES = DATA / "sls" / "nodes.json"
RUMEN = DATA / "sls" / "rumen.json"

POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
)
NODE_CSV = (
    "sn,cpu_milli,memory_mib,gpu,model\nn-cpu,32000,262144,0,\nn-v100,96000,786432,8,V100M32\nn-t4,64000,131072,2,T4\n"
)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def by_type(events: list[f.Feed], kind: type[f.FeedEvent]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------------- pods-csv


def test_every_pod_and_node_column_is_used(tmp_path: Path) -> None:
    pods = write(
        tmp_path,
        "pods.csv",
        POD_HEADER
        + "\n"
        + "p-multi,88000,327680,8,1000,,Burstable,Succeeded,1000,5000,1200\n"
        + "p-share,4000,15258,1,220,V100M16|V100M32|V100M32,LS,Running,1100,1500,1100\n"
        + "p-cpu,2000,4096,0,0,nan,BE,Failed,1300,1350,1310\n"
        + "p-wait,6000,12288,1,460,T4,BE,Pending,1400,1900,\n",
    )
    nodes = write(tmp_path, "nodes.csv", NODE_CSV)
    work = read_pods_csv(pods, nodes)
    assert work.bad == []
    events = build_trace(work, ImportOptions()).events
    # nodes: sn, cpu_milli, memory_mib, gpu (whole GPUs -> gpu-milli), model (-> gpu_model label)
    assert {
        (n.node, tuple(sorted(n.capacity.items())), tuple(n.labels.items())) for n in by_type(events, f.NodeAdded)
    } == {
        ("n-cpu", (("memory", 262144), ("vcore", 32000)), ()),
        ("n-v100", (("gpu-milli", 8000), ("memory", 786432), ("vcore", 96000)), (("gpu_model", "V100M32"),)),
        ("n-t4", (("gpu-milli", 2000), ("memory", 131072), ("vcore", 64000)), (("gpu_model", "T4"),)),
    }
    apps = {a.app: a for a in by_type(events, f.AppAdded)}
    assert {a: x.queue for a, x in apps.items()} == {  # qos is the queue by default
        "p-multi": "root.Burstable",
        "p-share": "root.LS",
        "p-cpu": "root.BE",
        "p-wait": "root.BE",
    }
    asks = {a.ask: a for a in by_type(events, f.AskAdded)}
    # creation_time is the arrival (relative to the first), deletion - scheduled the run time
    assert (asks["p-multi"].t, asks["p-multi"].duration) == (0.0, 3800.0)
    assert asks["p-multi"].resource == {"memory": 327680, "vcore": 88000, "gpu-milli": 8000}  # num_gpu x gpu_milli
    assert asks["p-share"].resource == {"memory": 15258, "vcore": 4000, "gpu-milli": 220}
    assert asks["p-share"].node_selector == {"gpu_model": ["V100M16", "V100M32"]}  # gpu_spec, deduplicated
    assert asks["p-cpu"].resource == {"memory": 4096, "vcore": 2000} and asks["p-cpu"].node_selector == {}
    assert (asks["p-cpu"].t, asks["p-cpu"].duration) == (300.0, 40.0)
    # never scheduled (pod_phase Pending, no scheduled_time): withdrawn at deletion_time if still waiting
    assert asks["p-wait"].node_selector == {"gpu_model": ["T4"]}
    assert [(r.ask, r.t) for r in by_type(events, f.AskRemoved)] == [("p-wait", 900.0)]
    assert all(a.count == 1 and not a.am for a in asks.values())


def test_the_public_excerpt_imports_cleanly_and_deterministically(tmp_path: Path) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for out in (first, second):
        result = invoke("import", "pods-csv", "--pods", str(PODS), "--nodes", str(NODES), "--out", str(out))
        assert result.exit_code == 0, result.output
    assert first.read_bytes() == second.read_bytes()
    assert first.with_suffix(".yaml").read_bytes() == second.with_suffix(".yaml").read_bytes()
    events = lines(first)
    assert events[0]["type"] == "partition_config"
    assert sum(e["type"] == "node_added" for e in events) == 20
    assert sum(e["type"] == "app_added" for e in events) == 200
    times = [e["t"] for e in events]
    assert times == sorted(times) and times[0] == 0.0
    assert "malformed rows skipped" in result.output and "200" in result.output


def test_the_config_is_written_in_yunikorn_quantities_with_equal_shares_by_default(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    assert invoke("import", "pods-csv", "--pods", str(PODS), "--nodes", str(NODES), "--out", str(out)).exit_code == 0
    config = yaml.safe_load(out.with_suffix(".yaml").read_text())
    leaves = config["partitions"][0]["queues"][0]["queues"]
    assert [q["name"] for q in leaves] == ["BE", "Burstable", "LS"]
    totals = {"memory": 0, "vcore": 0, "gpu-milli": 0}
    for node in (e for e in lines(out) if e["type"] == "node_added"):
        for k, v in node["capacity"].items():
            totals[k] += v
    for q in leaves:
        raw = q["resources"]["guaranteed"]
        g = parse_resource(raw)
        # memory in the largest binary unit that holds it whole, vcore in whole cores when it is whole
        memory = re.fullmatch(r"([0-9]+)(Mi|Gi|Ti)", raw["memory"])
        assert memory is not None, raw
        assert memory.group(2) != "Mi" or g["memory"] % 1024, raw
        assert raw["vcore"] == g["vcore"] // 1000 if g["vcore"] % 1000 == 0 else raw["vcore"] == f"{g['vcore']}m"
        assert g == {k: v // 3 for k, v in totals.items()}
    # the trace's partition_config is the same partition
    assert lines(out)[0]["config"] == config["partitions"][0]
    parse_partition(config["partitions"][0])


def test_malformed_pod_and_node_rows_are_reported_with_their_line_and_skipped(tmp_path: Path) -> None:
    pods = write(
        tmp_path,
        "pods.csv",
        POD_HEADER
        + "\n"
        + "ok-1,1000,1024,0,0,,LS,Running,0,10,0\n"  # line 2
        + "bad-int,lots,1024,0,0,,LS,Running,0,10,0\n"  # line 3
        + "bad-phase,1000,1024,0,0,,LS,Sleeping,0,10,0\n"  # line 4
        + "bad-time,1000,1024,0,0,,LS,Running,50,10,50\n"  # line 5
        + "ok-1,1000,1024,0,0,,LS,Running,0,10,0\n"  # line 6: duplicate
        + "short,1000\n"  # line 7
        + "nothing,0,0,0,0,,LS,Running,0,10,0\n"  # line 8
        + "ok-2,1000,1024,1,500,,BE,Running,5,10,6\n",  # line 9
    )
    nodes = write(tmp_path, "nodes.csv", NODE_CSV + "n-bad,x,1,0,\nn-cpu,1,1,0,\n")
    out = tmp_path / "t.jsonl"
    result = invoke("import", "pods-csv", "--pods", str(pods), "--nodes", str(nodes), "--out", str(out))
    assert result.exit_code == 0, result.output
    work = read_pods_csv(pods, nodes)
    assert [b.where for b in work.bad] == [f"{nodes}:5", f"{nodes}:6"] + [f"{pods}:{n}" for n in (3, 4, 5, 6, 7, 8)]
    reasons = [b.reason for b in work.bad]
    assert "cpu_milli" in reasons[0] and "duplicate node n-cpu" in reasons[1]
    assert "cpu_milli: 'lots'" in reasons[2] and "Sleeping" in reasons[3] and "before creation_time" in reasons[4]
    assert "duplicate pod ok-1 (first on line 2)" in reasons[5] and "number of fields" in reasons[6]
    assert "asks for nothing" in reasons[7]
    assert sorted(j.app for j in work.jobs) == ["ok-1", "ok-2"]
    assert f"{pods}:3" in result.output.replace("\n", "")  # the CLI names the line too
    assert sum(e["type"] == "app_added" for e in lines(out)) == 2


def test_a_row_that_is_not_utf8_is_reported_with_its_line(tmp_path: Path) -> None:
    pods = tmp_path / "pods.csv"
    pods.write_bytes(
        (POD_HEADER + "\nok,1000,1024,0,0,,LS,Running,0,10,0\n").encode()
        + b"bad\xff,1000,1024,0,0,,LS,Running,0,10,0\n"
        + b"ok-2,1000,1024,0,0,,LS,Running,0,10,0\n"
    )
    work = read_pods_csv(pods, write(tmp_path, "nodes.csv", NODE_CSV))
    assert [(b.where, "UTF-8" in b.reason) for b in work.bad] == [(f"{pods}:3", True)]
    assert [j.app for j in work.jobs] == ["ok", "ok-2"]


def test_pod_fields_too_large_for_a_number_are_reported_with_their_line_and_column(tmp_path: Path) -> None:
    """``1e309`` (an infinite float) and 10^30 MiB are malformed rows naming line and column, never an
    internal error; the other rows import and the trace is one the simulator reads."""
    pods = write(
        tmp_path,
        "pods.csv",
        POD_HEADER
        + "\nok,1000,1024,0,0,,LS,Running,0,10,0\n"
        + "inf,1e309,1024,0,0,,LS,Running,0,10,0\n"
        + "huge,1000,"
        + "1"
        + "0" * 30
        + ",0,0,,LS,Running,0,10,0\n",
    )
    nodes = write(tmp_path, "nodes.csv", NODE_CSV)
    work = read_pods_csv(pods, nodes)
    assert [(b.where, b.reason) for b in work.bad] == [
        (f"{pods}:3", "cpu_milli: '1e309' is not a whole number"),
        (f"{pods}:4", "memory_mib: '1000000000000000000000000000000' is more than 2**53"),
    ]
    out = tmp_path / "t.jsonl"
    result = invoke("import", "pods-csv", "--pods", str(pods), "--nodes", str(nodes), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert invoke("simulate", str(out)).exit_code == 0


def test_a_pod_field_over_the_csv_field_limit_exits_2_naming_its_line(tmp_path: Path) -> None:
    pods = write(
        tmp_path,
        "pods.csv",
        POD_HEADER + "\nok,1000,1024,0,0,,LS,Running,0,10,0\n" + "big," + "9" * 300_000 + ",1,0,0,,LS,Running,0,10,0\n",
    )
    result = invoke(
        "import", "pods-csv", "--pods", str(pods), "--nodes", str(NODES), "--out", str(tmp_path / "t.jsonl")
    )
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "Traceback" not in result.output and f"{pods}:3: cannot read the row" in text and "field larger" in text


def test_a_byte_order_mark_is_not_part_of_the_first_column_or_the_first_job(tmp_path: Path) -> None:
    """Files written by spreadsheet tools start with a UTF-8 BOM: the pods header still names ``name`` and
    the first SLS job is still read."""
    pods = tmp_path / "pods.csv"
    pods.write_bytes(b"\xef\xbb\xbf" + (POD_HEADER + "\nfirst,1000,1024,0,0,,LS,Running,0,10,0\n").encode())
    work = read_pods_csv(pods, write(tmp_path, "nodes.csv", NODE_CSV))
    assert work.bad == [] and [j.app for j in work.jobs] == ["first"]
    jobs = tmp_path / "jobs.json"
    jobs.write_bytes(
        b"\xef\xbb\xbf"
        + b'{"job.start.ms": 0, "job.id": "j1", "job.tasks": [{"container.host": "/r/h1", "duration.ms": 1000}]}\n'
        + b'{"job.start.ms": 5, "job.id": "j2", "job.tasks": [{"container.host": "/r/h1", "duration.ms": 1000}]}\n'
    )
    sls = read_sls(jobs)
    assert sls.bad == [] and [j.app for j in sls.jobs] == ["j1", "j2"]


def test_a_file_without_the_columns_is_refused_with_exit_2(tmp_path: Path) -> None:
    pods = write(tmp_path, "pods.csv", "name,cpu\nx,1\n")
    result = invoke(
        "import", "pods-csv", "--pods", str(pods), "--nodes", str(NODES), "--out", str(tmp_path / "t.jsonl")
    )
    assert result.exit_code == 2
    assert "missing column" in result.output and "memory_mib" in result.output
    missing = invoke(
        "import", "pods-csv", "--pods", str(tmp_path / "nope.csv"), "--nodes", str(NODES), "--out", "x.jsonl"
    )
    assert missing.exit_code == 2 and "no such file" in missing.output


def test_window_time_scale_and_node_sample(tmp_path: Path) -> None:
    work = read_pods_csv(PODS, NODES)
    first = min(j.t for j in work.jobs)
    whole = build_trace(work, ImportOptions())
    cut = build_trace(work, ImportOptions(start=10_000, span=20_000, time_scale=10, nodes_sample=7))
    kept = {j.app for j in work.jobs if first + 10_000 <= j.t < first + 30_000}
    assert 0 < len(kept) < len(work.jobs)
    assert {a.app for a in by_type(cut.events, f.AppAdded)} == kept
    assert cut.summary.outside_window == len(work.jobs) - len(kept)
    full_asks = {a.ask: a for a in by_type(whole.events, f.AskAdded)}
    for ask in by_type(cut.events, f.AskAdded):
        original = full_asks[ask.ask]
        assert ask.t == pytest.approx((original.t - 10_000) / 10, abs=1e-3)
        assert ask.duration == pytest.approx(original.duration / 10, abs=1e-3)
    sampled = [n.node for n in by_type(cut.events, f.NodeAdded)]
    assert len(sampled) == 7 and sampled == sorted(sampled) and set(sampled) <= {n.name for n in work.nodes}
    again = build_trace(
        read_pods_csv(PODS, NODES), ImportOptions(start=10_000, span=20_000, time_scale=10, nodes_sample=7)
    )
    assert again == cut
    with pytest.raises(ImportError_, match="time-scale"):
        build_trace(work, ImportOptions(time_scale=0))


def _models(counts: dict[str, int]) -> list[NodeSpec]:
    """Nodes named n000, n001, ... in turn over the models (so an even stride over names skips some)."""
    models = [m for m, n in counts.items() for _ in range(n)]
    spread = sorted(range(len(models)), key=lambda i: (i * 7919) % len(models))
    return [
        NodeSpec(f"n{i:03}", {"vcore": 1000}, {"gpu_model": models[j]} if models[j] else {})
        for i, j in enumerate(spread)
    ]


def _pod(name: str, *models: str) -> JobSpec:
    selector = {"gpu_model": list(models)} if models else {}
    return JobSpec(name, "default", 0.0, (AskSpec(name, 0.0, {"vcore": 100}, node_selector=selector),))


def test_the_node_sample_keeps_each_kind_of_node_in_proportion_deterministically() -> None:
    nodes = _models({"": 60, "A": 30, "B": 10})
    work = Workload(nodes=nodes, jobs=[_pod("p")])
    kept = by_type(build_trace(work, ImportOptions(nodes_sample=10)).events, f.NodeAdded)
    assert [n.node for n in kept] == sorted(n.node for n in kept)
    models = [n.labels.get("gpu_model", "") for n in kept]
    assert (models.count(""), models.count("A"), models.count("B")) == (6, 3, 1)
    for model, count in (("", 6), ("A", 3), ("B", 1)):  # an even stride by name within a kind
        names = sorted(n.name for n in nodes if n.labels.get("gpu_model", "") == model)
        assert [n.node for n in kept if n.labels.get("gpu_model", "") == model] == [
            names[i * len(names) // count] for i in range(count)
        ]
    shuffled = Workload(nodes=list(reversed(nodes)), jobs=[_pod("p")])
    assert build_trace(shuffled, ImportOptions(nodes_sample=10)) == build_trace(work, ImportOptions(nodes_sample=10))


def test_the_node_sample_keeps_a_node_of_every_gpu_model_a_pod_requires() -> None:
    nodes = _models({"T4": 40, "G2": 50, "G3": 2, "V100M32": 1, "A10": 1})
    pods = [_pod("g3", "G3"), _pod("v100", "V100M16", "V100M32"), _pod("any")]
    kept = by_type(build_trace(Workload(nodes=nodes, jobs=pods), ImportOptions(nodes_sample=5)).events, f.NodeAdded)
    models = sorted(n.labels["gpu_model"] for n in kept)
    assert models == ["G2", "G2", "G3", "T4", "V100M32"]  # A10: no pod requires it, too few for a share
    # the public excerpt: every model a kept pod's gpu_spec names and the node list has stays
    work = read_pods_csv(PODS, NODES)
    for keep in (5, 7, 12):
        sampled = by_type(build_trace(work, ImportOptions(nodes_sample=keep)).events, f.NodeAdded)
        have = {n.labels.get("gpu_model") for n in sampled}
        everywhere = {n.labels.get("gpu_model") for n in work.nodes}
        for job in work.jobs:
            wanted = set(job.asks[0].node_selector.get("gpu_model", ())) & everywhere
            assert not wanted or wanted & have, (keep, job.app, wanted, have)


def test_a_node_sample_too_small_for_the_required_gpu_models_is_refused_with_exit_2(tmp_path: Path) -> None:
    with pytest.raises(ImportError_, match="fewer than the 5 kinds of node"):
        build_trace(read_pods_csv(PODS, NODES), ImportOptions(nodes_sample=4))
    args = ("import", "pods-csv", "--pods", str(PODS), "--nodes", str(NODES), "--out", str(tmp_path / "t.jsonl"))
    result = invoke(*args, "--nodes-sample", "4")
    assert result.exit_code == 2 and "gpu_model=G3" in result.output


def test_queue_by_and_guarantees(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    shares = write(tmp_path, "shares.yaml", "root.LS: 0.5\n")
    args = ("import", "pods-csv", "--pods", str(PODS), "--nodes", str(NODES), "--out", str(out))
    assert invoke(*args, "--guarantees", str(shares), "--guarantee", "BE=0.3").exit_code == 0
    leaves = {
        q["name"]: parse_resource(q["resources"]["guaranteed"]) for q in lines(out)[0]["config"]["queues"][0]["queues"]
    }
    total_gpu = sum(e["capacity"].get("gpu-milli", 0) for e in lines(out) if e["type"] == "node_added")
    assert leaves["LS"]["gpu-milli"] == total_gpu // 2
    assert leaves["BE"]["gpu-milli"] == int(total_gpu * 0.3)
    assert leaves["Burstable"]["gpu-milli"] == int(total_gpu * 0.2)  # the rest, shared by the unnamed queues
    assert invoke(*args, "--queue-by", "none").exit_code == 0
    assert {e["queue"] for e in lines(out) if e["type"] == "app_added"} == {"root.default"}
    too_much = invoke(*args, "--guarantee", "LS=0.8", "--guarantee", "BE=0.5")
    assert too_much.exit_code == 2 and "more than the whole cluster" in too_much.output
    assert invoke(*args, "--queue-by", "colour").exit_code == 2


def test_a_pod_list_without_time_columns_arrives_all_at_once_and_runs_to_the_end(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    result = invoke("import", "pods-csv", "--pods", str(MULTIGPU), "--nodes", str(NODES), "--out", str(out))
    assert result.exit_code == 0, result.output
    events = lines(out)
    apps = [e for e in events if e["type"] == "app_added"]
    asks = {e["ask"]: e for e in events if e["type"] == "ask_added"}
    assert len(apps) == len(asks) == 16
    assert {e["queue"] for e in apps} == {"root.default"}  # no qos column: one queue
    assert {(e["t"], e.get("duration"), bool(e.get("node_selector"))) for e in asks.values()} == {(0.0, None, False)}
    assert asks["openb-pod-3129"]["resource"] == {"memory": 327680, "vcore": 88000, "gpu-milli": 8000}
    assert asks["openb-pod-3127"]["resource"] == {"memory": 5600, "vcore": 3152, "gpu-milli": 810}
    assert asks["openb-pod-3136"]["resource"] == {"memory": 51200, "vcore": 15400}
    assert not any(e["type"] == "ask_removed" for e in events)
    assert "pods running to the end" in result.output


def test_a_pod_list_arrives_at_a_rate_in_list_order_with_a_given_duration(tmp_path: Path) -> None:
    work = read_pods_csv(MULTIGPU, NODES, arrival=Arrival.parse("rate:4"), duration=600)
    assert work.bad == []
    assert [(j.app, j.t) for j in work.jobs[:3]] == [
        ("openb-pod-3126", 0.0),
        ("openb-pod-3127", 0.25),
        ("openb-pod-3128", 0.5),
    ]
    assert work.jobs[-1].t == 15 / 4
    events = build_trace(work, ImportOptions(time_scale=2)).events
    asks = by_type(events, f.AskAdded)
    assert [a.t for a in asks] == [i / 8 for i in range(16)]
    assert {a.duration for a in asks} == {300.0}
    out = tmp_path / "t.jsonl"
    args = ("import", "pods-csv", "--pods", str(MULTIGPU), "--nodes", str(NODES), "--out", str(out))
    assert invoke(*args, "--arrival", "rate:4", "--duration", "600").exit_code == 0
    assert [e["t"] for e in lines(out) if e["type"] == "ask_added"] == [i / 4 for i in range(16)]


def test_the_arrival_model_replaces_creation_times_and_keeps_the_time_columns_durations() -> None:
    traced = read_pods_csv(PODS, NODES)
    at_once = read_pods_csv(PODS, NODES, arrival=Arrival.parse("all"))
    assert [j.app for j in at_once.jobs] == [j.app for j in traced.jobs]
    assert {j.t for j in at_once.jobs} == {0.0}
    assert [j.asks[0].duration for j in at_once.jobs] == [j.asks[0].duration for j in traced.jobs]
    waiting = [(a, b) for a, b in zip(traced.jobs, at_once.jobs, strict=True) if a.asks[0].withdraw_at is not None]
    assert waiting  # never scheduled in the source: withdrawn once they waited as long as there
    for a, b in waiting:
        assert a.asks[0].withdraw_at is not None
        assert b.asks[0].withdraw_at == a.asks[0].withdraw_at - a.t
    fixed = read_pods_csv(PODS, NODES, duration=60)
    assert {j.asks[0].duration for j in fixed.jobs} == {60.0}
    assert [j.t for j in fixed.jobs] == [j.t for j in traced.jobs]


def test_bad_arrival_models_and_durations_are_refused_with_exit_2(tmp_path: Path) -> None:
    args = ("import", "pods-csv", "--nodes", str(NODES), "--out", str(tmp_path / "t.jsonl"))
    for arrival in ("rate:0", "rate:-1", "rate:x", "rate", "soon", "all:3", "rate:inf"):
        result = invoke(*args, "--pods", str(PODS), "--arrival", arrival)
        assert result.exit_code == 2 and "--arrival" in result.output, (arrival, result.output)
    needs_times = invoke(*args, "--pods", str(MULTIGPU), "--arrival", "trace")
    assert needs_times.exit_code == 2
    assert "creation_time" in needs_times.output and "--arrival all" in needs_times.output
    negative = invoke(*args, "--pods", str(MULTIGPU), "--duration", "-5")
    assert negative.exit_code == 2 and "--duration" in negative.output
    no_qos = invoke(*args, "--pods", str(MULTIGPU), "--queue-by", "qos")
    assert no_qos.exit_code == 2 and "not a column" in no_qos.output


def test_gpu_sharing_pods_ask_their_share_a_device_size_or_a_whole_gpu(tmp_path: Path) -> None:
    pods = write(
        tmp_path,
        "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
        + "".join(f"share-{i},1000,1024,1,600\n" for i in range(3))
        + "small,1000,1024,1,100\nquarter,1000,1024,1,250\nthird,1000,1024,1,300\nwhole,1000,1024,2,1000\n",
    )
    nodes = write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn-2gpu,64000,65536,2,T4\n")
    asked = {
        share: [j.asks[0].resource["gpu-milli"] for j in read_pods_csv(pods, nodes, gpu_share=share).jobs]
        for share in GpuShare
    }
    assert asked == {
        GpuShare.AGGREGATE: [600, 600, 600, 100, 250, 300, 2000],
        GpuShare.DEVICE: [1000, 1000, 1000, 125, 250, 500, 2000],
        GpuShare.WHOLE: [1000, 1000, 1000, 1000, 1000, 1000, 2000],
    }
    note = "GPU-sharing pods rounded up (--gpu-share device)"
    assert read_pods_csv(pods, nodes, gpu_share=GpuShare.DEVICE).notes[note] == 5  # 250 is a device size
    assert note not in read_pods_csv(pods, nodes).notes


def test_gpus_import_as_milli_gpus_that_people_read_in_gpus(tmp_path: Path) -> None:
    """A pod on 0.46 of a GPU asks ``gpu-milli`` 460 and a node of 8 GPUs has 8000 (never the count ``gpu``);
    what ``sniper compare`` and ``sniper check-config`` print of them is in GPUs: 1.46, not 1460."""
    pods = write(
        tmp_path,
        "pods.csv",
        POD_HEADER
        + "\n"
        + "be-eight,1000,1024,8,1000,,BE,Running,0,100000,0\n"  # fills node n-a or n-b whole
        + "be-six,1000,1024,6,1000,,BE,Running,1,100000,1\n"
        + "be-whole,1000,1024,1,1000,,BE,Running,2,100000,2\n"
        + "be-share,1000,1024,1,460,,BE,Running,3,100000,3\n"  # 540 milli-GPUs left beside it
        + "ls-two,1000,1024,2,1000,,LS,Running,100,100000,100\n",  # needs be-whole and be-share gone
    )
    nodes = write(
        tmp_path,
        "nodes.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn-a,96000,786432,8,V100M32\nn-b,96000,786432,8,V100M32\n",
    )
    work = read_pods_csv(pods, nodes)
    assert {n.name: n.capacity["gpu-milli"] for n in work.nodes} == {"n-a": 8000, "n-b": 8000}
    asks = {job.app: job.asks[0].resource for job in work.jobs}
    assert asks["be-share"] == {"memory": 1024, "vcore": 1000, "gpu-milli": 460}
    assert asks["ls-two"]["gpu-milli"] == 2000
    assert not any("gpu" in n.capacity for n in work.nodes) and not any("gpu" in r for r in asks.values())
    out = tmp_path / "t.jsonl"
    shares = ("--guarantee", "LS=0.5", "--guarantee", "BE=0.5")
    imported = invoke("import", "pods-csv", "--pods", str(pods), "--nodes", str(nodes), "--out", str(out), *shares)
    assert imported.exit_code == 0, imported.output
    config = out.with_suffix(".yaml")
    leaves = yaml.safe_load(config.read_text())["partitions"][0]["queues"][0]["queues"]
    assert [q["resources"]["guaranteed"]["gpu-milli"] for q in leaves] == [8000, 8000]  # a bare count of milli-GPUs
    checked = invoke("check-config", str(config))
    assert checked.exit_code == 0 and "LS: guaranteed 768 GiB, 96 cores, 8 GPUs;" in checked.output
    compared = invoke(
        "compare", str(out), "--queues", str(config), "--until", "1000", "--policies", "sniper", "--markdown"
    )
    assert compared.exit_code == 0, compared.output
    assert "| preempted gpu-milli | 1.46 GPUs |" in compared.output.splitlines()


def test_the_device_gpu_share_never_packs_beyond_single_devices(tmp_path: Path) -> None:
    # two GPUs: per device two 0.6-GPU pods fit, a third does not; the aggregate (1800 <= 2000) takes it
    pods = write(
        tmp_path,
        "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(f"p{i},1000,1024,1,600\n" for i in range(3)),
    )
    nodes = write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn-2gpu,64000,65536,2,T4\n")
    placed: dict[str, int] = {}
    for share in ("aggregate", "device", "whole"):
        out = tmp_path / f"{share}.jsonl"
        args = ("--pods", str(pods), "--nodes", str(nodes), "--out", str(out), "--gpu-share", share)
        assert invoke("import", "pods-csv", *args).exit_code == 0
        report = tmp_path / f"{share}.json"
        assert invoke("simulate", str(out), "--report", str(report)).exit_code == 0
        placed[share] = json.loads(report.read_text())["allocations"]
    assert placed == {"aggregate": 3, "device": 2, "whole": 2}
    out = tmp_path / "mig.jsonl"
    refused = invoke(
        "import", "pods-csv", "--pods", str(pods), "--nodes", str(nodes), "--out", str(out), "--gpu-share", "mig"
    )
    assert refused.exit_code == 2 and not out.exists()


def _device_placement(shares: list[int], devices: int) -> list[int] | None:
    """Loads of ``devices`` GPUs after placing ``shares`` largest first, each on the first device it fits
    (None when one does not fit)."""
    loads = [0] * devices
    for share in sorted(shares, reverse=True):
        slot = next((i for i, load in enumerate(loads) if load + share <= 1000), None)
        if slot is None:
            return None
        loads[slot] += share
    return loads


@given(st.lists(st.integers(min_value=1, max_value=1000), max_size=40), st.integers(min_value=1, max_value=8))
@example([600, 600, 600], 2)
@example([300, 300, 300, 300, 300, 300, 300], 2)
def test_every_set_of_device_shares_the_aggregate_admits_fits_single_devices(raw: list[int], devices: int) -> None:
    shares = [GpuShare.DEVICE.milli(m) for m in raw]
    assert (_device_placement(shares, devices) is not None) == (sum(shares) <= 1000 * devices)
    assert all(
        GpuShare.AGGREGATE.milli(m) <= share <= GpuShare.WHOLE.milli(m) for m, share in zip(raw, shares, strict=True)
    )


def test_simulate_runs_an_imported_trace_as_it_is(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    args = ("--pods", str(PODS), "--nodes", str(NODES), "--out", str(out), "--span", "6000", "--time-scale", "20")
    assert invoke("import", "pods-csv", *args).exit_code == 0
    report = tmp_path / "r.json"
    result = invoke("simulate", str(out), "--until", "400", "--report", str(report))
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    assert data["allocations"] > 0 and data["invariant_violations"] == 0
    assert "gpu-milli" in data["utilization"] and "gpu" not in data["utilization"]


# ---------------------------------------------------------------------- sls


def test_sls_jobs_and_topology_with_every_key() -> None:
    work = read_sls(SLS_JOBS, SLS_NODES)
    assert work.bad == []
    events = build_trace(work, ImportOptions()).events
    nodes = {n.node: n for n in by_type(events, f.NodeAdded)}
    assert nodes["node1"].capacity == {"memory": 10_240, "vcore": 10_000}  # SLS's node defaults
    assert nodes["node2"].capacity == {"memory": 8192, "vcore": 4000}
    assert nodes["gpu1"].capacity == {"memory": 65536, "vcore": 16000, "gpu": 4}  # yarn.io/gpu: whole GPUs
    assert nodes["gpu1"].labels == {"gpu": "true", "rack": "gpu-rack"}
    assert nodes["node1"].labels == {"rack": "default-rack"}
    apps = {a.app: a for a in by_type(events, f.AppAdded)}
    assert set(apps) == {"job_1", "sls_job_1_0", "sls_job_1_1"}  # job.id; job.count copies get fresh ids
    assert (apps["job_1"].queue, apps["job_1"].user, apps["job_1"].t) == ("root.sls_queue_1", "alice", 0.0)
    assert apps["sls_job_1_0"].t == 100.0 and apps["sls_job_1_0"].user == "default"
    asks = {a.ask: a for a in by_type(events, f.AskAdded)}
    am = asks["job_1-am"]
    assert (am.am, am.resource, am.t, am.duration) == (True, {"memory": 1024, "vcore": 1000}, 0.0, 90.0)
    maps = asks["job_1-map-0"]
    assert (maps.count, maps.resource, maps.t, maps.duration, maps.priority) == (
        2,
        {"memory": 2048, "vcore": 2000},
        1.0,
        20.0,
        -20,
    )
    reduce = asks["job_1-reduce-1"]  # no resources given: SLS's container defaults
    assert (reduce.resource, reduce.priority, reduce.t, reduce.duration) == (
        {"memory": 1024, "vcore": 1000},
        -10,
        25.0,
        30.0,
    )
    gpu = asks["sls_job_1_0-map-0"]
    assert gpu.resource == {"memory": 4096, "vcore": 1000, "gpu": 1} and gpu.duration == 50.0
    assert gpu.node_selector == {"gpu": ["true"]} == asks["sls_job_1_0-am"].node_selector  # job.label.expression
    assert asks["sls_job_1_0-am"].duration == 50.0  # no job.end.ms: until its last container ends
    assert work.notes == {"opportunistic containers": 2}
    opportunistic = [a.ask for a in asks.values() if a.execution_type == "opportunistic"]
    assert opportunistic == ["sls_job_1_0-map-0", "sls_job_1_1-map-0"]  # (job.count 2) the execution type is kept


def test_sls_nodes_from_num_nodes_and_hosts(tmp_path: Path) -> None:
    jobs = write(
        tmp_path,
        "jobs.json",
        '{"num.nodes": 3, "num.racks": 2}\n'
        '{"job.start.ms": 0, "job.queue.name": "q",\n'
        ' "job.tasks": [{"container.host": "/r9/h1", "duration.ms": 1000}]}\n',
    )
    work = read_sls(jobs)
    assert {(n.name, n.labels["rack"]) for n in work.nodes} == {
        ("node0", "rack0"),
        ("node1", "rack1"),
        ("node2", "rack0"),
        ("h1", "r9"),
    }
    assert all(n.capacity == {"memory": 10_240, "vcore": 10_000} for n in work.nodes)
    nothing = write(tmp_path, "none.json", '{"job.start.ms": 0, "job.tasks": [{"duration.ms": 1}]}\n')
    with pytest.raises(ImportError_, match="no node"):
        read_sls(nothing)


def test_sls_jobs_too_deep_or_too_large_are_reported_with_their_line_and_the_rest_imports(tmp_path: Path) -> None:
    """A value nested 100,000 deep and a task of 10^30 MB are malformed entries naming their line (and
    the key), never an internal error nor a trace the simulator refuses."""
    task = '{"container.host": "/r/h1", "duration.ms": 1000}'
    jobs = write(
        tmp_path,
        "jobs.json",
        f'{{"job.start.ms": 0, "job.id": "ok", "job.tasks": [{task}]}}\n'
        + '{"job.start.ms": 1, "job.id": "deep", "x": '
        + "[" * 100_000
        + "]" * 100_000
        + "}\n"
        + '{"job.start.ms": 2, "job.id": "huge", "job.tasks": [{"container.host": "/r/h1", "duration.ms": 1,'
        + ' "container.memory-mb": 1e30}]}\n'
        + '{"num.nodes": 1e30}\n',
    )
    work = read_sls(jobs)
    assert [b.where for b in work.bad] == [f"{jobs}:2", f"{jobs}:3", f"{jobs}:4"]
    reasons = [b.reason for b in work.bad]
    assert "nested too deeply" in reasons[0]
    assert "container.memory-mb: 1e+30 is more than 2**53" in reasons[1] and "num.nodes: 1e+30" in reasons[2]
    assert [j.app for j in work.jobs] == ["ok"]
    out = tmp_path / "t.jsonl"
    assert invoke("import", "sls", str(jobs), "--out", str(out)).exit_code == 0
    assert invoke("simulate", str(out)).exit_code == 0
    alone = write(tmp_path, "alone.json", '{"job.start.ms": 0, "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    refused = invoke("import", "sls", str(alone), "--out", str(tmp_path / "alone.jsonl"))
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert f"the first: {alone}:1: not JSON Sniper reads: nested too deeply" in " ".join(refused.output.split())


def test_an_imported_trace_a_reader_would_refuse_is_never_written(tmp_path: Path) -> None:
    """Whatever a source slips past the importers' checks (here an ask at t = 10^30 s), the trace is
    checked as a reader decodes it before it is written: exit 2 naming the event and the field."""
    work = Workload(
        jobs=[JobSpec("a", "q", 0.0, (AskSpec("k", 0.0, {"memory": 1}),))], nodes=[NodeSpec("n", {"memory": 8})]
    )
    imported = build_trace(work, ImportOptions())
    late = [*imported.events, f.AskAdded(t=1e30, app="a", ask="late", resource={"memory": 1})]
    out = tmp_path / "t.jsonl"
    with pytest.raises(ImportError_, match=r"AskAdded app=a ask=late would be refused by a reader: .*\$\.t"):
        write_trace(dataclasses.replace(imported, events=late), out)
    assert not out.exists()


def test_sls_malformed_jobs_are_reported_with_their_line_and_skipped(tmp_path: Path) -> None:
    jobs = write(
        tmp_path,
        "jobs.json",
        "\n".join(
            [
                '{"job.start.ms": 0, "job.queue.name": "q", "job.id": "a", "job.tasks": [{"duration.ms": 1000}]}',  # 1
                '{"job.start.ms": 0, "job.queue.name": "q", "job.tasks": [ {"duration.ms": 10 ]}',  # 2: not JSON
                '{"job.queue.name": "q", "job.tasks": [{"duration.ms": 1}]}',  # 3: no start
                '{"job.start.ms": 0, "job.tasks": [{"container.start.ms": 5}]}',  # 4: no duration
                '{"job.start.ms": 0, "job.tasks": []}',  # 5: no task
                '{"job.start.ms": 0, "job.tasks": [{"duration.ms": 1, "container.execution.type": "maybe"}]}',  # 6
                '{"job.start.ms": 0, "job.id": "a", "job.tasks": [{"duration.ms": 1}]}',  # 7: duplicate id
                '{"job.start.ms": 0, "job.tasks": [{"duration.ms": 1, "container.memory": "lots"}]}',  # 8
                "[1]",  # 9
                '{"job.start.ms": 2000, "job.queue.name": "q", "job.id": "b", "job.tasks": [{"duration.ms": 1}]}',  # 10
            ]
        )
        + "\n",
    )
    nodes = write(tmp_path, "nodes.json", '{"rack": "r", "nodes": [{"node": "n1"}]}\n{"rack": "r"}\n')
    work = read_sls(jobs, nodes)
    assert [b.where.rsplit(":", 1)[1] for b in work.bad] == ["2", "3", "4", "5", "6", "7", "8", "9", "2"]
    reasons = [b.reason for b in work.bad]
    assert "not JSON" in reasons[0] and "job.start.ms is missing" in reasons[1] and "no duration" in reasons[2]
    assert "no task" in reasons[3] and "maybe" in reasons[4] and "duplicate job id a (first on line 1)" in reasons[5]
    assert "'lots'" in reasons[6] and "JSON object" in reasons[7] and work.bad[8].where.startswith(str(nodes))
    assert [j.app for j in work.jobs] == ["a", "b"]
    out = tmp_path / "t.jsonl"
    result = invoke("import", "sls", str(jobs), "--nodes", str(nodes), "--out", str(out))
    assert result.exit_code == 0 and f"{jobs}:2" in result.output.replace("\n", "")


def test_sls_import_then_simulate(tmp_path: Path) -> None:
    out = tmp_path / "sls.jsonl"
    result = invoke("import", "sls", str(SLS_JOBS), "--nodes", str(SLS_NODES), "--out", str(out))
    assert result.exit_code == 0, result.output
    for what in ("nodes", "apps", "asks", "span"):
        assert what in result.output
    report = tmp_path / "r.json"
    sim = invoke("simulate", str(out), "--until", "200", "--report", str(report))
    assert sim.exit_code == 0, sim.output
    data = json.loads(report.read_text())
    assert data["allocations"] == 8 and data["rejected"] == 0 and data["invariant_violations"] == 0


def test_sls_import_reads_a_rumen_trace_as_hadoop_converts_it(tmp_path: Path) -> None:
    work = read_sls(RUMEN)
    assert work.bad == []
    assert work.notes == {
        "Rumen jobs (each task attempt a container)": 3,
        "Rumen attempts without start or finish time (left out)": 1,
    }
    events = build_trace(work, ImportOptions()).events
    apps = {a.app: a for a in by_type(events, f.AppAdded)}
    assert {a: (x.queue, x.user, x.t) for a, x in apps.items()} == {  # jobID, queue, user, submitTime
        "job_1700000000000_0001": ("root.analytics", "alice", 0.0),
        "job_1700000000000_0002": ("root.prod", "bob", 20.0),
        "job_1700000000000_0003": ("root.analytics", "alice", 40.0),
    }
    asks = {a.ask: (a.t, a.duration, a.priority, a.count) for a in by_type(events, f.AskAdded)}
    one = "job_1700000000000_0001"
    assert {k.removeprefix(one + "-"): v for k, v in asks.items() if k.startswith(one)} == {
        "am": (0.0, 90.0, 0, 1),  # submitTime to finishTime
        "map-0": (2.0, 8.0, -20, 1),  # the failed attempt held a container too
        "map-1": (11.0, 19.0, -20, 1),  # its retry
        "map-2": (2.5, 18.0, -20, 1),
        "reduce-3": (35.0, 50.0, -10, 1),  # reduces: YARN priority 10; no set-up task (otherTasks)
    }
    assert {k for k in asks if k.startswith("job_1700000000000_0002")} == {  # the killed attempt: no container
        "job_1700000000000_0002-am",
        "job_1700000000000_0002-map-0",
    }
    assert all(a.resource == {"memory": 1024, "vcore": 1000} for a in by_type(events, f.AskAdded))
    nodes = {n.node: n.labels for n in by_type(events, f.NodeAdded)}
    assert nodes == {  # the attempts' hostName
        "node1": {"rack": "rack-a"},
        "node2": {"rack": "rack-a"},
        "node3": {"rack": "rack-b"},
        "node4": {"rack": "rack-b"},
    }
    out = tmp_path / "rumen.jsonl"
    result = invoke("import", "sls", str(RUMEN), "--out", str(out))
    assert result.exit_code == 0, result.output
    report = tmp_path / "r.json"
    assert invoke("simulate", str(out), "--report", str(report)).exit_code == 0
    data = json.loads(report.read_text())
    assert data["allocations"] == 10 and data["rejected"] == 0 and data["invariant_violations"] == 0


def test_a_malformed_rumen_job_is_reported_with_its_line_and_skipped(tmp_path: Path) -> None:
    tasks = '[{"attempts": [{"hostName": "/r/h1", "startTime": 1000, "finishTime": 3000}]}]'
    jobs = write(
        tmp_path,
        "rumen.json",
        "\n".join(
            [
                '{"jobID": "job_a", "submitTime": 0, "mapTasks": ' + tasks + "}",  # 1
                '{"jobID": "job_b", "submitTime": -1, "mapTasks": ' + tasks + "}",  # 2
                '{"jobID": "job_c", "submitTime": 0, "mapTasks": [{"attempts": []}], "reduceTasks": []}',  # 3
                '{"jobID": "job_d", "submitTime": 0, "mapTasks": {"attempts": []}}',  # 4
                '{"jobID": "job_e", "submitTime": 0, "mapTasks": [{"taskID": "t"}]}',  # 5
            ]
        )
        + "\n",
    )
    work = read_sls(jobs)
    assert [(b.where.rsplit(":", 1)[1], b.reason) for b in work.bad] == [
        ("2", "Rumen job job_b: submitTime -1 is not a time in ms"),
        ("3", "Rumen job job_c: no map or reduce attempt with a startTime and a finishTime"),
        ("4", "Rumen job job_d: mapTasks is not a list"),
        ("5", "Rumen job job_e: a task of mapTasks has no attempts list"),
    ]
    assert [j.app for j in work.jobs] == ["job_a"]


def test_an_import_that_yields_no_app_exits_2_with_the_reason(tmp_path: Path) -> None:
    out = str(tmp_path / "t.jsonl")
    nodes_only = write(tmp_path, "nodes-only.json", '{"num.nodes": 2}\n')
    result = invoke("import", "sls", str(nodes_only), "--out", out)
    assert result.exit_code == 2 and "no job to import: the input holds none" in result.output
    unknown = write(tmp_path, "unknown.json", '{"name": "x", "start": 0}\n{"num.nodes": 1}\n')
    result = invoke("import", "sls", str(unknown), "--out", out)
    assert result.exit_code == 2 and "neither an SLS job" in result.output and "keys name, start" in result.output
    unreadable = write(tmp_path, "bad.json", '{"jobID": "job_x", "submitTime": 0}\n{"num.nodes": 1}\n')
    result = invoke("import", "sls", str(unreadable), "--out", out)
    assert result.exit_code == 2, result.output
    assert "every entry was skipped" in result.output and "job_x: no map or reduce attempt" in result.output
    result = invoke("import", "sls", str(SLS_JOBS), "--nodes", str(SLS_NODES), "--out", out, "--start", "500")
    assert result.exit_code == 2 and "none of the 3 jobs" in result.output and "--start 500" in result.output
    pods = write(tmp_path, "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n")
    result = invoke("import", "pods-csv", "--pods", str(pods), "--nodes", str(NODES), "--out", out)
    assert result.exit_code == 2 and "the input holds none" in result.output
    assert not Path(out).exists()
