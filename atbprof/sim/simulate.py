"""The run pipeline: config -> model graph -> fusion passes -> device model -> op table batches.

Decode steps repeat the same fused graph; only the KV length changes. Costs are evaluated once per unique kernel
signature for a chunk of steps, then expanded to rows with array operations, so a run streams millions of ops
without one Python object per op.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from atbprof.config.models import RunConfig
from atbprof.device.kernels import BOUND_NAMES, TASK_TYPES, KernelCosts, evaluate_costs, signatures
from atbprof.device.spec import DeviceSpec, load_device
from atbprof.errors import ConfigError
from atbprof.fusion import FusionContext, FusionResult, apply_fusion, load_rules
from atbprof.fusion.rules import Rule
from atbprof.graph.builder import build_graph
from atbprof.graph.dims import ModelDims, resolve_model
from atbprof.graph.expr import basis_values
from atbprof.graph.nodes import Graph
from atbprof.optable.schema import OPS_SCHEMA, PIPES, STEPS_SCHEMA
from atbprof.sim.memory import MemoryEstimate, does_not_fit, estimate_memory
from atbprof.sim.shapes import ShapeColumns
from atbprof.sim.steps import StepPlan, plan_steps
from atbprof.sim.timeline import HostModel, simulate_step

# The calibrated host parameters (scripts/calibrate.py fits them to seed 000's table; README lists them)
EAGER_DISPATCH_US = 45.0  # torch_npu eager: host cost per kernel launch (aten -> aclnn tiling -> launch)
EAGER_STEP_OVERHEAD_US = 1300.0  # eager generate loop per token (Python, logits processing, KV bookkeeping)
GRAPH_STEP_OVERHEAD_US = 300.0  # captured graph: input preparation only
PHASES = ("prefill", "decode")


@dataclass
class PhaseModel:
    phase: str
    graph: Graph
    fusion: FusionResult
    sig: np.ndarray
    reps: list
    shapes: ShapeColumns
    layer: np.ndarray
    role: np.ndarray
    name: np.ndarray
    op_type: np.ndarray
    stream: np.ndarray
    fused_from: pa.Array


@dataclass
class TimedChunk:
    """A chunk of steps after the device model and the timeline (int ns arrays are steps x nodes)."""

    plan: StepPlan
    chunk: StepPlan
    pm: PhaseModel
    values: np.ndarray
    costs: KernelCosts
    dur_f: np.ndarray
    dur: np.ndarray
    disp: np.ndarray | None
    start: np.ndarray
    wait: np.ndarray
    lstart: np.ndarray | None
    op_index: int


@dataclass
class Dictionaries:
    """Run-wide dictionaries so every batch encodes roles/names/types identically."""

    roles: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)

    def index(self, values: list[str], table: list[str]) -> np.ndarray:
        pos = {v: i for i, v in enumerate(table)}
        return np.array([pos[v] for v in values], dtype=np.int32)


def _host_model(cfg: RunConfig) -> HostModel:
    ex = cfg.execution
    dispatch = (
        ex.host_dispatch_us if ex.host_dispatch_us is not None else (EAGER_DISPATCH_US if ex.mode == "eager" else 0.0)
    )
    return HostModel(
        mode=ex.mode,
        dispatch_ns=round(dispatch * 1e3),
        graph_launch_ns=round(ex.graph_launch_us * 1e3),
        device_gap_ns=round(ex.device_gap_us * 1e3),
        latency_ns=round(ex.launch_latency_us * 1e3),
        queue_depth=ex.queue_depth,
        step_overhead_ns=round(
            (
                ex.step_overhead_us
                if ex.step_overhead_us is not None
                else EAGER_STEP_OVERHEAD_US
                if ex.mode == "eager"
                else GRAPH_STEP_OVERHEAD_US
            )
            * 1e3
        ),
        sync_ns=round(ex.sync_us * 1e3),
    )


INT64_SAFE = float(2**62)
"""Kernel figures (ns, FLOPs, bytes) must stay below this to be summed and stored as int64."""


def _check_representable(costs: KernelCosts, phase: str, cfg: RunConfig) -> None:
    """Refuse a workload whose kernels do more work than the op table's int64 columns can hold."""
    for name, values in (("duration", costs.dur), ("FLOPs", costs.flops), ("HBM bytes", costs.hbm_read)):
        top = float(np.max(values)) if values.size else 0.0
        if not np.isfinite(top) or top >= INT64_SAFE:
            w = cfg.workload
            raise ConfigError(
                f"workload: the largest {phase} kernel of batch_size {w.batch_size} x prompt_len {w.prompt_len} "
                f"has {top:.3g} {name}, beyond what the op table can hold (int64): reduce the batch, the prompt or "
                "the model size"
            )


