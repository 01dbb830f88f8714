#!/usr/bin/env python3
"""`atbprof analyze` of runs from 10 k to 20 M ops, and `atbprof diff` of two runs from 10 k to 21 M ops each:
wall time, time per op and peak memory, each in a fresh process.

    python scripts/bench_scale.py                  # 10k, 100k, 1M, 4.1M ops, the 20.5M-op TP8 run, 21M ops
    python scripts/bench_scale.py --only 4m,20m    # a few sizes (--diff-only likewise for the diffs; "" for none)

The single-device runs are LLaMA-2-7B on 910B2, eager, `fusion none` (the most ops per token), prompt 128, with the
decode tokens that give the size; the 20.5 M-op run is LLaMA-2-70B TP8 graph mode, 3,150 decode tokens (every
rank's ops in one ops.parquet: `analyze` reads it as a cluster of 8 ranks); the 21.1 M-op run is one device again
(LLaMA-3-8B, `fusion none`, 12,300 decode tokens over a context stretched twice). Runs are made once and cached under
.bench-cache/ (no trace). Each size is analysed --repeat times (`--format json`, output discarded); medians of the
wall time, the largest peak RSS (the process's own from wait4, or its process tree's - pool workers included -
sampled every 0.1 s, whichever is larger), and the load average before and after are printed. A diff compares a
single-device size with its twin: the same config with kernel and host jitter and another seed (the same ops,
other times), made once and cached beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".bench-cache" / "scale"
ATBPROF = Path(sys.executable).parent / "atbprof"
FIXTURES = ROOT / "fixtures"

SIZES = {  # name -> (config, overrides)
    "10k": ("llama2-7b-910b2.yaml", ["fusion.strategy=none", "workload.prompt_len=128", "workload.decode_tokens=5"]),
    "100k": ("llama2-7b-910b2.yaml", ["fusion.strategy=none", "workload.prompt_len=128", "workload.decode_tokens=60"]),
    "1m": ("llama2-7b-910b2.yaml", ["fusion.strategy=none", "workload.prompt_len=128", "workload.decode_tokens=605"]),
    "4m": ("llama2-7b-910b2.yaml", ["fusion.strategy=none", "workload.prompt_len=128", "workload.decode_tokens=2480"]),
    "20m": ("llama2-70b-910b2-tp8.yaml", ["workload.prompt_len=128", "workload.decode_tokens=3150"]),
    # one device, as many ops: LLaMA-3-8B (LLaMA-2's context is 4,096 tokens) with its context stretched twice
    "21m": (
        "llama3-8b-910b2.yaml",
        [
            "fusion.strategy=none",
            "workload.prompt_len=128",
            "workload.decode_tokens=12300",
            "model.rope_scaling_factor=2",
        ],
    ),
}
BIG = ("20m", "21m")
"""Sizes analysed once per bench (a run takes ~20 s)."""

DIFF_SIZES = ("10k", "4m", "21m")
TWIN = ["execution.jitter.kernel_cv=0.05", "execution.jitter.host_cv=0.1", "seed=1"]
"""What a size's twin adds to its config: jitter and another seed."""


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def make_run(name: str) -> Path:
    """The run of a size (`NAME-twin`: its twin), made once."""
    size, twin = name.removesuffix("-twin"), name.endswith("-twin")
    config, overrides = SIZES[size]
    overrides = [*overrides, *TWIN] if twin else overrides
    out = CACHE / name
    if not (out / "run.json").exists():
        sets = [a for o in [*overrides, "output.trace=false"] for a in ("--set", o)]
        subprocess.run(
            [ATBPROF, "run", "--config", FIXTURES / config, *sets, "--out", out, "--force", "--format", "json"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return out


def ops_of(run: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.read_metadata(run / "ops.parquet").num_rows)


def _tree_rss_mb(root: int) -> float:
    """Resident memory of `root` and every process below it (pool workers are children of a forkserver), MB."""
    parent: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            parent[int(entry)], rss[int(entry)] = int(fields[1]), int(fields[21])
        except (OSError, IndexError, ValueError):
            continue
    tree, frontier = {root}, [root]
    while frontier:
        frontier = [p for p, pp in parent.items() if pp in frontier and p not in tree]
        tree.update(frontier)
    return sum(rss.get(p, 0) for p in tree) * os.sysconf("SC_PAGE_SIZE") / 2**20


def timed(cmd: list[str | Path]) -> tuple[float, float]:
    """(wall seconds, peak RSS MB of the process and its workers together) of one command in a fresh process."""
    import threading

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    peak = [0.0]
    done = threading.Event()

    def sample() -> None:  # the sum over the tree every 0.1 s (wait4 sees the main process alone)
        while not done.wait(0.1):
            peak[0] = max(peak[0], _tree_rss_mb(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    sampler.join()
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{cmd} failed:\n{err.decode(errors='replace')[-2000:]}")
    return wall, max(usage.ru_maxrss / 1024, peak[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help=f"comma-separated sizes of {', '.join(SIZES)} to analyse")
    ap.add_argument("--diff-only", help=f"comma-separated sizes of {', '.join(DIFF_SIZES)} to diff with their twins")
    ap.add_argument("--repeat", type=int, default=3, help="runs per size (1 for 20m)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    names = args.only.split(",") if args.only is not None else list(SIZES)
    names = [n for n in names if n]
    diffs = args.diff_only.split(",") if args.diff_only is not None else list(DIFF_SIZES)
    diffs = [n for n in diffs if n]
    rows = []
    print(f"{'size':>5} {'ops':>11} {'wall s':>7} {'us/op':>6} {'peak MB':>8} {'bytes/op':>8}  load before / after")
    for name in names:
        run = make_run(name)
        ops = ops_of(run)
        before = load()
        runs = [timed([ATBPROF, "analyze", run, "--format", "json"]) for _ in range(1 if name in BIG else args.repeat)]
        rows.append(_row(name, ops, runs, before))
    diff_rows = []
    if diffs:
        print("diff of a size and its twin (ops: both inputs')")
    for name in diffs:
        base, twin = make_run(name), make_run(f"{name}-twin")
        ops = ops_of(base) + ops_of(twin)
        before = load()
        cmd: list[str | Path] = [ATBPROF, "diff", base, twin, "--format", "json"]
        runs = [timed(cmd) for _ in range(1 if name in BIG else args.repeat)]
        diff_rows.append(_row(name, ops, runs, before))
    if args.json:
        # the rows of sizes not run this time are kept from the file (the 20 M-op run takes minutes to make)
        doc = json.loads(args.json.read_text()) if args.json.is_file() else {}
        out = {"bench": "scale"}
        for key, new, ran in (("rows", rows, names), ("diff_rows", diff_rows, diffs)):
            kept = [r for r in doc.get(key, []) if r["size"] not in ran]
            out[key] = sorted(kept + new, key=lambda r: r["ops"])  # type: ignore[assignment]
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")


def _row(name: str, ops: int, runs: list[tuple[float, float]], before: str) -> dict[str, object]:
    wall, rss = statistics.median(w for w, _ in runs), max(r for _, r in runs)
    row: dict[str, object] = {"size": name, "ops": ops, "wall_s": wall, "us_per_op": wall / ops * 1e6, "peak_mb": rss}
    row["load"] = [before, load()]
    print(
        f"{name:>5} {ops:>11,} {wall:>7.2f} {wall / ops * 1e6:>6.2f} {rss:>8.0f} {rss * 2**20 / ops:>8.0f}"
        f"  {before} / {load()}",
        flush=True,
    )
    return row


if __name__ == "__main__":
    main()
