#!/usr/bin/env python3
"""Why seed 002's "1205 vs 3840 tokens/s at batch 1 on Ascend 910" can not be decode, and what it can be.

    python scripts/seed002_throughput.py

Decode at batch 1 streams every weight once per token, so tokens/s <= HBM bandwidth / weight bytes.
Prefill processes the whole prompt in one step, so prompt tokens / TTFT can be far higher.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from atbprof.config import load_config  # noqa: E402
from atbprof.config.models import ModelSection  # noqa: E402
from atbprof.device.spec import load_device  # noqa: E402
from atbprof.graph.dims import resolve_model  # noqa: E402
from atbprof.run import summarize  # noqa: E402

CLAIM = {"naive HF (eager, no fusion)": 1205.0, "ATB fused": 3840.0}


def main() -> None:
    dims = resolve_model(ModelSection(preset="llama2-7b"))
    weights = dims.weight_bytes()
    print(f"LLaMA-2-7B fp16 reads {weights / 1e9:.2f} GB of weights per decode step (batch 1).")
    for name in ("910A", "910B2"):
        dev = load_device(name)
        print(
            f"  {name}: HBM {dev.hbm.bandwidth_gbps / 1e3:.1f} TB/s -> at most {dev.hbm_bytes_per_s / weights:6.1f} "
            "decode tokens/s at 100 % of nominal bandwidth"
        )
    for tps in CLAIM.values():
        print(
            f"  {tps:.0f} tokens/s as batch-1 decode would need {tps * weights / 1e12:5.1f} TB/s of weight streaming"
            f" ({tps * weights / 1.2e12:4.1f}x the 910A's HBM)"
        )
    print()
    print("As prefill throughput (prompt tokens / TTFT), simulated on 910A, prompt 512:")
    base = ROOT / "fixtures" / "seed000-baseline.yaml"
    runs = {
        "naive HF (eager, no fusion)": ["fusion=none"],
        "ATB fused (graph, default fusion)": ["fusion=default", "execution.mode=graph"],
    }
    sims = {}
    for label, ov in runs.items():
        s = summarize(load_config(base, ["workload.decode_tokens=2", *ov]))
        sims[label] = 512 / (s.ttft_ms / 1e3)
        flops = 2 * 6.74e9 * 512 / (s.ttft_ms / 1e3)
        print(
            f"  {label:36s} TTFT {s.ttft_ms:7.2f} ms -> {sims[label]:7.0f} prompt tokens/s "
            f"({flops / 1e12:5.1f} effective TFLOPS; decode {s.tokens_per_s:5.1f} tokens/s)"
        )
    ratio = sims["ATB fused (graph, default fusion)"] / sims["naive HF (eager, no fusion)"]
    print(f"  simulated prefill ratio {ratio:.2f}x; seed 002 quotes 3840 / 1205 = {3840 / 1205:.2f}x")
    print()
    print("Verdict: 1205 and 3840 tokens/s are impossible as batch-1 decode on one 910 (the ceiling is ~91 tokens/s")
    print("on 910A, ~121 on 910B). They are plausible only as prefill throughput (or as aggregate throughput at")
    print("large batch / across cards); the label 'batch 1' must then say 'prefill tokens/s'.")


if __name__ == "__main__":
    main()