class Simulation:
    """Everything resolved from a config; `batches()` streams the op table."""

    def __init__(self, cfg: RunConfig, batch_rows: int = 1 << 17) -> None:
        self.cfg = cfg
        self.dims: ModelDims = resolve_model(cfg.model)
        self.device: DeviceSpec = load_device(cfg.device.preset, cfg.device.spec)
        if cfg.model.dtype == "bf16" and not self.device.supports_bf16:
            raise ConfigError(
                f"model.dtype = 'bf16': device {self.device.name} ({self.device.soc_version}) has no bf16 cube "
                "support; use dtype fp16 or a 910B device"
            )
        rules = load_rules(cfg.fusion.rules_file)
        self.rules: list[Rule] = rules.resolve(cfg.fusion.strategy, cfg.fusion.enable, cfg.fusion.disable)
        self.host = _host_model(cfg)
        wf = cfg.execution.weight_format or ("nd" if cfg.execution.mode == "eager" else "nz")
        self.weights_nz = wf == "nz"
        self.batch_rows = batch_rows  # rows per streamed batch (whole steps): bounds memory
        self.plans: list[StepPlan] = plan_steps(cfg.workload.prompt_len, cfg.workload.decode_tokens)
        base = build_graph(self.dims)
        self.base_ops_per_step = len(base.nodes)
        self.phases: dict[str, PhaseModel] = {}
        fused = {}
        for plan in self.plans:
            b = cfg.workload.batch_size
            ctx = FusionContext(
                phase=plan.phase,
                soc_version=self.device.soc_version,
                tokens=int(b * plan.sq[0]),
                seq_len=int(plan.skv.max()),
                softmax_fusion_max_seq=cfg.fusion.softmax_fusion_max_seq,
                shape_buckets=cfg.fusion.shape_buckets,
                dtype=cfg.model.dtype,
            )
            fused[plan.phase] = apply_fusion(base, self.rules, ctx)
        self.dicts = Dictionaries()
        for res in fused.values():
            for n in res.graph.nodes:
                for value, table in (
                    (n.role, self.dicts.roles),
                    (n.op_name, self.dicts.names),
                    (n.op_type, self.dicts.types),
                ):
                    if value not in table:
                        table.append(value)
        for phase, res in fused.items():
            nodes = res.graph.nodes
            sig, reps = signatures(res.graph)
            self.phases[phase] = PhaseModel(
                phase=phase,
                graph=res.graph,
                fusion=res,
                sig=sig,
                reps=reps,
                shapes=ShapeColumns(nodes),
                layer=np.array([n.layer for n in nodes], dtype=np.int32),
                role=self.dicts.index([n.role for n in nodes], self.dicts.roles),
                name=self.dicts.index([n.op_name for n in nodes], self.dicts.names),
                op_type=self.dicts.index([n.op_type for n in nodes], self.dicts.types),
                stream=np.array([n.stream for n in nodes], dtype=np.int32),
                fused_from=pa.array([list(n.fused_from) for n in nodes], pa.list_(pa.string())),
            )
        self.step_rows: list[dict[str, object]] = []
        self.total_ops = sum(len(self.phases[p.phase].graph.nodes) * len(p.steps) for p in self.plans)
        cap = cfg.output.max_ops
        if self.total_ops > cap:
            per_step = len(self.phases[self.plans[-1].phase].graph.nodes)
            raise ConfigError(
                f"this run would produce {self.total_ops:,} ops ({per_step:,} per decode step x "
                f"{cfg.workload.decode_tokens + 1:,} steps), more than output.max_ops = {cap:,}: reduce "
                "workload.decode_tokens (or the model's layers), or raise output.max_ops"
            )
        w = cfg.workload
        self.memory: MemoryEstimate = estimate_memory(
            {p: pm.graph for p, pm in self.phases.items()},
            self.dims,
            self.device.cores.split,
            self.device.hbm.capacity_gb,
            2 * self.device.cores.aiv * self.device.buffers_kb.get("ub", 192) * 1024,
            w.batch_size,
            w.prompt_len,
            w.decode_tokens,
            capacity_ignored=cfg.device.ignore_capacity,
        )
        if not self.memory.fits and not cfg.device.ignore_capacity:
            raise ConfigError(does_not_fit(self.memory, self.device.name, w.batch_size, w.prompt_len + w.decode_tokens))

    # -- streaming --------------------------------------------------------------------------------------------
    def _timed_chunks(self) -> Iterator[TimedChunk]:
        """Each chunk of steps with its kernel costs and host/device timeline; records the step rows."""
        rng = np.random.default_rng(self.cfg.seed)
        jitter = self.cfg.execution.jitter
        op_index = 0
        host_start = 0
        prev_end = 0
        self.step_rows = []
        b = self.cfg.workload.batch_size
        for plan in self.plans:
            pm = self.phases[plan.phase]
            n_nodes = len(pm.graph.nodes)
            for chunk in plan.chunks(max(1, self.batch_rows // n_nodes)):
                k = len(chunk.steps)
                values = basis_values(b, chunk.sq, chunk.skv)
                with np.errstate(over="raise", invalid="raise", divide="raise"):  # garbage in: stop, not NaN out
                    costs = evaluate_costs(pm.reps, self.device, values, self.weights_nz)
                _check_representable(costs, plan.phase, self.cfg)
                # rows are step-major: row = step_offset * n_nodes + node
                cols = np.arange(k)[:, None]
                sig = pm.sig[None, :]
                dur_f = costs.dur[sig, cols]
                if jitter.kernel_cv > 0:
                    sigma = np.sqrt(np.log1p(jitter.kernel_cv**2))
                    dur_f = dur_f * np.exp(np.abs(rng.normal(0.0, sigma, dur_f.shape)))
                dur = np.maximum(np.rint(dur_f).astype(np.int64), 1)
                disp = None
                if self.host.mode == "eager":
                    disp = np.full(dur.shape, self.host.dispatch_ns, dtype=np.int64)
                    if jitter.host_cv > 0:
                        sigma = np.sqrt(np.log1p(jitter.host_cv**2))
                        disp = np.rint(disp * np.exp(np.abs(rng.normal(0.0, sigma, disp.shape)))).astype(np.int64)
                start = np.empty_like(dur)
                end = np.empty_like(dur)
                wait = np.empty_like(dur)
                lstart = np.empty_like(dur) if disp is not None else None
                for j in range(k):
                    tl = simulate_step(dur[j], None if disp is None else disp[j], self.host, host_start, prev_end)
                    start[j], end[j], wait[j] = tl.start, tl.end, tl.wait
                    if lstart is not None and tl.launch_start is not None:
                        lstart[j] = tl.launch_start
                    self.step_rows.append(
                        {
                            "step": int(chunk.steps[j]),
                            "phase": plan.phase,
                            "kv_len": int(chunk.skv[j]),
                            "tokens": int(b * chunk.sq[j]),
                            "host_start_ns": tl.host_start,
                            "host_overhead_ns": tl.host_overhead,
                            "first_op_index": op_index + j * n_nodes,
                            "op_count": n_nodes,
                            "device_start_ns": int(tl.start[0]),
                            "device_end_ns": int(tl.end[-1]),
                            "sync_end_ns": tl.sync_end,
                        }
                    )
                    host_start, prev_end = tl.sync_end, int(tl.end[-1])
                yield TimedChunk(plan, chunk, pm, values, costs, dur_f, dur, disp, start, wait, lstart, op_index)
                op_index += k * n_nodes

    def step_walls(self) -> pa.Table:
        """The steps table alone (timeline only, no op columns): what a what-if needs, several times faster."""
        for _ in self._timed_chunks():
            pass
        return self.steps_table()

    def batches(self) -> Iterator[pa.RecordBatch]:
        phase_dict = pa.array(list(PHASES), pa.string())
        bound_dict = pa.array(list(BOUND_NAMES), pa.string())
        type_dict = pa.array(list(TASK_TYPES), pa.string())
        role_dict = pa.array(self.dicts.roles, pa.string())
        name_dict = pa.array(self.dicts.names, pa.string())
        optype_dict = pa.array(self.dicts.types, pa.string())
        for tc in self._timed_chunks():
            plan, chunk, pm, values, costs = tc.plan, tc.chunk, tc.pm, tc.values, tc.costs
            dur_f, dur, disp, start, wait, lstart, op_index = (
                tc.dur_f,
                tc.dur,
                tc.disp,
                tc.start,
                tc.wait,
                tc.lstart,
                tc.op_index,
            )
            n_nodes = len(pm.graph.nodes)
            k = len(chunk.steps)
            cols = np.arange(k)[:, None]
            sig = pm.sig[None, :]
            rows = k * n_nodes
            take = (sig.repeat(k, axis=0), np.broadcast_to(cols, (k, n_nodes)))
            pipe_ns = {p: np.rint(costs.pipes[p][take]).astype(np.int64).ravel() for p in PIPES}
            dflat = dur.ravel()
            scale = dflat / np.maximum(dur_f.ravel(), 1e-9)  # jitter stretches pipes with the task
            arrays: dict[str, pa.Array] = {
                "op_index": pa.array(np.arange(op_index, op_index + rows, dtype=np.int64)),
                "step": pa.array(np.repeat(chunk.steps.astype(np.int32), n_nodes)),
                "phase": pa.DictionaryArray.from_arrays(
                    pa.array(np.full(rows, PHASES.index(plan.phase), dtype=np.int32)), phase_dict
                ),
                "layer": pa.array(np.tile(pm.layer, k)),
                "node_id": pa.array(np.tile(np.arange(n_nodes, dtype=np.int32), k)),
                "role": pa.DictionaryArray.from_arrays(pa.array(np.tile(pm.role, k)), role_dict),
                "op_name": pa.DictionaryArray.from_arrays(pa.array(np.tile(pm.name, k)), name_dict),
                "op_type": pa.DictionaryArray.from_arrays(pa.array(np.tile(pm.op_type, k)), optype_dict),
                "task_type": pa.DictionaryArray.from_arrays(
                    pa.array(np.tile(costs.task_type[pm.sig].astype(np.int32), k)), type_dict
                ),
                "stream_id": pa.array(np.tile(pm.stream, k)),
                "task_id": pa.array((np.arange(op_index, op_index + rows) % 65536).astype(np.int32)),
                "task_start_ns": pa.array(start.ravel()),
                "task_dur_ns": pa.array(dflat),
                "task_wait_ns": pa.array(wait.ravel()),
                "host_launch_start_ns": pa.array(
                    lstart.ravel() if lstart is not None else np.zeros(rows, np.int64),
                    mask=None if lstart is not None else np.ones(rows, bool),
                ),
                "host_launch_dur_ns": pa.array(
                    disp.ravel() if disp is not None else np.zeros(rows, np.int64),
                    mask=None if disp is not None else np.ones(rows, bool),
                ),
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
            }
            for p in PIPES:
                t = np.minimum(np.rint(pipe_ns[p] * scale).astype(np.int64), dflat)
                arrays[f"{p}_time_ns"] = pa.array(t)
            for p in PIPES:
                arrays[f"{p}_ratio"] = pa.array((arrays[f"{p}_time_ns"].to_numpy() / dflat).astype(np.float32))
            arrays["bound"] = pa.DictionaryArray.from_arrays(
                pa.array(costs.bound[take].astype(np.int32).ravel()), bound_dict
            )
            arrays["fused_from"] = pm.fused_from.take(pa.array(np.tile(np.arange(n_nodes), k)))
            yield pa.RecordBatch.from_arrays([arrays[f.name] for f in OPS_SCHEMA], schema=OPS_SCHEMA)

    def steps_table(self) -> pa.Table:
        return pa.Table.from_pylist(self.step_rows, schema=STEPS_SCHEMA)
