"""A diff across vendors compares by role: cuBLAS vs hipBLASLt GEMMs and flash_fwd vs attn_fwd are renamings, not
removed and added kernels."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson
import pytest

from atbprof.diff.api import diff
from atbprof.diff.like import cross_vendor, vendor
from atbprof.importers import load_profile
from tests.importers.conftest import SHARED, shared

LAYER = ("rms_norm_kernel", "GEMM", "ATTN", "GEMM", "rms_norm_kernel", "GEMM", "act_and_mul_kernel", "GEMM")
NAMES = {
    "NVIDIA H100 80GB HBM3": {"GEMM": "nvjet_sm90_hsh_128x8_64x12_4x1_v_bz_TNT", "ATTN": "flash_fwd_kernel"},
    "AMD Instinct MI300X": {"GEMM": "Cijk_Alik_Bljk_BBS_BH_MT256x32x64", "ATTN": "attn_fwd"},
}


def _trace(tmp_path: Path, device: str, scale: float) -> Path:
    """Three ProfilerSteps of two decoder layers, kernels named as `device`'s libraries name them."""
    events: list[dict[str, Any]] = []
    corr, t = 0, 0.0
    for step in range(3):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": t, "dur": 400.0})  # fmt: skip
        at = t + 5
        for _ in range(2):
            for k in LAYER:
                corr += 1
                name = NAMES[device].get(k, k)
                dur = (12.0 if k in ("GEMM", "ATTN") else 3.0) * scale
                events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                               "ts": at, "dur": 2.0, "args": {"correlation": corr}})  # fmt: skip
                events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": at + 3,
                               "dur": dur, "args": {"correlation": corr, "stream": 7}})  # fmt: skip
                at += dur + 4
        t += 400.0
    path = tmp_path / f"{device.split()[0]}.json.gz"
    path.write_bytes(gzip.compress(orjson.dumps({"traceEvents": events, "deviceProperties": [{"name": device}]})))
    return path


def test_a_cross_vendor_diff_compares_by_role(tmp_path: Path) -> None:
    base = load_profile(_trace(tmp_path, "NVIDIA H100 80GB HBM3", 1.0), framework=False)
    new = load_profile(_trace(tmp_path, "AMD Instinct MI300X", 1.5), framework=False)
    assert cross_vendor(base, new) == ("NVIDIA", "AMD")
    report = diff(base, new).report
    assert report.by == "category"
    assert any("compare by role" in n for n in report.notes)
    changes = {r.name: r.classification for r in report.rows}
    assert changes["attention"] == "slower" and changes["ffn"] == "slower"  # 1.5x longer kernels, same roles
    assert "removed" not in changes.values() and "added" not in changes.values()
    by_name = diff(base, new, by="op-type").report  # asked for names: it says what they mean
    assert any("renamed kernels show as removed and added" in n for n in by_name.notes)


@pytest.mark.parametrize(
    ("name", "maker"),
    [
        ("h200_llama2-7b_L4_eager.pt.trace.json.gz", "NVIDIA"),
        ("tracelens_mi300_sglang_qwen3-8b_decode_hipgraph.json.gz", "AMD"),
        ("tracelens_vllm_prefilldecode_piecewise_graph.json.gz", None),  # its deviceProperties carry no name
    ],
)
def test_the_vendor_comes_from_the_trace(name: str, maker: str | None) -> None:
    assert vendor(load_profile(shared(SHARED / "anchors" / "gpu" / name), framework=False)) == maker
