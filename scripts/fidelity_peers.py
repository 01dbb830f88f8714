#!/usr/bin/env python3
"""Run inside the peers' own venv (scripts/bench_fidelity.py --peers makes it): GenZ (genz-llm) and llm-analysis
on a grid of models / batches / contexts for one device, as JSON on stdout. Reads the grid as JSON on stdin:
{"device": {"tflops", "hbm_gbps", "memory_gb", "link_gbps"}, "models": {name: hf config.json dict},
 "points": [{"model", "batch", "prompt", "decode"}]}. No atbprof import: this is the peers' side only.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys

GENZ_NAMES = {"llama2-7b": "meta-llama/Llama-2-7B", "llama2-13b": "meta-llama/Llama-2-13B",
              "llama3-8b": "meta-llama/meta-llama-3.1-8b"}  # fmt: skip


def main() -> None:
    grid = json.load(sys.stdin)
    dev = grid["device"]
    logging.disable(logging.WARNING)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from GenZ import decode_moddeling, prefill_moddeling
        from llm_analysis import config as la_config
        from llm_analysis.analysis import infer

        if not la_config.gpu_configs:
            la_config.populate_model_and_gpu_configs()
    la_config.gpu_configs["npu"] = la_config.GPUConfig(
        name="npu",
        mem_per_GPU_in_GB=dev["memory_gb"],
        hbm_bandwidth_in_GB_per_sec=dev["hbm_gbps"],
        intra_node_bandwidth_in_GB_per_sec=dev["link_gbps"],
        intra_node_min_message_latency=8e-6,
        peak_fp16_TFLOPS=dev["tflops"],
    )
    for name, hf in grid["models"].items():
        la_config.model_configs[name] = la_config.ModelConfig(
            name=name,
            num_layers=hf["num_hidden_layers"],
            n_head=hf["num_attention_heads"],
            hidden_dim=hf["hidden_size"],
            vocab_size=hf["vocab_size"],
            num_key_value_heads=hf.get("num_key_value_heads", hf["num_attention_heads"]),
            # a gated FFN's 3 matrices as llm-analysis' 2, rounded to a multiple of hidden as it requires (as its
            # own Llama-2-7B config: 16384); LLaMA-3-8B loses 5 % of its FFN weights to the rounding
            ffn_embed_dim=max(1, round(hf["intermediate_size"] * 1.5 / hf["hidden_size"])) * hf["hidden_size"],
            model_type="llama",
        )
    system = {"Flops": dev["tflops"], "Memory_size": dev["memory_gb"], "Memory_BW": dev["hbm_gbps"],
              "ICN": dev["link_gbps"], "real_values": True}  # fmt: skip
    out = []
    for p in grid["points"]:
        row = dict(p)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                d = decode_moddeling(model=GENZ_NAMES[p["model"]], batch_size=p["batch"], input_tokens=p["prompt"],
                                     output_tokens=p["decode"], system_name=system, bits="bf16")  # fmt: skip
                f = prefill_moddeling(model=GENZ_NAMES[p["model"]], batch_size=p["batch"], input_tokens=p["prompt"],
                                      system_name=system, bits="bf16")  # fmt: skip
                row["genz_decode_ms"], row["genz_ttft_ms"] = float(d["Latency"]), float(f["Latency"])
            except Exception as err:  # a point a peer cannot model is a row saying so
                row["genz_error"] = str(err)[:200]
            try:
                r = infer(model_name=p["model"], gpu_name="npu", dtype_name="w16a16e16", batch_size_per_gpu=p["batch"],
                          seq_len=p["prompt"], num_tokens_to_generate=p["decode"], log_level="ERROR")  # fmt: skip
                row["llm_analysis_decode_ms"] = r["decode_latency"] * 1e3
                row["llm_analysis_ttft_ms"] = r["prefill_latency"] * 1e3
            except Exception as err:
                row["llm_analysis_error"] = str(err)[:200]
        out.append(row)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
