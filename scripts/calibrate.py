#!/usr/bin/env python3
"""Seed 000's latency table beside the simulated one, the seeds' other claims, and the fit of the free parameters.

    python scripts/calibrate.py            # table + claims (a few seconds)
    python scripts/calibrate.py --sweep    # also the sensitivity grid over the calibrated parameters

Free (calibrated) parameters, everything else is a hardware fact from the device YAML:
  execution.host_dispatch_us  eager host cost per kernel launch          (atbprof/sim/simulate.py, 45 us)
  efficiency.gemv_nd          weight streaming of eager ND-format GEMMs  (atbprof/data/devices/910A.yaml, 0.42)
  execution.step_overhead_us  eager host work per generated token        (atbprof/sim/simulate.py, 1300 us)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from atbprof.config import load_config  # noqa: E402
from atbprof.run import summarize  # noqa: E402
from atbprof.sim.summary import RunSummary  # noqa: E402

BASE = ROOT / "fixtures" / "seed000-baseline.yaml"
FUSED = ROOT / "fixtures" / "seed000-lnfused.yaml"
SEED = {"attention": (18, 15), "ffn": (20, 17), "other": (2, 2), "total": (40, 34)}


def pair(*overrides: str) -> tuple[RunSummary, RunSummary]:
    return summarize(load_config(BASE, list(overrides))), summarize(load_config(FUSED, list(overrides)))


def gain(b: RunSummary, f: RunSummary) -> float:
    return 100 * (1 - f.decode_ms_per_token / b.decode_ms_per_token)


def table() -> None:
    b, f = pair()
    print("Seed 000: LLaMA-2-7B fp16, Ascend 910 (910A), batch 1, prompt 512, 128 tokens; ms per decode token")
    heads = ("seed base", "sim base", "seed fused", "sim fused", "seed saved", "sim saved")
    print(f"{'row':28s} " + " ".join(f"{h:>10s}" for h in heads))
    for row in ("attention", "ffn", "other", "total"):
        sb = b.decode_ms_per_token if row == "total" else b.breakdown_ms_per_token[row]
        sf = f.decode_ms_per_token if row == "total" else f.breakdown_ms_per_token[row]
        label = {
            "attention": "Attention (with its norm)",
            "ffn": "FFN (with its norm)",
            "other": "other",
            "total": "per token",
        }[row]
        cells = (SEED[row][0], sb, SEED[row][1], sf, SEED[row][0] - SEED[row][1], sb - sf)
        print(f"{label:28s} " + " ".join(f"{v:10.2f}" for v in cells))
    print(f"{'gain':28s} {'15 %':>10s} {gain(b, f):8.1f} %")
    print(
        f"{'norm-related (Add & Norm)':28s} {'~6':>9s} {b.norm_ms_per_token:9.2f}  "
        f"(kernel {b.norm_kernel_ms_per_token:.2f} + launch {b.norm_launch_ms_per_token:.2f}); fused "
        f"{f.norm_ms_per_token:.2f}"
    )
    print(f"{'TTFT (prefill 512)':28s} {'-':>9s} {b.ttft_ms:9.2f} {'-':>10s} {f.ttft_ms:9.2f}")
    print(f"{'HBM floor':28s} {'~11':>9s} {b.hbm_floor_ms_per_token:9.2f}")
    print()


def claims() -> None:
    print("Other claims (16 decode steps each)")
    rows = [
        ("batch 32 (seed: gain 8-10 %)", ("workload.batch_size=32",)),
        ("context 8192 (seed: gain -> ~20 %)", ("workload.prompt_len=8192", "model.rope_scaling_factor=3")),
        ("context 2048", ("workload.prompt_len=2048",)),
    ]
    base_b, base_f = pair("workload.decode_tokens=16")
    print(
        f"  batch 1, context 512: {base_b.decode_ms_per_token:.2f} -> {base_f.decode_ms_per_token:.2f} ms, "
        f"gain {gain(base_b, base_f):.1f} %"
    )
    for label, ov in rows:
        b, f = pair("workload.decode_tokens=16", *ov)
        print(
            f"  {label:36s} {b.decode_ms_per_token:7.2f} -> {f.decode_ms_per_token:7.2f} ms, gain "
            f"{gain(b, f):5.1f} %, device busy {b.device_busy_fraction:.0%} -> {f.device_busy_fraction:.0%}"
        )
    for label, ov in (
        ("fusion none (HF eager; 910B measured 57-64 ms)", ("fusion=none",)),
        ("fusion none on 910B2", ("fusion=none", "device.preset=910B2")),
        ("fusion default, eager", ("fusion=default",)),
        ("fusion default, graph (floor ~11.3 ms)", ("fusion=default", "execution.mode=graph")),
        ("fusion aggressive, graph", ("fusion=aggressive", "execution.mode=graph")),
        (
            "fusion default, graph, 910B2 (floor ~8.4 ms)",
            ("fusion=default", "execution.mode=graph", "device.preset=910B2"),
        ),
    ):
        s = summarize(load_config(BASE, ["workload.decode_tokens=16", *ov]))
        print(
            f"  {label:50s} {s.decode_ms_per_token:7.2f} ms/token ({s.ops_per_decode_step} kernels/token, "
            f"floor {s.hbm_floor_ms_per_token:.2f})"
        )
    print()


def sweep() -> None:
    print("Sensitivity: host dispatch (us) x ND-GEMV efficiency -> base/fused ms, gain, attention/FFN rows")
    spec = yaml.safe_load((ROOT / "atbprof" / "data" / "devices" / "910A.yaml").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        for gemv in (0.38, 0.42, 0.46):
            spec["efficiency"]["gemv_nd"] = gemv
            path = Path(tmp) / f"910A-{gemv}.yaml"
            path.write_text(yaml.safe_dump(spec))
            for d in (40, 45, 50):
                b, f = pair("workload.decode_tokens=16", f"device.spec={path}", f"execution.host_dispatch_us={d}")
                err = max(abs(b.decode_ms_per_token - 40) / 40, abs(f.decode_ms_per_token - 34) / 34)
                print(
                    f"  gemv {gemv:.2f} dispatch {d:3d}: {b.decode_ms_per_token:6.2f} -> {f.decode_ms_per_token:6.2f}"
                    f" ({gain(b, f):4.1f} %), attn {b.breakdown_ms_per_token['attention']:5.2f}/"
                    f"{f.breakdown_ms_per_token['attention']:5.2f} ffn {b.breakdown_ms_per_token['ffn']:5.2f}/"
                    f"{f.breakdown_ms_per_token['ffn']:5.2f}  max total error {err:5.1%}"
                )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", action="store_true", help="also print the sensitivity grid")
    args = ap.parse_args()
    table()
    claims()
    if args.sweep:
        sweep()


if __name__ == "__main__":
    main()
