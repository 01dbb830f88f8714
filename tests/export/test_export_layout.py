"""The exported CSV / JSON files against the real Ascend samples and against ops.parquet, value by value."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from atbprof.export import ExportResult, ExportTarget
from atbprof.export.tables import PMU_910A, msprof_dtypes
from tests.export.helpers import QWEN, header, rel_ns, rows, sample, us_to_ns

Exported = Callable[[str, ExportTarget], ExportResult]
OPS = Path("ASCEND_PROFILER_OUTPUT")


def _file(result: ExportResult, pattern: str) -> Path:
    hits = [p for p in result.files if re.fullmatch(pattern, p.name)]
    assert len(hits) == 1, (pattern, [p.name for p in result.files])
    return hits[0]


def _ops(result: ExportResult, run_dir: Path) -> list[dict[str, object]]:
    table = pq.read_table(run_dir / "ops.parquet")
    return table.to_pylist()


def _union_ns_per_step(ops: list[dict[str, object]]) -> dict[int, int]:
    """Device busy time per step, computed the slow obvious way."""
    per_step: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for r in ops:
        s = int(r["task_start_ns"])  # type: ignore[call-overload]
        per_step[int(r["step"])].append((s, s + int(r["task_dur_ns"])))  # type: ignore[call-overload]
    out = {}
    for step, spans in per_step.items():
        total, end = 0, -1
        for s, e in sorted(spans):
            total += max(0, e - max(s, end))
            end = max(end, e)
        out[step] = total
    return out


def test_layout_names(exported: Exported) -> None:
    pt = exported("tiny-none", "ascend-pt")
    assert re.fullmatch(r"[\w-]+_\d+_\d{17}_ascend_pt", pt.root.name)
    names = {p.relative_to(pt.root).as_posix() for p in pt.files}
    assert names == {
        "profiler_info_0.json",
        "profiler_metadata.json",
        *(f"ASCEND_PROFILER_OUTPUT/{n}" for n in ("kernel_details.csv", "op_statistic.csv", "step_trace_time.csv")),
        "ASCEND_PROFILER_OUTPUT/trace_view.json",
    }
    ms = exported("tiny-none", "msprof")
    assert re.fullmatch(r"PROF_\d{6}_\d{17}_[A-Z]{16}", ms.root.name)
    out = {p.name for p in ms.files if p.parent.name == "mindstudio_profiler_output"}
    assert len(out) == 5 == len(ms.files)
    for pattern in (r"msprof_\d{14}\.json", r"op_summary_\d{14}\.csv", r"op_statistic_\d{14}\.csv"):
        assert sum(bool(re.fullmatch(pattern, n)) for n in out) == 1, pattern
    assert any(re.fullmatch(r"task_time_\d{14}\.csv", n) for n in out) and "README.txt" in out


def test_kernel_details_header_is_the_cann_8_3_sample(exported: Exported) -> None:
    real = header(sample(QWEN.name, "ASCEND_PROFILER_OUTPUT", "kernel_details.csv"))
    assert header(exported("tiny-910b", "ascend-pt").root / OPS / "kernel_details.csv") == real  # Ascend910B2
    a = header(exported("tiny-none", "ascend-pt").root / OPS / "kernel_details.csv")  # Ascend910 (910A)
    base = real[: real.index("Context ID") + 1]
    assert a == [*base, *PMU_910A]
    assert "aic_mac_ratio" not in a and "mac_ratio" in a


def test_op_summary_header_is_msprof_vocabulary(exported: Exported) -> None:
    got = header(_file(exported("tiny-910b", "msprof"), r"op_summary_\d+\.csv"))
    real = header(sample(QWEN.name, "ASCEND_PROFILER_OUTPUT", "kernel_details.csv"))
    renamed = {"Name": "Op Name", "Type": "OP Type", "Accelerator Core": "Task Type"}
    renamed |= {f"{k}(us)": f"Task {k}(us)" for k in ("Start Time", "Duration", "Wait Time")}
    assert got == [renamed.get(h, h) for h in real[1:]]  # msprof: no Step Id, msprof names
    assert got[:11] == [
        "Device_id",
        "Model ID",
        "Task ID",
        "Stream ID",
        "Op Name",
        "OP Type",
        "OP State",
        "Task Type",
        "Task Start Time(us)",
        "Task Duration(us)",
        "Task Wait Time(us)",
    ]


def test_small_tables_headers_match_samples(exported: Exported) -> None:
    pt = exported("tiny-none", "ascend-pt")
    for name in ("op_statistic.csv", "step_trace_time.csv"):
        assert header(pt.root / OPS / name) == header(sample(QWEN.name, "ASCEND_PROFILER_OUTPUT", name))
    ms = exported("tiny-none", "msprof")
    assert header(_file(ms, r"op_statistic_\d+\.csv")) == header(QWEN / OPS / "op_statistic.csv")
    assert header(_file(ms, r"task_time_\d+\.csv")) == (
        [
            "Device_id",
            "kernel_name",
            "kernel_type",
            "stream_id",
            "task_id",
            "task_time(us)",
            "task_start(us)",
            "task_stop(us)",
        ]
    )


@pytest.mark.parametrize("key", ["tiny-none", "tiny-910b", "tiny-graph"])
def test_kernel_details_rows_are_the_op_table(key: str, exported: Exported, make_run: Callable[[str], Path]) -> None:
    result = exported(key, "ascend-pt")
    path = result.root / OPS / "kernel_details.csv"
    ops = _ops(result, make_run(key))
    got = rows(path)
    assert len(got) == len(ops) == result.op_rows
    raw_lines = path.read_text().splitlines()[1:]
    for r, op, raw in zip(got, ops, raw_lines, strict=True):
        assert re.fullmatch(r"\d{16}\.\d{3}\t", r["Start Time(us)"]), "absolute µs, 3 decimals, trailing TAB"
        assert rel_ns(r["Start Time(us)"]) == op["task_start_ns"]
        assert us_to_ns(r["Duration(us)"]) == op["task_dur_ns"]
        assert us_to_ns(r["Wait Time(us)"]) == op["task_wait_ns"]
        assert (r["Step Id"], r["Name"], r["Type"], r["Accelerator Core"]) == (
            str(op["step"]),
            op["op_name"],
            op["op_type"],
            op["task_type"],
        )
        assert (r["Task ID"], r["Stream ID"], r["Block Dim"]) == tuple(
            str(op[k]) for k in ("task_id", "stream_id", "block_dim")
        )
        assert r["Input Shapes"] == f'"{op["input_shapes"]}"' and r["Output Shapes"] == f'"{op["output_shapes"]}"'
        assert f',"""{op["input_shapes"]}""",' in raw, "shapes are written as quoted quotes, like msprof"
        assert r["Input Data Types"] == msprof_dtypes(str(op["input_dtypes"]))
        assert "DT_FLOAT16" not in r["Input Data Types"] and "DT_FLOAT;" not in r["Input Data Types"] + ";"
        assert len(r["Input Formats"].split(";")) == len(str(op["input_shapes"]).split(";"))
        assert r["OP State"] == ("static" if key == "tiny-graph" else "dynamic")
        # a graph-mode run's tasks name their captured graph's model; eager tasks msprof's "no model"
        assert r["Model ID"] == ("1" if key == "tiny-graph" else "4294967295")
        assert r["Device_id"] == "0" and r["HF32 Eligible"] == "NO"


def test_pmu_columns_follow_the_core_split(exported: Exported, make_run: Callable[[str], Path]) -> None:
    result = exported("tiny-910b", "ascend-pt")
    ops = _ops(result, make_run("tiny-910b"))
    kinds = set()
    for r, op in zip(rows(result.root / OPS / "kernel_details.csv"), ops, strict=True):
        kinds.add(r["Accelerator Core"])
        if r["Accelerator Core"] == "AI_CORE":  # cube kernel: aic_* filled, aiv_* zero
            assert us_to_ns(r["aicore_time(us)"]) == op["task_dur_ns"] and r["aiv_time(us)"] == "0.0"
            assert us_to_ns(r["aic_mac_time(us)"]) == op["mac_time_ns"]
            assert abs(float(r["aic_mac_ratio"]) - float(op["mac_ratio"])) <= 0.0005  # type: ignore[arg-type]
        elif r["Accelerator Core"] == "AI_VECTOR_CORE":
            assert us_to_ns(r["aiv_time(us)"]) == op["task_dur_ns"] and r["aicore_time(us)"] == "0.0"
            assert us_to_ns(r["aiv_vec_time(us)"]) == op["vec_time_ns"]
            assert r["aic_total_cycles"] == "0" and int(r["aiv_total_cycles"]) > 0
        assert re.fullmatch(r"\d+\.\d{3}", r["cube_utilization(%)"])
    assert {"AI_CORE", "AI_VECTOR_CORE"} <= kinds
    a = rows(exported("tiny-none", "ascend-pt").root / OPS / "kernel_details.csv")
    assert {r["Accelerator Core"] for r in a} == {"AI_CORE"}  # 910A: one core type
    assert all(us_to_ns(r["aicore_time(us)"]) == us_to_ns(r["Duration(us)"]) for r in a)


def test_msprof_tables_are_the_op_table(exported: Exported, make_run: Callable[[str], Path]) -> None:
    result = exported("tiny-910b", "msprof")
    ops = _ops(result, make_run("tiny-910b"))
    summary = rows(_file(result, r"op_summary_\d+\.csv"))
    tasks = rows(_file(result, r"task_time_\d+\.csv"))
    assert len(summary) == len(tasks) == len(ops) == result.op_rows
    for s, t, op in zip(summary, tasks, ops, strict=True):
        assert (s["Op Name"], s["OP Type"], s["Task Type"]) == (op["op_name"], op["op_type"], op["task_type"])
        assert s["Task Start Time(us)"].endswith("\t") and rel_ns(s["Task Start Time(us)"]) == op["task_start_ns"]
        assert t["task_start(us)"].endswith("\t") and t["task_stop(us)"].endswith("\t")
        assert rel_ns(t["task_stop(us)"]) - rel_ns(t["task_start(us)"]) == op["task_dur_ns"]
        assert (t["kernel_name"], t["kernel_type"]) == (op["op_name"], op["task_type"])
    kd = (exported("tiny-910b", "ascend-pt").root / OPS / "kernel_details.csv").read_text().splitlines()
    os_lines = _file(result, r"op_summary_\d+\.csv").read_text().splitlines()
    assert [line.split(",", 1)[1] for line in kd[1:]] == os_lines[1:], "same cells, kernel_details adds Step Id"


def test_op_statistic_sums_the_op_table(exported: Exported, make_run: Callable[[str], Path]) -> None:
    result = exported("tiny-none", "ascend-pt")
    ops = _ops(result, make_run("tiny-none"))
    stat = rows(result.root / OPS / "op_statistic.csv")
    want: dict[tuple[str, str], list[int]] = defaultdict(list)
    for op in ops:
        want[str(op["op_type"]), str(op["task_type"])].append(int(op["task_dur_ns"]))  # type: ignore[call-overload]
    assert {(r["OP Type"], r["Core Type"]) for r in stat} == set(want)
    assert sum(int(r["Count"]) for r in stat) == len(ops)
    totals = [float(r["Total Time(us)"]) for r in stat]
    assert totals == sorted(totals, reverse=True)
    for r in stat:
        d = want[r["OP Type"], r["Core Type"]]
        assert int(r["Count"]) == len(d)
        assert float(r["Total Time(us)"]) == pytest.approx(sum(d) / 1000, abs=5e-4)
        assert float(r["Min Time(us)"]) == pytest.approx(min(d) / 1000, abs=5e-4)
        assert float(r["Max Time(us)"]) == pytest.approx(max(d) / 1000, abs=5e-4)
    assert sum(float(r["Ratio(%)"]) for r in stat) == pytest.approx(100, abs=0.05)


@pytest.mark.parametrize("key", ["tiny-none", "tiny-graph"])
def test_step_trace_time_per_step(key: str, exported: Exported, make_run: Callable[[str], Path]) -> None:
    result = exported(key, "ascend-pt")
    run = make_run(key)
    steps = pq.read_table(run / "steps.parquet").to_pylist()
    busy = _union_ns_per_step(_ops(result, run))
    got = rows(result.root / OPS / "step_trace_time.csv")
    assert [int(r["Step"]) for r in got] == [s["step"] for s in steps] and result.steps == len(steps)
    for r, s in zip(got, steps, strict=True):
        stage = s["sync_end_ns"] - s["host_start_ns"]
        assert float(r["Computing"]) == pytest.approx(busy[s["step"]] / 1000, abs=1e-6)
        assert float(r["Stage"]) == pytest.approx(stage / 1000, abs=1e-6)
        assert float(r["Free"]) == pytest.approx((stage - busy[s["step"]]) / 1000, abs=1e-6)
        assert float(r["Preparing"]) == pytest.approx((s["device_start_ns"] - s["host_start_ns"]) / 1000, abs=1e-6)
        assert float(r["Communication"]) == 0 and r["Device_id"] == "0"


def test_profiler_info_has_the_sample_structure(exported: Exported) -> None:
    result = exported("tiny-none", "ascend-pt")
    info = json.loads((result.root / "profiler_info_0.json").read_text())
    real = json.loads(sample(QWEN.name, "profiler_info_0.json").read_text())
    assert info.keys() == real.keys()
    for section in ("common_config", "experimental_config"):
        assert info["config"][section].keys() == real["config"][section].keys()
    assert info["start_info"].keys() == real["start_info"].keys() and info["end_info"].keys() == real["end_info"].keys()
    assert info["config"]["experimental_config"]["_aic_metrics"] == "ACL_AICORE_PIPE_UTILIZATION"
    assert info["cann_version"] == "8.3.RC1"
    meta = json.loads((result.root / "profiler_metadata.json").read_text())
    assert "ENV_VARIABLES" in meta and meta["atbprof"]["simulated"] is True
    # the run's name says what its overrides changed
    assert meta["atbprof"]["run_name"] == "tiny-llama-decode_tokens-3-fusion-none"
    assert meta["atbprof"]["fusion_strategy"] == "none"
