#!/usr/bin/env python3
"""`atbprof analyze` speed, side by side with the peers, in one invocation (medians of --repeat runs).

    python scripts/bench_analyze.py                 # installs the peers into a private venv on first use

1. Kineto JSON import: atbprof's importer vs HolisticTraceAnalysis' `parse_trace_file` on the same files.
2. The Qwen3 torch_npu sample: `atbprof analyze` vs `msprof-analyze advisor all` (wall time of the commands).
3. Simulated runs of ~1,000,000 ops: `analyze()` on the loaded profile (target: under 1 s), a `fusion none` run and
   a seed 000 baseline run (its what-if re-simulates twice). Each call starts cold: the fusion-prefix cache that a
   previous call (or the simulation of the run itself, in this process) filled is cleared first, as in a fresh
   `atbprof analyze` process.

The peers are not atbprof dependencies: HolisticTraceAnalysis 0.5.0 goes into .bench-venv (with --no-deps plus
pandas/numpy/psutil/pyyaml, as its docs advise); msprof-analyze comes from the test extra or that venv too.
"""

from __future__ import annotations

import argparse
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
from atbprof.fusion import passes  # noqa: E402
from atbprof.importers import Profile, load_profile  # noqa: E402
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
    ap.add_argument("--only", choices=["kineto", "qwen3", "million"], help="run one part")
    args = ap.parse_args()
    py = peer_python()
    if args.only in (None, "kineto"):
        bench_kineto(py, args.repeat)
    if args.only in (None, "qwen3"):
        bench_qwen3(args.repeat)
    if args.only in (None, "million"):
        bench_million(args.repeat)


def bench_kineto(py: Path, repeat: int) -> None:
    print("1. Kineto import: atbprof vs HolisticTraceAnalysis parse_trace_file (median seconds)")
    for name in KINETO:
        trace = SHARED / "traces" / name
        ours = median_time(lambda t=trace: load_profile(t), repeat)
        theirs = hta_seconds(py, trace, repeat)
        print(f"   {name:55s} atbprof {ours:6.3f} s  HTA {theirs:6.3f} s  ratio {theirs / ours:5.1f}x")


def bench_qwen3(repeat: int) -> None:
    print("2. Qwen3 torch_npu sample: atbprof analyze vs msprof-analyze advisor all (wall seconds, commands)")
    atb = [sys.executable, "-m", "atbprof.cli", "analyze", str(QWEN3), "--format", "json"]
    advisor = [str(PEER_VENV / "bin" / "msprof-analyze"), "advisor", "all", "-d", str(QWEN3), "-o"]
    ours: list[float] = []
    theirs: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeat):  # interleaved, so both see the same machine load
            ours.append(median_time(lambda: subprocess.run(atb, check=True, capture_output=True), 1))
            theirs.append(median_time(lambda: subprocess.run([*advisor, tmp], capture_output=True, input=b"y\n"), 1))
    mine, peer = statistics.median(ours), statistics.median(theirs)
    print(f"   atbprof analyze {mine:6.2f} s   msprof-analyze advisor all {peer:6.2f} s   ratio {peer / mine:5.1f}x")


def bench_million(repeat: int) -> None:
    print("3. analyze() on simulated runs of ~1M ops (LLaMA-2-7B; cold fusion cache per call)")
    runs = [
        ("llama2-7b-910b2.yaml", ["fusion=none", "workload.decode_tokens=605"], "fusion none"),
        ("seed000-baseline.yaml", ["workload.decode_tokens=1188"], "seed 000 baseline, 2 re-simulations"),
    ]
    for config, overrides, label in runs:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = load_config(ROOT / "fixtures" / config, [*overrides, "output.trace=false"])
            run = run_simulation(cfg, Path(tmp) / "r")
            profile = load_profile(run.out_dir)

            def cold(whatif: bool, p: Profile = profile) -> None:
                passes._PREFIXES.clear()
                analyze(p, whatif=whatif)

            with_whatif = median_time(lambda: cold(True), repeat)
            without = median_time(lambda: cold(False), repeat)
            print(
                f"   {label:38s} {profile.ops.num_rows:,} ops: analyze {with_whatif:.2f} s (with the exact "
                f"what-if), {without:.2f} s without"
            )


if __name__ == "__main__":
    main()
