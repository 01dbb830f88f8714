"""The figures of a sweep's point: sweep.parquet's columns after the swept keys (a run summary's, under their
run.json names), and which a compared gain may use."""

from __future__ import annotations

import pyarrow as pa

FIGURES: list[tuple[str, pa.DataType, str]] = [
    ("ttft_ms", pa.float64(), "time to first token (prefill), ms"),
    ("decode_ms_per_token", pa.float64(), "mean decode step wall time, ms"),
    ("tokens_per_s", pa.float64(), "decode throughput of the batch"),
    ("norm_ms_per_token", pa.float64(), "norm-related time per token (kernels + their launches), ms"),
    ("norm_kernel_ms_per_token", pa.float64(), "norm kernels per token, ms"),
    ("norm_launch_ms_per_token", pa.float64(), "norm launches per token, ms"),
    ("device_busy_fraction", pa.float64(), "device busy / wall time"),
    ("host_bound_fraction", pa.float64(), "share of the decode step the device waits for the host"),
    ("hbm_floor_ms_per_token", pa.float64(), "weights + KV cache / HBM bandwidth, ms"),
    ("prefill_mfu", pa.float64(), "the prefill's FLOPs / (TTFT x the device's peak)"),
    ("communication_ms_per_token", pa.float64(), "rank 0's collectives per decode step, ms"),
    ("communication_share", pa.float64(), "of rank 0's decode step"),
    ("ops_total", pa.int64(), "kernels in the run (every rank)"),
    ("ops_per_decode_step", pa.int64(), "kernels per decode step (rank 0)"),
    ("decode_steps", pa.int64(), "decode steps simulated"),
    ("devices", pa.int64(), "devices of the deployment (tp x pp x dp)"),
    ("breakdown_ms_per_token.attention", pa.float64(), "seed 000's rows: attention with its norm, ms/token"),
    ("breakdown_ms_per_token.ffn", pa.float64(), "FFN with its norm, ms/token"),
    ("breakdown_ms_per_token.other", pa.float64(), "everything else, ms/token"),
    ("ttft_breakdown_ms.attention", pa.float64(), "prefill attention, ms"),
    ("ttft_breakdown_ms.ffn", pa.float64(), "prefill FFN, ms"),
    ("ttft_breakdown_ms.other", pa.float64(), "prefill other, ms"),
    ("bound_ms_per_token.compute", pa.float64(), "decode time in compute-bound kernels, ms/token"),
    ("bound_ms_per_token.memory", pa.float64(), "in memory-bound kernels, ms/token"),
    ("bound_ms_per_token.launch", pa.float64(), "in launch-bound kernels, ms/token"),
    ("bound_ms_per_token.communication", pa.float64(), "in collectives, ms/token"),
    ("memory.weights_gb", pa.float64(), "per device, GB"),
    ("memory.kv_cache_gb", pa.float64(), "at the largest context reached, GB"),
    ("memory.activations_gb", pa.float64(), "peak activations, GB"),
    ("memory.workspace_gb", pa.float64(), "kernel workspace, GB"),
    ("memory.communication_gb", pa.float64(), "HCCL buffers, GB"),
    ("memory.total_gb", pa.float64(), "GB"),
    ("memory.capacity_gb", pa.float64(), "the device's HBM, GB"),
    ("memory.max_batch_that_fits", pa.int64(), "at this context"),
    ("memory.max_context_that_fits", pa.int64(), "at this batch"),
    ("memory.devices_needed", pa.int64(), "devices the weights and KV cache need"),
    ("near_misses", pa.int64(), "fusion rules that almost fired (count)"),
    ("fusion_disabled", pa.list_(pa.string()), "rules switched off for this point, 'rule: why'"),
]
"""The figures of a point, in column order (after point, the swept keys, fits and error)."""

SERVING_FIGURES: list[tuple[str, pa.DataType, str]] = [
    *(
        (f"serving.{m}.{st}", pa.float64(), f"{label}, {st} over the requests, ms")
        for m, label in (
            ("ttft_ms", "time to first token"),
            ("tpot_ms", "time per output token"),
            ("e2e_ms", "end to end"),
        )
        for st in ("mean", "p50", "p90", "p99")
    ),
    ("serving.requests_per_s", pa.float64(), "requests served per second"),
    ("serving.output_tokens_per_s", pa.float64(), "output tokens per second"),
    ("serving.goodput.requests_per_s", pa.float64(), "requests per second meeting every SLO"),
    ("serving.goodput.share", pa.float64(), "share of the requests meeting every SLO"),
    ("serving.goodput.slo_ttft_ms", pa.float64(), "the point's TTFT target, ms"),
    ("serving.goodput.slo_tpot_ms", pa.float64(), "the point's TPOT target, ms"),
    ("serving.decode_batch_mean", pa.float64(), "decode sequences per iteration (mean)"),
    ("serving.kv_utilisation_peak", pa.float64(), "KV blocks in use at the peak, share"),
    ("serving.preemptions", pa.int64(), "sequences preempted (KV cache full)"),
]
"""A serving workload's figures (summary.serving): columns of sweep.parquet when a point serves requests."""

NUMERIC_FIGURES = tuple(name for name, typ, _ in (*FIGURES, *SERVING_FIGURES) if typ in (pa.float64(), pa.int64()))
"""The figures a compare may take (lower is better)."""
