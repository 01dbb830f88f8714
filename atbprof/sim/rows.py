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
    | {"host_launch_dur_ns", "vec_time_ns"}
)
"""What the run summary reads of the op rows (sim/summary.py): a summary-only run builds just these."""


def summary_columns(tc: TimedChunk, rt: RankTimes, d: dict[str, pa.Array]) -> dict[str, pa.Array]:
    """The SUMMARY_COLUMNS of one rank class's rows of the chunk (but `rank`): no shapes, no pipes but vec."""
    pm, k = tc.pm, len(tc.chunk.steps)
    rows = k * pm.n_nodes
    take = (pm.sig[None, :].repeat(k, axis=0), np.broadcast_to(np.arange(k)[:, None], (k, pm.n_nodes)))
    dflat = rt.dur.ravel()
    vec = np.rint(tc.costs.pipes["vec"][take]).astype(np.int64).ravel()
    scale = dflat / np.maximum(tc.dur_f.ravel(), 1e-9)
    return {
        "step": pa.array(np.repeat(tc.chunk.steps.astype(np.int32), pm.n_nodes)),
        "microbatch": pa.array(np.tile(pm.microbatch, k)),
        "role": pa.DictionaryArray.from_arrays(pa.array(np.tile(pm.role, k)), d["role"]),
        "op_type": pa.DictionaryArray.from_arrays(pa.array(np.tile(pm.op_type, k)), d["optype"]),
        "bound": pa.DictionaryArray.from_arrays(pa.array(tc.costs.bound[take].astype(np.int32).ravel()), d["bound"]),
        "task_start_ns": pa.array(rt.start.ravel()),
        "task_dur_ns": pa.array(dflat),
        "host_launch_dur_ns": pa.array(
            tc.disp.ravel() if tc.disp is not None else np.zeros(rows, np.int64),
            mask=None if tc.disp is not None else np.ones(rows, bool),
        ),
        "vec_time_ns": pa.array(np.minimum(np.rint(vec * scale).astype(np.int64), dflat)),
    }


def shared_columns(tc: TimedChunk, d: dict[str, pa.Array]) -> dict[str, pa.Array]:
    """The columns every rank of the chunk has in common (what ran, not when)."""
    plan, chunk, pm, values, costs, op_index = tc.plan, tc.chunk, tc.pm, tc.values, tc.costs, tc.op_index
    n_nodes = pm.n_nodes
    k = len(chunk.steps)
    rows = k * n_nodes
    cols = np.arange(k)[:, None]
    take = (pm.sig[None, :].repeat(k, axis=0), np.broadcast_to(cols, (k, n_nodes)))
    comm_bytes = np.rint(costs.comm_bytes[take]).astype(np.int64).ravel()
    comm_rows = np.tile(pm.comm, k)
    return {
        "op_index": pa.array(np.arange(op_index, op_index + rows, dtype=np.int64)),
        "step": pa.array(np.repeat(chunk.steps.astype(np.int32), n_nodes)),
        "phase": pa.DictionaryArray.from_arrays(
            pa.array(np.full(rows, PHASES.index(plan.phase), dtype=np.int32)), d["phase"]
        ),
        "layer": pa.array(np.tile(pm.layer, k)),
        "node_id": pa.array(np.tile(pm.node_id, k)),
        "microbatch": pa.array(np.tile(pm.microbatch, k)),
        "role": pa.DictionaryArray.from_arrays(pa.array(np.tile(pm.role, k)), d["role"]),
        "op_name": pa.DictionaryArray.from_arrays(pa.array(np.tile(pm.name, k)), d["name"]),
        "op_type": pa.DictionaryArray.from_arrays(pa.array(np.tile(pm.op_type, k)), d["optype"]),
        "task_type": pa.DictionaryArray.from_arrays(
            pa.array(np.tile(costs.task_type[pm.sig].astype(np.int32), k)), d["type"]
        ),
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
        "bound": pa.DictionaryArray.from_arrays(pa.array(costs.bound[take].astype(np.int32).ravel()), d["bound"]),
        "fused_from": pm.fused_from.take(pa.array(np.tile(np.arange(n_nodes), k))),
        "comm_bytes": pa.array(comm_bytes, mask=~comm_rows),
    }


def time_columns(tc: TimedChunk, rt: RankTimes) -> dict[str, pa.Array]:
    """When one rank class ran each task: times, waits, host launches, pipe busy times."""
    costs = tc.costs
    n_nodes = tc.pm.n_nodes
    k = len(tc.chunk.steps)
    rows = k * n_nodes
    take = (tc.pm.sig[None, :].repeat(k, axis=0), np.broadcast_to(np.arange(k)[:, None], (k, n_nodes)))
    dflat = rt.dur.ravel()
    # jitter and a straggler's slowdown stretch the pipes with the task (a collective's wait does not: 0 pipes)
    scale = dflat / np.maximum(tc.dur_f.ravel(), 1e-9)
    disp = tc.disp
    out: dict[str, pa.Array] = {
        "task_start_ns": pa.array(rt.start.ravel()),
        "task_dur_ns": pa.array(dflat),
        "task_wait_ns": pa.array(rt.wait.ravel()),
        "host_launch_start_ns": pa.array(
            rt.lstart.ravel() if rt.lstart is not None else np.zeros(rows, np.int64),
            mask=None if rt.lstart is not None else np.ones(rows, bool),
        ),
        "host_launch_dur_ns": pa.array(
            disp.ravel() if disp is not None else np.zeros(rows, np.int64),
            mask=None if disp is not None else np.ones(rows, bool),
        ),
    }
    for p in PIPES:
        pipe = np.rint(costs.pipes[p][take]).astype(np.int64).ravel()
        t = np.minimum(np.rint(pipe * scale).astype(np.int64), dflat)
        out[f"{p}_time_ns"] = pa.array(t)
        out[f"{p}_ratio"] = pa.array((t / dflat).astype(np.float32))
    return out
