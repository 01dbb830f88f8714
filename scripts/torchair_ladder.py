#!/usr/bin/env python3
"""The multi-device checks (issue 14) against published measurements; imported by bench_fidelity.py.

    python scripts/torchair_ladder.py [--json]

1. TorchAir LLaMA-2-70B fp16, TP8 on an Atlas 800I A2 (8 x 910B4), input 1024, fixed KV cache of 4096 positions
   (Ascend/torchair npu_tuned_model/llm/models/llama README, M3): graph-mode decode and prefill at batch
   1/4/8/16/32/48 (targets +-15 % decode, +-25 % prefill), and the optimisation ladder at batch 4, eager and graph
   (fixed KV cache -> +FlashAttention+RoPE -> +Add&RMSNorm -> +QKV merge; each rung's saving within +-5 points).
   Eager rungs at the M7 host dispatch range ends (20, 30 us) and seed 000's 45 us.
2. Held out, the same README's LLaMA-3-70B ladder and batch sweep (fixed cache of 8192; its batch 48 ran out of
   memory on the 32 GB card).
3. Collective bandwidth on 910B (M2: 8 cards all_reduce 72 GB/s, all_gather 149; 2 cards 18 / 38).
4. tp scaling of LLaMA-2-7B / 13B decode on 910B2 (graph): latency and communication share per tp.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from atbprof.config.models import RunConfig  # noqa: E402
from atbprof.device.collectives import collective_ns, place_group  # noqa: E402
from atbprof.device.spec import load_device  # noqa: E402
from atbprof.errors import AtbprofError  # noqa: E402
from atbprof.run import summarize  # noqa: E402

RUNGS = ("torchair-fixed-kv", "torchair-fa-rope", "torchair-add-rmsnorm", "torchair-qkv")
MEASURED = {  # README tables (ms): decode per token and prefill (全量), batch 4
    "llama2-70b": {
        "eager_decode": (187, 144, 120, 120),
        "graph_decode": (83, 44, 39, 37.5),
        "batches": (1, 4, 8, 16, 32, 48),
        "batch_decode": (35.9, 37.5, 38.6, 41.2, 46.0, 48.6),
        "batch_prefill": (175, 570, 1112, 2325, 4757, 7118),
    },
    "llama3-70b": {
        "eager_decode": (191, 148, 122, 124),
        "graph_decode": (161, 46, 40, 40),
        "batches": (1, 2, 4, 8, 16, 32, 48),
        "batch_decode": (37.4, 37.9, 38.9, 40.1, 43.4, 48.2, None),  # batch 48: out of memory on the card
        "batch_prefill": (177.5, 298, 566.7, 1104.5, 2324.1, 4863.4, None),
    },
}
M2_BANDWIDTH = {(8, "AllReduce"): 72.0, (8, "AllGather"): 149.0, (2, "AllReduce"): 18.0, (2, "AllGather"): 38.0}


def _cfg(model: str, batch: int, strategy: str, mode: str, dispatch_us: float = 20.0, decode: int = 8) -> RunConfig:
    return RunConfig.model_validate(
        {
            "name": "torchair",
            "model": {"preset": model},
            "device": {"preset": "910B4"},
            "parallel": {"tp": 8},
            "workload": {"batch_size": batch, "prompt_len": 1024, "decode_tokens": decode, "kv_cache": "fixed"},
            "execution": {"mode": mode, "host_dispatch_us": dispatch_us},
            "fusion": {"strategy": strategy},
        }
    )


def _savings(values: list[float]) -> list[float]:
    return [round(100 * (values[i + 1] / values[i] - 1), 1) for i in range(len(values) - 1)]


def ladder(model: str) -> dict[str, object]:
    m = MEASURED[model]
    out: dict[str, object] = {"model": model}
    rungs: dict[str, object] = {}
    for mode, dispatches in (("graph", (20.0,)), ("eager", (20.0, 30.0, 45.0))):
        measured = list(m[f"{mode}_decode"])  # type: ignore[arg-type]
        for d in dispatches:
            got = [summarize(_cfg(model, 4, s, mode, d)).decode_ms_per_token for s in RUNGS]
            key = mode if mode == "graph" else f"eager@{d:g}us"
            ms, gs = _savings(measured), _savings(got)
            rungs[key] = {
                "decode_ms": [round(x, 2) for x in got],
                "measured_ms": measured,
                "saving_pct": gs,
                "measured_saving_pct": ms,
                "saving_error_pp": [round(a - b, 1) for a, b in zip(gs, ms, strict=True)],
            }
    out["ladder_batch4"] = rungs
    rows = []
    for b, dec, pre in zip(m["batches"], m["batch_decode"], m["batch_prefill"], strict=True):  # type: ignore[call-overload]
        try:
            s = summarize(_cfg(model, b, "torchair-mc2", "graph", decode=4))
        except AtbprofError as err:
            rows.append({"batch": b, "refused": str(err).split(": ", 1)[-1][:160], "measured_decode_ms": dec})
            continue
        rows.append(
            {
                "batch": b,
                "decode_ms": s.decode_ms_per_token,
                "measured_decode_ms": dec,
                "decode_error": None if dec is None else round(s.decode_ms_per_token / dec - 1, 4),
                "prefill_ms": s.ttft_ms,
                "measured_prefill_ms": pre,
                "prefill_error": None if pre is None else round(s.ttft_ms / pre - 1, 4),
                "communication_share": s.communication_share,
                "memory_gb": s.memory.total_gb if s.memory else None,
            }
        )
    out["batches"] = rows
    return out


def bandwidths() -> list[dict[str, object]]:
    topo = load_device("910B2").topology
    n = np.array([1 << 30])
    rows = []
    for (cards, kind), measured in M2_BANDWIDTH.items():
        got = float(n[0] / collective_ns(kind, place_group(topo, cards, "910B2"), n)[0])
        rows.append({"cards": cards, "collective": kind, "model_gbps": round(got, 1), "measured_gbps": measured})
    return rows


def tp_scaling() -> list[dict[str, object]]:
    rows = []
    for model in ("llama2-7b", "llama2-13b"):
        for tp in (1, 2, 4, 8):
            cfg = RunConfig.model_validate(
                {
                    "name": "tp",
                    "model": {"preset": model},
                    "device": {"preset": "910B2"},
                    "parallel": {"tp": tp},
                    "workload": {"batch_size": 1, "prompt_len": 512, "decode_tokens": 8},
                    "execution": {"mode": "graph"},
                }
            )
            s = summarize(cfg)
            rows.append(
                {
                    "model": model,
                    "tp": tp,
                    "decode_ms": s.decode_ms_per_token,
                    "communication_share": s.communication_share,
                    "hbm_floor_ms": s.hbm_floor_ms_per_token,
                }
            )
    return rows


def run_all() -> dict[str, object]:
    return {
        "torchair": [ladder("llama2-70b"), ladder("llama3-70b")],
        "collective_bandwidth": bandwidths(),
        "tp_scaling": tp_scaling(),
    }


def print_report(out: dict[str, object]) -> None:
    for lad in out["torchair"]:  # type: ignore[attr-defined]
        held = " (held out)" if lad["model"] == "llama3-70b" else ""
        print(f"\nTorchAir {lad['model']}{held}, TP8 on 8 x 910B4, input 1024, fixed KV cache")
        print(f"{'batch':>5s} | decode ms {'model':>7s} {'meas.':>6s} {'err':>6s} | prefill ms {'model':>7s} "
              f"{'meas.':>6s} {'err':>6s} | comm share")  # fmt: skip
        for r in lad["batches"]:
            if "refused" in r:
                print(f"{r['batch']:5d} | refused: {r['refused']}")
                continue
            de = "" if r["decode_error"] is None else f"{r['decode_error']:+.1%}"
            pe = "" if r["prefill_error"] is None else f"{r['prefill_error']:+.1%}"
            md = "-" if r["measured_decode_ms"] is None else f"{r['measured_decode_ms']:g}"
            mp = "-" if r["measured_prefill_ms"] is None else f"{r['measured_prefill_ms']:g}"
            print(f"{r['batch']:5d} | {'':9s} {r['decode_ms']:7.2f} {md:>6s} {de:>6s} | {'':10s} "
                  f"{r['prefill_ms']:7.1f} {mp:>6s} {pe:>6s} | {r['communication_share']:.1%}")  # fmt: skip
        print("ladder at batch 4 (fixed KV -> +FA+RoPE -> +Add&RMSNorm -> +QKV): decode ms, saving per rung")
        for key, v in lad["ladder_batch4"].items():
            print(f"  {key:12s} model {v['decode_ms']} measured {v['measured_ms']}; saving % model "
                  f"{v['saving_pct']} measured {v['measured_saving_pct']}; "
                  f"error pp {v['saving_error_pp']}")  # fmt: skip
    print("\ncollective bandwidth on 910B (algorithm bandwidth, 1 GiB; measured M2)")
    for r in out["collective_bandwidth"]:  # type: ignore[attr-defined]
        err = r["model_gbps"] / r["measured_gbps"] - 1
        print(f"  {r['cards']} cards {r['collective']:9s} model {r['model_gbps']:6.1f} GB/s measured "
              f"{r['measured_gbps']:6.1f} ({err:+.1%})")  # fmt: skip
    print("\ntp scaling on 910B2, graph, batch 1, prompt 512: decode ms / communication share")
    for r in out["tp_scaling"]:  # type: ignore[attr-defined]
        print(f"  {r['model']:10s} tp {r['tp']}: {r['decode_ms']:7.2f} ms, comm {r['communication_share']:.1%}, "
              f"HBM floor {r['hbm_floor_ms']:.2f} ms")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = run_all()
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print_report(out)


if __name__ == "__main__":
    main()
