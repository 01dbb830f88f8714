"""Op-table rows of a simulated chunk: the columns every rank shares (what ran) and each rank's times (when)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from atbprof.optable.schema import PIPES
from atbprof.sim.steps import PHASES

if TYPE_CHECKING:
    from atbprof.sim.models import RankTimes, TimedChunk


SUMMARY_COLUMNS = frozenset(
    {"rank", "step", "microbatch", "role", "op_type", "bound", "task_start_ns", "task_dur_ns"}
    | {"host_launch_dur_ns", "vec_time_ns", "flops"}
)
"""What the run summary reads of the op rows (sim/summary.py): a summary-only run builds just these."""


def _take(tc: TimedChunk) -> tuple[np.ndarray, np.ndarray]:
    """Index of the chunk's (signature, step) cost arrays for its rows, laid out step-major."""
    k, n = len(tc.chunk.steps), tc.pm.n_nodes
    return tc.pm.sig[None, :].repeat(k, axis=0), np.broadcast_to(np.arange(k)[:, None], (k, n))


def _encoded(codes: np.ndarray, dictionary: pa.Array) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(codes), dictionary)


def _nullable(values: np.ndarray | None, rows: int) -> pa.Array:
    """`values` flattened, or `rows` nulls (a graph-mode run has no host launches)."""
    if values is None:
        return pa.array(np.zeros(rows, np.int64), mask=np.ones(rows, bool))
    return pa.array(values.ravel())


def _pipe_ns(tc: TimedChunk, rt: RankTimes, pipe: str, take: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """A pipe's busy time per row: jitter and a straggler's slowdown stretch it with its task (a collective's wait
    does not: it has no pipes), never beyond the task."""
    dflat = rt.dur.ravel()
    scale = dflat / np.maximum(tc.dur_f.ravel(), 1e-9)
    busy = np.rint(tc.costs.pipes[pipe][take]).astype(np.int64).ravel()
    return np.minimum(np.rint(busy * scale).astype(np.int64), dflat)


def summary_columns(tc: TimedChunk, rt: RankTimes, d: dict[str, pa.Array]) -> dict[str, pa.Array]:
    """The SUMMARY_COLUMNS of one rank class's rows of the chunk (but `rank`), each as the full rows have it."""
    pm, k = tc.pm, len(tc.chunk.steps)
    take = _take(tc)
    return {
        "step": pa.array(np.repeat(tc.chunk.steps.astype(np.int32), pm.n_nodes)),
        "microbatch": pa.array(np.tile(pm.microbatch, k)),
        "role": _encoded(np.tile(pm.role, k), d["role"]),
        "op_type": _encoded(np.tile(pm.op_type, k), d["optype"]),
        "bound": _encoded(tc.costs.bound[take].astype(np.int32).ravel(), d["bound"]),
        "task_start_ns": pa.array(rt.start.ravel()),
        "task_dur_ns": pa.array(rt.dur.ravel()),
        "host_launch_dur_ns": _nullable(tc.disp, k * pm.n_nodes),
        "vec_time_ns": pa.array(_pipe_ns(tc, rt, "vec", take)),
        "flops": pa.array(np.rint(tc.costs.flops[take]).astype(np.int64).ravel()),
    }


def shared_columns(tc: TimedChunk, d: dict[str, pa.Array]) -> dict[str, pa.Array]:
    """The columns every rank of the chunk has in common (what ran, not when)."""
    plan, chunk, pm, values, costs, op_index = tc.plan, tc.chunk, tc.pm, tc.values, tc.costs, tc.op_index
    n_nodes = pm.n_nodes
    k = len(chunk.steps)
    rows = k * n_nodes
    take = _take(tc)
    comm_bytes = np.rint(costs.comm_bytes[take]).astype(np.int64).ravel()
    comm_rows = np.tile(pm.comm, k)
    return {
        "op_index": pa.array(np.arange(op_index, op_index + rows, dtype=np.int64)),
        "step": pa.array(np.repeat(chunk.steps.astype(np.int32), n_nodes)),
        "phase": _encoded(np.full(rows, PHASES.index(plan.phase), dtype=np.int32), d["phase"]),
        "layer": pa.array(np.tile(pm.layer, k)),
        "node_id": pa.array(np.tile(pm.node_id, k)),
        "microbatch": pa.array(np.tile(pm.microbatch, k)),
        "role": _encoded(np.tile(pm.role, k), d["role"]),
        "op_name": _encoded(np.tile(pm.name, k), d["name"]),
        "op_type": _encoded(np.tile(pm.op_type, k), d["optype"]),
        "task_type": _encoded(np.tile(costs.task_type[pm.sig].astype(np.int32), k), d["type"]),
        "stream_id": pa.array(np.tile(pm.stream, k)),
        "task_id": pa.array((np.arange(op_index, op_index + rows) % 65536).astype(np.int32)),
        "block_dim": pa.array(costs.block_dim[take].astype(np.int32).ravel()),
        "mix_block_dim": pa.array(costs.mix_block_dim[take].astype(np.int32).ravel()),
        "input_shapes": pm.shapes.column("in", values, k),
        "input_dtypes": pm.shapes.dtype_column("in", k),
        "output_shapes": pm.shapes.column("out", values, k),
        "output_dtypes": pm.shapes.dtype_column("out", k),
        "kv_len": pa.array(np.repeat(chunk.skv.astype(np.int32), n_nodes)),
        "flops": pa.array(np.rint(costs.flops[take]).astype(np.int64).ravel()),
        "hbm_read_bytes": pa.array(np.rint(costs.hbm_read[take]).astype(np.int64).ravel()),
        "hbm_write_bytes": pa.array(np.rint(costs.hbm_write[take]).astype(np.int64).ravel()),
        "bound": _encoded(costs.bound[take].astype(np.int32).ravel(), d["bound"]),
        "fused_from": pm.fused_from.take(pa.array(np.tile(np.arange(n_nodes), k))),
        "comm_bytes": pa.array(comm_bytes, mask=~comm_rows),
    }


def time_columns(tc: TimedChunk, rt: RankTimes) -> dict[str, pa.Array]:
    """When one rank class ran each task: times, waits, host launches, pipe busy times."""
    rows = len(tc.chunk.steps) * tc.pm.n_nodes
    take = _take(tc)
    dflat = rt.dur.ravel()
    out: dict[str, pa.Array] = {
        "task_start_ns": pa.array(rt.start.ravel()),
        "task_dur_ns": pa.array(dflat),
        "task_wait_ns": pa.array(rt.wait.ravel()),
        "host_launch_start_ns": _nullable(rt.lstart, rows),
        "host_launch_dur_ns": _nullable(tc.disp, rows),
        "graph_launch": pa.array(np.full(rows, tc.disp is None)),  # graph mode: the whole step is one replay
    }
    for p in PIPES:
        t = _pipe_ns(tc, rt, p, take)
        out[f"{p}_time_ns"] = pa.array(t)
        out[f"{p}_ratio"] = pa.array((t / dflat).astype(np.float32))
    return out
