"""Not a benchmark: a guard that analyze stays linear on a real million-op run (measured ~0.6 s on a 2-core
machine; the bound is loose, and it is this process's CPU time, so a busy machine does not flake)."""

from __future__ import annotations

import time
from pathlib import Path

from atbprof.analyze import analyze
from tests.analyze.conftest import simulate


def test_a_million_op_run_is_analyzed_quickly(tmp_path: Path) -> None:
    # LLaMA-2-7B unfused on 910B2: 1,649 ops per step x 607 steps = 1,000,943 ops
    profile = simulate(tmp_path / "big", "llama2-7b-910b2.yaml", "fusion=none", "workload.decode_tokens=606")
    assert profile.ops.num_rows >= 1_000_000
    start = time.process_time()
    report = analyze(profile)
    elapsed = time.process_time() - start
    decode = report.findings[0].by_phase["decode"]
    assert (report.findings[0].kind, decode.per_step, decode.count) == ("decomposed_rmsnorm", 65, 65 * 606)
    assert report.whatif.method == "resimulated"
    assert elapsed < 5, f"analyze took {elapsed:.2f} s for {profile.ops.num_rows:,} ops"
