"""Our exports (ascend_pt, msprof) import back to the op table they came from."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from atbprof.export import ExportResult, ExportTarget
from atbprof.export.tables import msprof_dtypes
from atbprof.importers import load_profile
from atbprof.optable.schema import PIPES

EXACT = [
    "op_name",
    "op_type",
    "task_type",
    "stream_id",
    "task_id",
    "task_start_ns",
    "task_dur_ns",
    "task_wait_ns",
    "host_launch_start_ns",
    "host_launch_dur_ns",
    "block_dim",
    "mix_block_dim",
    "input_shapes",
    "output_shapes",
    *[f"{p}_time_ns" for p in PIPES],
]


def _compare(original: pa.Table, imported: pa.Table, with_step: bool, absent: set[str]) -> None:
    assert imported.num_rows == original.num_rows
    assert imported["op_index"].to_pylist() == original["op_index"].to_pylist()
    for col in absent:  # not in this header variant: null, not invented
        assert imported[col].null_count == imported.num_rows, col
    for col in [c for c in EXACT if c not in absent] + (["step"] if with_step else []):
        assert imported[col].to_pylist() == original[col].to_pylist(), col
    for col in ("input_dtypes", "output_dtypes"):  # msprof spells DT_FLOAT16 as FLOAT16; kept as written
        assert imported[col].to_pylist() == [msprof_dtypes(t) for t in original[col].to_pylist()], col
    for pipe in [p for p in PIPES if f"{p}_ratio" not in absent]:  # printed with three decimals
        pairs = zip(original[f"{pipe}_ratio"].to_pylist(), imported[f"{pipe}_ratio"].to_pylist(), strict=True)
        assert all(abs(a - b) <= 5.1e-4 for a, b in pairs), pipe


@pytest.mark.parametrize("key", ["910a", "910b", "graph"])
@pytest.mark.parametrize("target", ["ascend-pt", "msprof"])
def test_export_imports_back(
    key: str,
    target: ExportTarget,
    run_dir: Callable[[str], Path],
    exported: Callable[[str, ExportTarget], ExportResult],
) -> None:
    original = pq.read_table(run_dir(key) / "ops.parquet")
    result = exported(key, target)
    profile = load_profile(result.root)
    assert profile.kind == ("ascend_pt" if target == "ascend-pt" else "msprof")
    # the export maps run time 0 to its fixed epoch and starts its timeline there: relative times come back as-is
    assert profile.meta["origin_ns"] == 1_735_689_600_000_000_000
    # 910A's unprefixed PipeUtilization columns have no FixPipe
    absent = {"fixpipe_time_ns", "fixpipe_ratio"} if key != "910b" else set()
    _compare(original, profile.ops, with_step=target == "ascend-pt", absent=absent)
    steps = pq.read_table(run_dir(key) / "steps.parquet").to_pylist()
    if target == "ascend-pt":  # ProfilerStep#N frames and one cpu_op per launched task
        frames = profile.step_frames.to_pylist()  # type: ignore[union-attr]
        assert [(f["step"], f["start_ns"], f["dur_ns"], f["op_count"], f["first_op_index"]) for f in frames] == [
            (s["step"], s["host_start_ns"], s["sync_end_ns"] - s["host_start_ns"], s["op_count"], s["first_op_index"])
            for s in steps
        ]
        launched = original.num_rows - original["host_launch_start_ns"].null_count
        assert profile.framework is not None and profile.framework.num_rows == launched
    else:  # msprof has neither Step Id nor a Python layer: the run's steps come back as iterations
        assert profile.framework is None
        frames = profile.step_frames.to_pylist()  # type: ignore[union-attr]
        assert [f["frame"] for f in frames] == ["iteration"] * len(steps)
        assert [f["op_count"] for f in frames] == [s["op_count"] for s in steps]
        # graph mode: one aclmdlRIExecuteAsync per step on the CANN layer; eager: the host time between steps
        found_by = str(profile.meta["steps_from"])
        assert ("graph launches" in found_by) if key == "graph" else ("idle gaps" in found_by)
    graph = profile.ops["graph_launch"]
    assert graph.null_count == 0 and set(graph.to_pylist()) == {key == "graph"}


@pytest.mark.parametrize("target", ["ascend-pt", "msprof"])
def test_exported_timeline_alone_gives_the_same_tasks(
    target: ExportTarget, run_dir: Callable[[str], Path], exported: Callable[[str, ExportTarget], ExportResult]
) -> None:
    """trace_view.json / msprof_*.json alone: the Ascend Hardware tasks are the op rows, types from names."""
    original = pq.read_table(run_dir("910b") / "ops.parquet")
    root = exported("910b", target).root
    (timeline,) = [p for p in root.rglob("*.json") if p.name == "trace_view.json" or p.name.startswith("msprof_")]
    profile = load_profile(timeline)
    assert profile.kind == "trace_view"
    for col in ("op_name", "op_type", "task_type", "stream_id", "task_id", "task_start_ns", "task_dur_ns"):
        assert profile.ops[col].to_pylist() == original[col].to_pylist(), col
    assert profile.ops["task_wait_ns"].to_pylist() == original["task_wait_ns"].to_pylist()
    assert profile.ops["host_launch_start_ns"].to_pylist() == original["host_launch_start_ns"].to_pylist()


def test_our_run_directory(run_dir: Callable[[str], Path]) -> None:
    profile = load_profile(run_dir("910a"))
    assert profile.kind == "atbprof-run"
    assert profile.meta["origin_ns"] == 0
    assert profile.steps is not None and profile.step_frames is not None
    assert profile.step_frames["frame"].to_pylist() == ["run"] * profile.steps.num_rows
    assert profile.ops.equals(pq.read_table(run_dir("910a") / "ops.parquet"))


def test_bare_ops_parquet(run_dir: Callable[[str], Path], tmp_path: Path) -> None:
    """A Parquet op table is recognised by its magic bytes, whatever its name."""
    copy = tmp_path / "table.bin"
    copy.write_bytes((run_dir("910a") / "ops.parquet").read_bytes())
    assert load_profile(copy).ops.num_rows == pq.read_metadata(copy).num_rows


def _split(lines: list[bytes], parts: int) -> list[bytes]:
    """A CSV cut into `parts` slices, each with the header (how msprof slices big outputs)."""
    header, rows = lines[0], [line for line in lines[1:] if line]
    size = -(-len(rows) // parts)
    return [b"\n".join([header, *rows[i * size : (i + 1) * size]]) + b"\n" for i in range(parts)]


def test_sliced_and_pre_cann8_msprof_layouts(
    run_dir: Callable[[str], Path], exported: Callable[[str, ExportTarget], ExportResult], tmp_path: Path
) -> None:
    """op_summary_slice_<n>_<ts>.csv (sliced output) and device_0/summary + device_0/timeline (before CANN 8.0)."""
    original = pq.read_table(run_dir("910b") / "ops.parquet")
    out = exported("910b", "msprof").root / "mindstudio_profiler_output"
    (table,) = out.glob("op_summary_*.csv")
    (timeline,) = out.glob("msprof_*.json")
    stamp = table.stem.rsplit("_", 1)[1]
    sliced = tmp_path / "PROF_000001_20250101000000000_ABCDEFGHIJKLMNOP" / "mindstudio_profiler_output"
    sliced.mkdir(parents=True)
    for i, part in enumerate(_split(table.read_bytes().split(b"\n"), 3)):
        (sliced / f"op_summary_slice_{i}_{stamp}.csv").write_bytes(part)
    (sliced / f"msprof_{stamp}.json").write_bytes(timeline.read_bytes())
    old = tmp_path / "PROF_000002_20250101000000000_ABCDEFGHIJKLMNOP" / "device_0"
    (old / "summary").mkdir(parents=True)
    (old / "timeline").mkdir()
    (old / "summary" / f"op_summary_0_1_1_{stamp}.csv").write_bytes(table.read_bytes())
    (old / "timeline" / f"msprof_0_1_1_{stamp}.json").write_bytes(timeline.read_bytes())
    for root in (sliced.parent, old.parent):
        profile = load_profile(root)
        assert profile.kind == "msprof"
        _compare(original, profile.ops, with_step=False, absent=set())
        assert len(profile.meta["table_files"]) == (3 if root == sliced.parent else 1)  # type: ignore[arg-type]


def test_bare_op_summary_and_output_directory(exported: Callable[[str, ExportTarget], ExportResult]) -> None:
    out = exported("910b", "msprof").root / "mindstudio_profiler_output"
    (table,) = out.glob("op_summary_*.csv")
    assert load_profile(table).kind == "op_summary"
    assert load_profile(out).kind == "msprof"  # the output directory itself
    pt_out = exported("910b", "ascend-pt").root / "ASCEND_PROFILER_OUTPUT"
    assert load_profile(pt_out).kind == "ascend_pt"


def test_ascend_pt_falls_back_to_its_embedded_msprof_output(
    run_dir: Callable[[str], Path], exported: Callable[[str, ExportTarget], ExportResult], tmp_path: Path
) -> None:
    """An *_ascend_pt whose ASCEND_PROFILER_OUTPUT lacks kernel_details / trace_view: the PROF_* inside it."""
    original = pq.read_table(run_dir("910b") / "ops.parquet")
    pt = tmp_path / "host_1_ascend_pt"
    (pt / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    msprof = exported("910b", "msprof").root
    shutil.copytree(msprof, pt / msprof.name)
    profile = load_profile(pt)
    assert profile.kind == "ascend_pt"
    _compare(original, profile.ops, with_step=False, absent=set())


def test_a_graph_mode_serving_capture_gets_its_iterations(
    run_dir: Callable[[str], Path], exported: Callable[[str, ExportTarget], ExportResult], tmp_path: Path
) -> None:
    """A vllm-ascend / MindIE capture in graph mode has no ProfilerStep: the exported torch_npu timeline of a
    graph-mode run without its ProfilerStep frames is cut at its aclmdlRIExecuteAsync replays, one per step, and every
    task is marked graph-launched (its Model ID)."""
    import orjson

    result = exported("graph", "ascend-pt")
    (timeline,) = result.root.rglob("trace_view.json")
    events = orjson.loads(timeline.read_bytes())
    kept = [e for e in events if not str(e.get("name", "")).startswith("ProfilerStep#")]
    assert len(kept) < len(events)
    assert sum(e.get("name") == "AscendCL@aclmdlRIExecuteAsync" for e in kept) == len(
        pq.read_table(run_dir("graph") / "steps.parquet")
    )
    serving = tmp_path / "trace_view.json"
    serving.write_bytes(orjson.dumps(kept))
    profile = load_profile(serving)
    steps = pq.read_table(run_dir("graph") / "steps.parquet").to_pylist()
    frames = profile.step_frames.to_pylist()  # type: ignore[union-attr]
    assert [f["op_count"] for f in frames] == [s["op_count"] for s in steps]
    assert "graph launches" in str(profile.meta["steps_from"]) and "aclmdlRIExecuteAsync" in str(
        profile.meta["steps_from"]
    )
    assert set(profile.ops["graph_launch"].to_pylist()) == {True}


def test_mstx_ranges_are_a_serving_captures_iterations(
    run_dir: Callable[[str], Path], exported: Callable[[str, ExportTarget], ExportResult], tmp_path: Path
) -> None:
    """An eager capture without ProfilerStep whose serving loop marked each iteration with an mstx range (the
    MsprofTx layer): the ranges are its steps, whatever they are named."""
    import orjson

    result = exported("910a", "ascend-pt")
    (timeline,) = result.root.rglob("trace_view.json")
    events = [e for e in orjson.loads(timeline.read_bytes()) if not str(e.get("name", "")).startswith("ProfilerStep#")]
    steps = pq.read_table(run_dir("910a") / "steps.parquet").to_pylist()
    base_us = 1_735_689_600_000_000  # the export's epoch (run time 0), µs
    events.append({"ph": "M", "name": "process_name", "pid": 424242, "tid": 0, "args": {"name": "MsprofTx"}})
    for s in steps:
        start_us = base_us + s["host_start_ns"] / 1e3
        dur_us = (s["sync_end_ns"] - s["host_start_ns"]) / 1e3
        events.append({"ph": "X", "name": "serve one batch", "pid": 424242, "tid": 1, "ts": f"{start_us:.3f}",
                       "dur": dur_us})  # fmt: skip
    serving = tmp_path / "trace_view.json"
    serving.write_bytes(orjson.dumps(events))
    profile = load_profile(serving)
    assert "mstx ranges" in str(profile.meta["steps_from"])
    frames = profile.step_frames.to_pylist()  # type: ignore[union-attr]
    assert [f["op_count"] for f in frames] == [s["op_count"] for s in steps]
