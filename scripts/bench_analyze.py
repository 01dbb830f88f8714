#!/usr/bin/env python3
"""`atbprof analyze` speed, side by side with the peers, in one invocation (medians of --repeat runs).

    python scripts/bench_analyze.py                 # installs the peers into a private venv on first use

1. Kineto JSON import: atbprof's importer vs HolisticTraceAnalysis' `parse_trace_file` on the same files.
2. The Qwen3 torch_npu sample: `atbprof analyze` vs `msprof-analyze advisor all` (wall time of the commands).
3. A simulated run of ~1,000,000 ops: `analyze()` on the loaded profile (target: under 1 s).

The peers are not atbprof dependencies: HolisticTraceAnalysis 0.5.0 goes into .bench-venv (with --no-deps plus
pandas/numpy/psutil/pyyaml, as its docs advise); msprof-analyze comes from the test extra or that venv too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "anchors"
sys.path.insert(0, str(ROOT))

from atbprof.analyze import analyze  # noqa: E402
from atbprof.config import load_config  # noqa: E402
from atbprof.importers import load_profile  # noqa: E402
from atbprof.run import run_simulation  # noqa: E402

PEER_VENV = ROOT / ".bench-venv"
KINETO = [
    "kineto_tbplugin_resnet50_worker0.pt.trace.json.gz",
    "hta_trace_diff_control.json.gz",
    "hta_ns_resolution_rank0.pt.trace.json.gz",
]
QWEN3 = SHARED / "ascend_samples" / "msinsight_qwen3_0.6b_level2_rank0"


def peer_python() -> Path:
    py = PEER_VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        pip = [str(py), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "--no-deps", "holistictraceanalysis==0.5.0"], check=True)
        subprocess.run([*pip, "pandas", "numpy", "psutil", "pyyaml", "msprof-analyze==26.2.0"], check=True)
    return py


def median_time(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def hta_seconds(py: Path, trace: Path, repeat: int) -> float:
    code = (
        "import json,statistics,sys,time,logging\nlogging.disable(logging.CRITICAL)\n"
        "from hta.common.trace import parse_trace_file\nts=[]\n"
        f"for _ in range({repeat}):\n t=time.perf_counter(); parse_trace_file({str(trace)!r}); "
        "ts.append(time.perf_counter()-t)\nprint(json.dumps(statistics.median(ts)))"
    )
    out = subprocess.run([str(py), "-c", code], check=True, capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    py = peer_python()
    print("1. Kineto import: atbprof vs HolisticTraceAnalysis parse_trace_file (median seconds)")
    for name in KINETO:
        trace = SHARED / "traces" / name
        ours = median_time(lambda t=trace: load_profile(t), args.repeat)
        theirs = hta_seconds(py, trace, args.repeat)
        print(f"   {name:55s} atbprof {ours:6.3f} s  HTA {theirs:6.3f} s  ratio {theirs / ours:5.1f}x")
    print("2. Qwen3 torch_npu sample: atbprof analyze vs msprof-analyze advisor all (wall seconds, commands)")
    atb = [sys.executable, "-m", "atbprof.cli", "analyze", str(QWEN3), "--format", "json"]
    ours = median_time(lambda: subprocess.run(atb, check=True, capture_output=True), args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        advisor = [str(PEER_VENV / "bin" / "msprof-analyze"), "advisor", "all", "-d", str(QWEN3), "-o", tmp]
        theirs = median_time(lambda: subprocess.run(advisor, capture_output=True, input=b"y\n"), args.repeat)
    print(
        f"   atbprof analyze {ours:6.2f} s   msprof-analyze advisor all {theirs:6.2f} s   ratio {theirs / ours:5.1f}x"
    )
    print("3. analyze() on a simulated run of ~1M ops (llama2-7b-910b2, fusion none)")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(
            ROOT / "fixtures" / "llama2-7b-910b2.yaml",
            ["fusion=none", "workload.decode_tokens=605", "output.trace=false"],
        )
        run = run_simulation(cfg, Path(tmp) / "r")
        profile = load_profile(run.out_dir)
        with_whatif = median_time(lambda: analyze(profile), args.repeat)
        without = median_time(lambda: analyze(profile, whatif=False), args.repeat)
        print(
            f"   {profile.ops.num_rows:,} ops: analyze {with_whatif:.2f} s (incl. exact re-simulation), "
            f"{without:.2f} s without what-if; load_profile {median_time(lambda: load_profile(run.out_dir), 1):.2f} s"
        )
    _ = json


if __name__ == "__main__":
    main()
