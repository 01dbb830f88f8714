"""sweep.parquet: one row per point, its swept values as columns named as their keys, then whether it fit, its
error, and every figure of the run summary under its run.json name (nested ones dotted: `memory.total_gb`,
`breakdown_ms_per_token.attention`, `fusion_fired.add_norm`).

The schema is fixed but for two families: a column per swept key (its type from its values: int64, float64,
bool, else string; a key some points leave unset is null there) and `fusion_fired.<rule>` per rule that fired in
some point. Column order and row order (point index) are fixed, so the same sweep gives the same bytes.
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa

from atbprof.sweep.spec import SweepSpec

SWEEP_SCHEMA_VERSION = "1"

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

_KINDS = {bool: pa.bool_(), int: pa.int64(), float: pa.float64()}


def _key_type(values: list[Any]) -> pa.DataType:
    kinds = {type(v) for v in values if v is not None}
    if kinds == {bool}:
        return pa.bool_()
    if kinds <= {int}:
        return pa.int64()
    if kinds <= {int, float} and bool not in kinds:
        return pa.float64()
    return pa.string()


def _key_value(value: Any, typ: pa.DataType) -> Any:
    if value is None or typ != pa.string():
        return value
    return value if isinstance(value, str) else orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _dig(doc: dict[str, Any] | None, dotted: str) -> Any:
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _figure(outcome: dict[str, Any], name: str) -> Any:
    summary = outcome.get("summary")
    if name.startswith("memory."):
        return _dig(outcome.get("memory"), name.removeprefix("memory."))
    if summary is None:
        return None
    if name == "devices":
        par = summary.get("parallel") or {}
        return int(par.get("tp", 1)) * int(par.get("pp", 1)) * int(par.get("dp", 1)) if par else 1
    if name == "near_misses":
        return len(summary.get("near_misses") or [])
    if name == "fusion_disabled":
        return [f"{k}: {v}" for k, v in sorted((summary.get("fusion_disabled") or {}).items())]
    return _dig(summary, name)


def _fired(outcome: dict[str, Any]) -> dict[str, int] | None:
    """Per rule, how often it fired over the phases' graphs (summary.fusion_fired is phase -> rule -> count)."""
    summary = outcome.get("summary")
    if summary is None:
        return None
    out: dict[str, int] = {}
    for per_rule in (summary.get("fusion_fired") or {}).values():
        for rule, n in per_rule.items():
            out[rule] = out.get(rule, 0) + int(n)
    return out


def sweep_table(spec: SweepSpec, outcomes: list[dict[str, Any]]) -> pa.Table:
    """The sweep.parquet table of `outcomes` (one per point, in point order)."""
    cols: dict[str, pa.Array] = {"point": pa.array([o["point"] for o in outcomes], pa.int32())}
    fields = [pa.field("point", pa.int32(), nullable=False, metadata={"doc": "the point's index"})]
    for key in spec.swept_keys():
        values = [spec.points[o["point"]].get(key) for o in outcomes]
        typ = _key_type(values)
        cols[key] = pa.array([_key_value(v, typ) for v in values], typ)
        fields.append(pa.field(key, typ, metadata={"doc": "swept config key"}))
    fits = []
    for o in outcomes:
        mem = o.get("memory")
        fits.append(bool(mem["fits"]) if isinstance(mem, dict) and "fits" in mem else None)
    cols["fits"] = pa.array(fits, pa.bool_())
    fields.append(pa.field("fits", pa.bool_(), metadata={"doc": "fits the device's HBM (null: not known)"}))
    cols["error"] = pa.array([o.get("error") for o in outcomes], pa.string())
    fields.append(pa.field("error", pa.string(), metadata={"doc": "why the point has no figures (null: ran)"}))
    for name, typ, doc in FIGURES:
        raw = [_figure(o, name) for o in outcomes]
        cols[name] = pa.array([None if v is None else (int(v) if typ == pa.int64() else v) for v in raw], typ)
        fields.append(pa.field(name, typ, metadata={"doc": doc}))
    fired = [_fired(o) for o in outcomes]
    for rule in sorted({r for f in fired if f for r in f}):
        cols[f"fusion_fired.{rule}"] = pa.array([None if f is None else f.get(rule, 0) for f in fired], pa.int64())
        doc = "times the rule fired in the run (prefill and decode steps' graphs)"
        fields.append(pa.field(f"fusion_fired.{rule}", pa.int64(), metadata={"doc": doc}))
    meta = {"atbprof.table": "sweep", "atbprof.schema_version": SWEEP_SCHEMA_VERSION}
    schema = pa.schema(fields, metadata=meta)
    return pa.table([cols[f.name] for f in schema], schema=schema)
