"""The device-model what-if on a small foreign profile: the arithmetic of each kind, and no norm removed twice."""

from __future__ import annotations

import pyarrow as pa
import pytest

from atbprof.analyze import analyze
from atbprof.analyze.estimate import estimate
from atbprof.importers.base import Profile
from atbprof.optable.schema import OPS_SCHEMA

# (type, start µs, duration µs, input shapes, output shapes): residual Add, RmsNorm, its MatMul; 5 µs launch gaps
ROWS = [
    ("Add", 0, 30, "4096,1,1024;4096,1,1024", "4096,1,1024"),
    ("RmsNorm", 35, 30, "4096,1,1024;1024", "4096,1,1024;4096,1,1"),
    ("MatMulV3", 70, 200, "4096,1024;4096,1024", "4096,4096"),
]


def profile(shapes: bool = True) -> Profile:
    n = len(ROWS)
    cols: dict[str, list[object]] = {f.name: [None] * n for f in OPS_SCHEMA}
    for i, (typ, start, dur, ins, outs) in enumerate(ROWS):
        cols["op_index"][i], cols["op_name"][i], cols["op_type"][i] = i, typ, typ
        cols["task_start_ns"][i], cols["task_dur_ns"][i], cols["stream_id"][i] = start * 1000, dur * 1000, 2
        if shapes:
            cols["input_shapes"][i], cols["output_shapes"][i] = ins, outs
            cols["input_dtypes"][i] = "DT_BF16;DT_BF16"
    return Profile("kernel_details", "synthetic", pa.Table.from_pydict(cols, schema=OPS_SCHEMA), None, None, {})


def savings(report_profile: Profile) -> dict[str, float]:
    report = analyze(report_profile)
    return {f.kind: f.est_saving_us for f in report.findings}


def test_add_norm_then_norm_matmul_adds_up_to_one_fusion_of_all_three() -> None:
    got = savings(profile())
    add_rms = estimate("add_norm", 4096, 1024, 0, "bf16", False, False, "910B2")
    folded = estimate("norm_matmul", 4096, 1024, 4096, "bf16", False, True, "910B2")
    # Add->Norm: Add + RmsNorm + the wait before the RmsNorm become one AddRmsNorm
    assert got["add_norm"] == pytest.approx(30 + 30 + 5 - add_rms.fused_ns / 1e3, abs=1e-3)
    # Norm->MatMul on top of it: that AddRmsNorm (not the measured RmsNorm again) folds into the measured MatMul
    marginal = (folded.fused_ns - folded.matmul_ns) / 1e3
    assert got["norm_matmul"] == pytest.approx(add_rms.fused_ns / 1e3 + 5 - marginal, abs=1e-3)
    assert got["add_norm"] + got["norm_matmul"] == pytest.approx(30 + 30 + 5 + 5 - marginal, abs=1e-3)


def test_without_shapes_a_fused_kernel_costs_its_longest_member() -> None:
    got = savings(profile(shapes=False))
    assert got["add_norm"] == pytest.approx(30 + 30 + 5 - 30)
    assert got["norm_matmul"] == pytest.approx(30 + 5)  # the norm (its Add-fused stand-in) folds in for free


def test_estimates_are_reported_per_occurrence() -> None:
    report = analyze(profile())
    occ = report.occurrences
    assert occ.column("est_saving_ns").null_count == 0
    fused = dict(zip(occ.column("kind").to_pylist(), occ.column("est_fused_ns").to_pylist(), strict=True))
    assert fused["fused_norm"] is None and fused["add_norm"] > 0
