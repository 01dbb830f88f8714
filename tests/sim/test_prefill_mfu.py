"""summary.prefill_mfu: the prefill's FLOPs over TTFT x peak, and the device model's ceiling on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from atbprof.config import load_config
from atbprof.device.spec import load_device
from atbprof.run import run_simulation, summarize

CONFIG = Path(__file__).parents[2] / "fixtures" / "llama2-7b-910b2.yaml"


def test_mfu_is_the_prefills_flops_over_ttft_and_peak(tmp_path: Path) -> None:
    cfg = load_config(CONFIG, ["workload.batch_size=4", "workload.decode_tokens=2", "execution.mode=graph"])
    result = run_simulation(cfg, tmp_path / "r")
    ops = pq.read_table(tmp_path / "r" / "ops.parquet", columns=["phase", "flops"])
    prefill = np.array(ops.column("phase").to_pylist()) == "prefill"
    flops = float(ops.column("flops").to_numpy()[prefill].sum())
    expected = flops / (result.summary.ttft_ms / 1e3) / load_device("910B2").peak_flops
    assert result.summary.prefill_mfu == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize(
    "sets",
    [
        ["model.preset=llama3-8b", "model.dtype=bf16", "workload.batch_size=128", "workload.prompt_len=128"],
        ["model.preset=llama3-8b", "model.dtype=bf16", "workload.batch_size=32", "workload.prompt_len=512"],
        ["model.preset=llama2-13b", "workload.batch_size=8", "workload.prompt_len=2048"],
    ],
)
def test_no_prefill_beats_what_real_gemms_reach(sets: list[str]) -> None:
    """The largest GEMMs are priced at the PMU-measured MAC rate less its MTE2 stall (0.84 of peak): the prefills
    where GEMMs are nearly everything (the grid's highest, scripts/prefill_grid.py) stay at or below 0.80."""
    s = summarize(load_config(CONFIG, [*sets, "workload.decode_tokens=1", "execution.mode=graph"]))
    assert 0.70 < s.prefill_mfu <= 0.80
