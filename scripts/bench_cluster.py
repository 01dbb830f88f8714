#!/usr/bin/env python3
"""`atbprof analyze` of a cluster export, at 32 / 128 / 1,024 ranks, side by side with msprof-analyze's cluster mode.

    python scripts/bench_cluster.py                       # 32 and 128 ranks, with msprof-analyze on both
    python scripts/bench_cluster.py --ranks 32,128,1024   # adds the 1,024-rank cluster (its export takes ~5 min)

The clusters are simulated LLaMA-2-70B serving runs (910B2, tp 8 x pp 4 x dp N/32, batch 8, prompt 1024, 8 decode
tokens, graph mode) exported as torch_npu writes a job: one *_ascend_pt directory per rank with step_trace_time.csv,
communication.json, communication_matrix.json and the parallel groups; one rank per pipeline stage also gets its
kernel tables (`--kernel-ranks`), as a user profiles a few ranks in full. They are cached under .bench-cache/, keyed
by the config, so a second invocation only times the analysis.

The 4-rank size is the real Qwen3-0.6B cluster anchor (copied under .bench-cache/: msprof-analyze writes into it).

What is measured, each command in a fresh process, the three in turn --repeat times (wall time medians; peak RSS
from wait4; the load average printed before and after):
  * `atbprof analyze CLUSTER --format json` in process (--workers 0) and with --workers 2;
  * `msprof-analyze cluster -d CLUSTER -m all` on the same directory (its output directory removed between runs),
    up to --peer-max ranks (it is the slow side).
The speed-up is msprof-analyze's median over the faster of atbprof's two.
Targets (issue 15): 1,024 ranks analysed in under 60 s; peak RSS bounded (1,024 ranks within 4x of 128 ranks'); at
least 10x faster than msprof-analyze on the same cluster.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".bench-cache"
BIN = Path(sys.executable).parent
ATBPROF = BIN / "atbprof"


def peer() -> str | None:
    beside = BIN / "msprof-analyze"
    return str(beside) if beside.exists() else shutil.which("msprof-analyze")


def config(ranks: int) -> str:
    if ranks % 32:
        raise SystemExit(f"--ranks: {ranks} is not a multiple of 32 (tp 8 x pp 4)")
    return (
        f"name: bench-cluster-{ranks}\n"
        "model: {preset: llama2-70b}\n"
        "device: {preset: 910B2}\n"
        f"parallel: {{tp: 8, pp: 4, dp: {ranks // 32}}}\n"
        "workload: {batch_size: 8, prompt_len: 1024, decode_tokens: 8}\n"
        "execution: {mode: graph}\n"
    )


def cluster(ranks: int) -> Path:
    """The export root of the `ranks`-rank cluster, built once per config."""
    text = config(ranks)
    key = hashlib.sha256(text.encode()).hexdigest()[:12]
    base = CACHE / f"cluster-{ranks}-{key}"
    done = base / "export.json"
    if done.exists():
        return (base / json.loads(done.read_text())["root"]).resolve()
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    (base / "cfg.yaml").write_text(text)
    t0 = time.perf_counter()
    subprocess.run(
        [ATBPROF, "run", "--config", base / "cfg.yaml", "--out", base / "run", "--format", "json"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    t1 = time.perf_counter()
    stages = ",".join(str(8 * s) for s in range(4))  # rank 0 of each stage's first tp group
    out = subprocess.run(
        [
            *(ATBPROF, "export", base / "run", "--to", "ascend-pt", "--out", base / "export"),
            *("--kernel-ranks", stages, "--format", "json"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    t2 = time.perf_counter()
    root = Path(json.loads(out.stdout)["root"]).resolve()  # as printed: relative to this directory
    shutil.rmtree(base / "run")  # the run is not needed once exported (a 1,024-rank one is ~360 MB)
    done.write_text(json.dumps({"root": str(root.relative_to(base))}))
    print(f"  built {ranks} ranks: run {t1 - t0:.1f} s, export {t2 - t1:.1f} s", flush=True)
    return root


def timed(cmd: list[str | Path], cwd: Path | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one command in a fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{cmd[0]} exited {proc.returncode}:\n{err.decode(errors='replace')[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def median_of(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(w for w, _ in runs), max(r for _, r in runs)


QWEN3_CLUSTER = ROOT.parent / "shared" / "anchors" / "ascend_samples" / "msinsight_qwen3_0.6b_level2_cluster"


def real_cluster() -> Path:
    """The 4-rank Qwen3 cluster anchor, copied (msprof-analyze writes its output inside the directory it reads)."""
    copy = CACHE / "qwen3-4-ranks"
    if not copy.is_dir():
        shutil.copytree(QWEN3_CLUSTER, copy)
    return copy


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="4,32,128", help="cluster sizes: 4 (the real Qwen3 cluster) and multiples of 32")
    ap.add_argument("--repeat", type=int, default=3, help="alternating pairs per size (1 for clusters over 128 ranks)")
    ap.add_argument("--peer-max", type=int, default=128, help="largest cluster msprof-analyze is timed on")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    sizes = [int(s) for s in args.ranks.split(",")]
    msprof = peer()
    results = []
    print(
        f"{'ranks':>6} {'atbprof s':>10} {'RSS MB':>7} {'--workers 2 s':>14} {'RSS MB':>7} {'msprof-analyze s':>17}"
        f" {'RSS MB':>7} {'speed-up':>9}  load before / after"
    )
    for n in sizes:
        root = real_cluster() if n == 4 else cluster(n)
        repeat = args.repeat if n <= 128 else 1
        ours: list[tuple[float, float]] = []
        pooled: list[tuple[float, float]] = []
        theirs: list[tuple[float, float]] = []
        before = load()
        defaults: list[tuple[float, float]] = []
        for _ in range(repeat):  # A/B/C in turn: a drift of the machine's speed hits every side alike
            if n >= 1024:  # one run each: the default workers (a pool from 256 ranks) is the figure
                defaults.append(timed([ATBPROF, "analyze", root, "--format", "json"]))
            ours.append(timed([ATBPROF, "analyze", root, "--format", "json", "--workers", "0"]))
            pooled.append(timed([ATBPROF, "analyze", root, "--format", "json", "--workers", "2"]))
            if msprof and n <= args.peer_max:
                shutil.rmtree(root / "cluster_analysis_output", ignore_errors=True)
                theirs.append(timed([msprof, "cluster", "-d", root, "-m", "all"], cwd=root.parent))
        shutil.rmtree(root / "cluster_analysis_output", ignore_errors=True)
        row: dict[str, object] = {
            "ranks": n,
            "cluster": "Qwen3-0.6B, 4 real ranks" if n == 4 else f"{n} simulated ranks",
            "atbprof": median_of(ours),
            "atbprof_workers_2": median_of(pooled),
            "load": [before, load()],
        }
        if defaults:
            row["atbprof_default"] = median_of(defaults)
        if theirs:
            row["msprof_analyze"] = median_of(theirs)
            row["speed_up"] = median_of(theirs)[0] / min(median_of(ours)[0], median_of(pooled)[0])
        results.append(row)
        peer_cells = (
            f"{median_of(theirs)[0]:>17.2f} {median_of(theirs)[1]:>7.0f} {row['speed_up']:>8.1f}x"
            if theirs
            else f"{'-':>17} {'-':>7} {'-':>9}"
        )
        print(
            f"{n:>6} {median_of(ours)[0]:>10.2f} {median_of(ours)[1]:>7.0f} {median_of(pooled)[0]:>14.2f}"
            f" {median_of(pooled)[1]:>7.0f} {peer_cells}  {before} / {load()}",
            flush=True,
        )
    if args.json:
        # the rows of sizes not run this time are kept from the file (1,024 ranks take minutes to build and time)
        kept = json.loads(args.json.read_text())["rows"] if args.json.is_file() else []
        rows = sorted([r for r in kept if r["ranks"] not in sizes] + results, key=lambda r: r["ranks"])
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"bench": "cluster", "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
