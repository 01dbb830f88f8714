"""Serving simulation (`workload.kind: serving`): a request stream through a vLLM-style scheduler with paged KV
blocks, each iteration priced by the device model; TTFT / TPOT / E2E percentiles, requests.parquet and
iterations.parquet.

    requests (stream) -> kv_cache (blocks that fit) -> pricing (iteration time) -> scheduler -> summary -> files
"""
