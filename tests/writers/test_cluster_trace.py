"""The cluster trace writer (`atbprof analyze CLUSTER --trace`): its alignment rule, determinism, the slice cap,
the rank choice, and what it refuses. Loading into trace_processor is tests/tp/test_cluster_trace_load.py."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pyarrow.compute as pc
import pytest
from typer.testing import CliRunner

from atbprof.commands import app
from atbprof.errors import OutputExistsError
from atbprof.importers.cluster import load_cluster
from atbprof.writers.cluster_trace import MAX_TRACE_RANKS, default_trace_ranks, write_cluster_trace
from tests.analyze.test_cluster import _sim_cluster

runner = CliRunner()


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _sim_cluster(tmp_path_factory.mktemp("tp4"), {2: 1.15})


def _events(path: Path) -> list[dict[str, object]]:
    raw = path.read_bytes()
    return orjson.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)["traceEvents"]


def _step_starts(path: Path) -> dict[tuple[int, int], float]:
    return {
        (int(e["pid"]) - 1, int(e["args"]["step"])): float(e["ts"])  # type: ignore[index, arg-type]
        for e in _events(path)
        if e["ph"] == "X" and e["tid"] == 1
    }


def test_same_cluster_same_bytes_and_steps_laid_in_order(export: Path, tmp_path: Path) -> None:
    cluster = load_cluster(export, workers=0)
    a = write_cluster_trace(cluster, [0, 1, 2, 3], tmp_path / "a.json.gz")
    write_cluster_trace(cluster, [3, 2, 1, 0], tmp_path / "b.json.gz")
    assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "b.json.gz").read_bytes()
    assert a.ranks == (0, 1, 2, 3) and a.steps == tuple(sorted(a.steps)) and len(a.steps) == 4  # prefill + 3 decode
    starts = _step_starts(tmp_path / "a.json.gz")
    for k0, k1 in zip(a.steps, a.steps[1:], strict=False):  # every rank's next step after every rank's previous
        assert min(starts[(r, k1)] for r in range(4)) > max(starts[(r, k0)] for r in range(4))
    # one clock within a step: the ranks of a TP group leave the previous allreduce together, so start together
    for k in a.steps:
        assert max(starts[(r, k)] for r in range(4)) - min(starts[(r, k)] for r in range(4)) < 50.0  # µs


def test_a_rank_on_another_clock_is_aligned_on_its_own_first_event(export: Path, tmp_path: Path) -> None:
    cluster = load_cluster(export, workers=0)
    ops = cluster.ops
    moved = pc.if_else(pc.equal(ops.column("rank"), 3), pc.add(ops.column("start_us"), 10e6), ops.column("start_us"))
    cluster.ops = ops.set_column(ops.schema.get_field_index("start_us"), "start_us", moved)  # rank 3: 10 s late
    result = write_cluster_trace(cluster, [0, 1, 2, 3], tmp_path / "t.json")
    assert {r for r, _ in result.realigned} == {3} and result.note and "rank 3 step" in result.note
    starts = _step_starts(tmp_path / "t.json")
    for k in result.steps:
        assert abs(starts[(3, k)] - starts[(0, k)]) < 50.0


def test_the_slice_cap_keeps_whole_steps_and_says_which_it_left_out(export: Path, tmp_path: Path) -> None:
    cluster = load_cluster(export, workers=0)
    full = write_cluster_trace(cluster, [0, 1, 2, 3], tmp_path / "full.json")
    first = sum(1 for e in _events(tmp_path / "full.json") if e["ph"] == "X" and e["args"].get("step") == full.steps[0])  # type: ignore[union-attr]
    capped = write_cluster_trace(cluster, [0, 1, 2, 3], tmp_path / "cap.json", max_events=first + 1)
    assert capped.steps == full.steps[:1] and capped.steps_dropped == full.steps[1:]
    assert capped.note and f"left out steps {full.steps[1]} onwards" in capped.note


def test_default_ranks_are_all_up_to_64_then_the_slow_ones_first() -> None:
    assert default_trace_ranks([3, 1, 2], []) == [1, 2, 3]
    chosen = default_trace_ranks(list(range(1024)), [700, 900])
    assert len(chosen) == MAX_TRACE_RANKS and {700, 900} <= set(chosen) and chosen == sorted(chosen)
    assert chosen[:62] == list(range(62))


def test_it_replaces_only_a_trace_of_its_own(export: Path, tmp_path: Path) -> None:
    cluster = load_cluster(export, workers=0)
    out = tmp_path / "t.json"
    write_cluster_trace(cluster, [0, 1], out)
    with pytest.raises(OutputExistsError, match="pass --force"):
        write_cluster_trace(cluster, [0, 1], out)
    write_cluster_trace(cluster, [0, 1, 2], out, force=True)
    mine = tmp_path / "mine.json"
    mine.write_text('{"traceEvents": []}')
    with pytest.raises(OutputExistsError, match="not a cluster trace atbprof wrote"):
        write_cluster_trace(cluster, [0, 1], mine, force=True)
    assert mine.read_text() == '{"traceEvents": []}'


def test_the_cli_writes_it_and_refuses_bad_rank_choices(export: Path, tmp_path: Path) -> None:
    out = tmp_path / "c.json.gz"
    ok = runner.invoke(app, ["analyze", str(export), "--trace", str(out), "--trace-ranks", "1-2", "--format", "json"])
    assert ok.exit_code == 0, ok.output
    doc = orjson.loads(ok.stdout)
    assert doc["trace"]["ranks"] == [1, 2] and doc["trace"]["path"] == str(out.resolve()) and out.is_file()
    md = runner.invoke(app, ["analyze", str(export), "--trace", str(tmp_path / "m.json"), "--format", "md"])
    assert md.exit_code == 0 and f"wrote {(tmp_path / 'm.json').resolve()}: ranks 0-3" in md.output
    assert f"open it with `atbprof open {(tmp_path / 'm.json').resolve()}`" in md.output  # a command that exists
    cases = [
        (["--trace", str(tmp_path / "x.json"), "--trace-ranks", "9-12"], "names none of the cluster's ranks (0-3)"),
        (["--trace", str(tmp_path / "x.json"), "--trace-ranks", "a"], "expected ranges like 0-3,10,20-"),
        (["--trace-ranks", "0-1"], "give --trace FILE too"),
        (["--trace", str(out)], "exists; pass --force"),  # exit 3, as every refusal to overwrite
    ]
    for extra, message in cases:
        bad = runner.invoke(app, ["analyze", str(export), *extra])
        assert bad.exit_code == (3 if "--force" in message else 2) and message in bad.output, (extra, bad.output)
        assert "Traceback" not in bad.output
    assert not (tmp_path / "x.json").exists()
    single = export / next(p.name for p in export.iterdir() if p.is_dir())
    one = runner.invoke(app, ["analyze", str(single), "--trace", str(tmp_path / "y.json")])
    assert one.exit_code == 2 and "--trace: for a cluster" in one.output


def test_more_than_64_ranks_are_refused_before_anything_is_written(export: Path, tmp_path: Path) -> None:
    from atbprof.analyze.cluster_job import trace_rank_choice
    from atbprof.analyze.cluster_report import analyze_cluster
    from atbprof.errors import UsageError
    from atbprof.importers.cluster_tables import RankProfile

    cluster = load_cluster(export, workers=0)
    report = analyze_cluster(cluster, findings=False)
    r0 = cluster.ranks[0]
    cluster.ranks = [RankProfile(r, r0.path, None, False, {}, {}, "none") for r in range(100)]
    with pytest.raises(UsageError, match="65 ranks; a trace holds at most 64"):
        trace_rank_choice(cluster, report, "0-64")
