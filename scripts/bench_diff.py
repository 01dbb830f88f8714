#!/usr/bin/env python3
"""`atbprof diff` speed, side by side with HTA's TraceDiff, in one invocation (medians of --repeat runs).

    python scripts/bench_diff.py                    # installs the peer into a private venv on first use
    python scripts/bench_diff.py --pin-hta          # also rewrite tests/diff/data/hta_ops_diff.json from HTA

1. Two simulated runs of ~1,000,000 ops each (LLaMA-2-7B on 910B2, unfused, jitter on, two jitter seeds): load
   both run directories and diff them (target: under 2 s), and `diff()` alone on the loaded profiles; then the
   same model unfused vs default fusion (every decomposed chain matched to its fused kernel).
2. The HTA TraceDiff pair under ../shared/anchors/traces: `atbprof diff` (load both + diff, in process) vs
   HolisticTraceAnalysis 0.5.0 `TraceDiff.compare_traces` (which parses both too), same files (target: 20x), warm
   on both sides (an untimed call right before each timed one), the two in turn --repeat times; the load average
   is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_analyze import median_times, peer_medians, peer_python  # noqa: E402

from atbprof.config import load_config  # noqa: E402
from atbprof.diff.api import diff, diff_paths  # noqa: E402
from atbprof.importers import load_profile  # noqa: E402
from atbprof.run import run_simulation  # noqa: E402

TRACES = ROOT.parent / "shared" / "anchors" / "traces"
PAIR = ("hta_trace_diff_control.json.gz", "hta_trace_diff_test.json.gz")
PINNED = ROOT / "tests" / "diff" / "data" / "hta_ops_diff.json"
JITTER = ["execution.jitter.kernel_cv=0.05", "execution.jitter.host_cv=0.1"]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def hta_seconds(py: Path, control: Path, test: Path, repeat: int) -> tuple[float, float]:
    """Median wall and CPU seconds of HTA's TraceDiff.compare_traces (it parses both traces too)."""
    call = f"TraceDiff.compare_traces({str(control)!r}, {str(test)!r})"
    return peer_medians(py, "from hta.trace_diff import TraceDiff", call, repeat, warm=True)


def pin_hta(py: Path, control: Path, test: Path) -> None:
    code = (
        "import json,logging,warnings\nlogging.disable(logging.CRITICAL)\nwarnings.filterwarnings('ignore')\n"
        "from hta.trace_diff import TraceDiff, DeviceType\n"
        f"d = TraceDiff.ops_diff({str(control)!r}, {str(test)!r}, device_type=DeviceType.GPU)\n"
        "print(json.dumps({k: sorted(v) for k, v in d.items()}))"
    )
    out = subprocess.run([str(py), "-c", code], check=True, capture_output=True, text=True).stdout
    doc = {
        "source": "HolisticTraceAnalysis 0.5.0 TraceDiff.ops_diff(control, test, device_type=GPU), kernels by full "
        "name; written by scripts/bench_diff.py --pin-hta",
        "all": json.loads(out.strip().splitlines()[-1]),
    }
    PINNED.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"   wrote {PINNED}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pin-hta", action="store_true", help="rewrite the pinned HTA ops_diff of the tests")
    ap.add_argument("--skip-big", action="store_true", help="only the HTA pair")
    ap.add_argument("--json", type=Path, help="also write the HTA pair's figures here")
    args = ap.parse_args()
    if not args.skip_big:
        print("1. two ~1M-op runs (llama2-7b-910b2, decode 606 tokens; median seconds)")
        with tempfile.TemporaryDirectory() as tmp:
            dirs = {}
            for key, overrides in {
                "seed1": ["fusion=none", *JITTER, "seed=1"],
                "seed2": ["fusion=none", *JITTER, "seed=2"],
                "default": ["fusion=default", *JITTER, "seed=2"],
            }.items():
                cfg = load_config(
                    ROOT / "fixtures" / "llama2-7b-910b2.yaml",
                    [*overrides, "workload.decode_tokens=606", "output.trace=false"],
                )
                dirs[key] = run_simulation(cfg, Path(tmp) / key).out_dir
            for a, b in (("seed1", "seed2"), ("seed1", "default")):
                pa_, pb_ = load_profile(dirs[a]), load_profile(dirs[b])
                total, _ = median_times(lambda a=a, b=b: diff_paths(dirs[a], dirs[b]), args.repeat)
                alone, _ = median_times(lambda pa_=pa_, pb_=pb_: diff(pa_, pb_), args.repeat)
                report = diff(pa_, pb_).report
                head = report.headline.decode_ms_per_token
                assert head is not None
                print(
                    f"   {a} ({pa_.ops.num_rows:,} ops) vs {b} ({pb_.ops.num_rows:,} ops): load + diff {total:.2f} s, "
                    f"diff() {alone:.2f} s; decode {head.base:.3f} -> {head.new:.3f} ms "
                    f"({head.delta_pct:+.2f} %, CI [{head.ci_low}, {head.ci_high}], significant={head.significant})"
                )
    print("2. HTA TraceDiff pair: atbprof (load both + diff, in process) vs HTA TraceDiff.compare_traces")
    py = peer_python()
    control, test = (TRACES / n for n in PAIR)
    with tempfile.TemporaryDirectory() as tmp:
        # HTA reads a directory per trace
        dc, dt = Path(tmp) / "control", Path(tmp) / "test"
        for d, f in ((dc, control), (dt, test)):
            d.mkdir()
            shutil.copy(f, d / f.name)
        before = load()
        rounds = []
        for _ in range(args.repeat):  # A/B in turn: a drift of the machine's speed hits both sides alike
            diff_paths(control, test)  # warm right before, as HTA's timed call is (its first call is untimed too)
            rounds.append((*median_times(lambda: diff_paths(control, test), 1), *hta_seconds(py, dc, dt, 1)))
        ours, ours_cpu, theirs, theirs_cpu = (statistics.median(r[i] for r in rounds) for i in range(4))
        print(
            f"   wall: atbprof {ours:6.3f} s   HTA {theirs:6.3f} s   ratio {theirs / ours:5.1f}x\n"
            f"   CPU:  atbprof {ours_cpu:6.3f} s   HTA {theirs_cpu:6.3f} s   ratio {theirs_cpu / ours_cpu:5.1f}x\n"
            f"   load average before / after: {before} / {load()}"
        )
        if args.json:
            row = {"pair": "HTA TraceDiff control/test", "atbprof_s": ours, "hta_s": theirs, "ratio": theirs / ours}
            row |= {"atbprof_cpu_s": ours_cpu, "hta_cpu_s": theirs_cpu, "load": [before, load()]}
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"bench": "diff", "rows": [row]}, indent=1) + "\n")
        if args.pin_hta:
            pin_hta(py, dc, dt)


if __name__ == "__main__":
    main()
