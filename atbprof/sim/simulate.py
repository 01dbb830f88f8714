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
from atbprof.optable.schema import OPS_SCHEMA, STEPS_SCHEMA
from atbprof.parallel.collectives import COMM_STREAM, insert_collectives
from atbprof.parallel.plan import ParallelPlan, RankClass, plan_parallel
from atbprof.sim.memory import MemoryEstimate, does_not_fit, estimate_memory
from atbprof.sim.rank_split import RankSplit
from atbprof.sim.rows import shared_columns, time_columns
from atbprof.sim.shapes import ShapeColumns
from atbprof.sim.steps import PHASES, StepPlan, plan_steps
from atbprof.sim.timeline import HostModel, simulate_step

# The calibrated host parameters (scripts/calibrate.py fits them to seed 000's table; README lists them)
EAGER_DISPATCH_US = 45.0  # torch_npu eager: host cost per kernel launch (aten -> aclnn tiling -> launch)
EAGER_STEP_OVERHEAD_US = 1300.0  # eager generate loop per token (Python, logits processing, KV bookkeeping)
GRAPH_STEP_OVERHEAD_US = 300.0  # captured graph: input preparation only


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
    comm: np.ndarray  # bool per node: an HCCL task (not slowed by a straggler, launched as a collective)
    sync: np.ndarray  # bool per node: joins the tp group (an HCCL task or an MC2 kernel): ends with its slowest rank


@dataclass
class RankTimes:
    """One rank class's timeline of a chunk (int ns arrays are steps x nodes)."""

    cls: RankClass
    dur: np.ndarray  # as run: a collective that waited for the group's slowest rank lasts until it ended
    start: np.ndarray
    wait: np.ndarray
    lstart: np.ndarray | None


@dataclass
class TimedChunk:
    """A chunk of steps after the device model and the timeline of every rank class."""

    plan: StepPlan
    chunk: StepPlan
    pm: PhaseModel
    values: np.ndarray
    costs: KernelCosts
    dur_f: np.ndarray  # modelled durations (steps x nodes) before any rank's slowdown
    disp: np.ndarray | None
    ranks: list[RankTimes]
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


def _host_model(cfg: RunConfig, device: DeviceSpec) -> HostModel:
    ex = cfg.execution
    collective_launch_us = (
        ex.collective_launch_us
        if ex.collective_launch_us is not None
        else (device.topology.host_launch_us if device.topology and ex.mode == "eager" else 0.0)
    )
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
        collective_launch_ns=round(collective_launch_us * 1e3),
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


def _fixed_cache_len(cfg: RunConfig, dims: ModelDims) -> int | None:
    """Positions of a fixed KV cache (None: dynamic); it must hold every token of the run."""
    w = cfg.workload
    if w.kv_cache == "dynamic":
        if w.kv_cache_len is not None:
            raise ConfigError("workload.kv_cache_len is set but workload.kv_cache is dynamic: set kv_cache: fixed")
        return None
    length = w.kv_cache_len or dims.max_positions
    if not length:
        raise ConfigError(
            f"workload.kv_cache = fixed: {dims.name} gives no max_position_embeddings; set workload.kv_cache_len"
        )
    needed = w.prompt_len + w.decode_tokens
    if length < needed:
        raise ConfigError(
            f"workload.kv_cache = fixed with {length:,} positions can not hold prompt_len + decode_tokens = "
            f"{needed:,} tokens: raise workload.kv_cache_len or shorten the run"
        )
    return length


class Simulation:
    """Everything resolved from a config; `batches()` streams the op table."""

    def __init__(self, cfg: RunConfig, batch_rows: int = 1 << 17) -> None:
        self.cfg = cfg
        self.device: DeviceSpec = load_device(cfg.device.preset, cfg.device.spec)
        full = resolve_model(cfg.model)
        self.dims: ModelDims = full.sharded(cfg.parallel.tp) if cfg.parallel.tp > 1 else full  # one rank's share
        if cfg.model.dtype == "bf16" and not self.device.supports_bf16:
            raise ConfigError(
                f"model.dtype = 'bf16': device {self.device.name} ({self.device.soc_version}) has no bf16 cube "
                "support; use dtype fp16 or a 910B device"
            )
        rules = load_rules(cfg.fusion.rules_file)
        self.rules: list[Rule] = rules.resolve(cfg.fusion.strategy, cfg.fusion.enable, cfg.fusion.disable)
        self.host = _host_model(cfg, self.device)
        self.parallel: ParallelPlan = plan_parallel(cfg, self.device)
        wf = cfg.execution.weight_format or ("nd" if cfg.execution.mode == "eager" else "nz")
        self.weights_nz = wf == "nz"
        self.batch_rows = batch_rows  # rows per streamed batch (whole steps): bounds memory
        self.kv_cache_len = _fixed_cache_len(cfg, full)
        self.plans: list[StepPlan] = plan_steps(cfg.workload.prompt_len, cfg.workload.decode_tokens, self.kv_cache_len)
        base = insert_collectives(build_graph(self.dims), self.dims)
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
                comm=np.array([n.stream == COMM_STREAM for n in nodes], dtype=bool),
                sync=np.array([any(w.unit == "comm" for w in n.work) for n in nodes], dtype=bool),
            )
        self._dicts_arrays = {
            "phase": pa.array(list(PHASES), pa.string()),
            "bound": pa.array(list(BOUND_NAMES), pa.string()),
            "type": pa.array(list(TASK_TYPES), pa.string()),
            "role": pa.array(self.dicts.roles, pa.string()),
            "name": pa.array(self.dicts.names, pa.string()),
            "optype": pa.array(self.dicts.types, pa.string()),
        }
        self.step_rows: list[dict[str, object]] = []
        devices = self.parallel.devices
        self.ops_per_rank = sum(len(self.phases[p.phase].graph.nodes) * len(p.steps) for p in self.plans)
        self.total_ops = self.ops_per_rank * devices
        cap = cfg.output.max_ops
        if self.total_ops > cap:
            per_step = len(self.phases[self.plans[-1].phase].graph.nodes)
            ranks = f" x {devices:,} devices" if devices > 1 else ""
            raise ConfigError(
                f"this run would produce {self.total_ops:,} ops ({per_step:,} per decode step x "
                f"{cfg.workload.decode_tokens + 1:,} steps{ranks}), more than output.max_ops = {cap:,}: reduce "
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
            cache_len=self.kv_cache_len,
            full_dims=full,
            buffer_bytes_per_communicator=self.device.topology.buffer_mb * 1e6 if self.device.topology else 0.0,
        )
        if not self.memory.fits and not cfg.device.ignore_capacity:
            raise ConfigError(
                does_not_fit(
                    self.memory,
                    self.device.name,
                    w.batch_size,
                    self.kv_cache_len or w.prompt_len + w.decode_tokens,
                    cfg.parallel.tp,
                )
            )

    # -- streaming --------------------------------------------------------------------------------------------
    def _timed_chunks(self) -> Iterator[TimedChunk]:
        """Each chunk of steps with its kernel costs and every rank class's host/device timeline; records the
        step rows (of rank 0's timeline) and each class's per-step time split."""
        rng = np.random.default_rng(self.cfg.seed)
        jitter = self.cfg.execution.jitter
        classes = self.parallel.classes
        op_index = 0
        # per class: the host start of its next step (its group's critical class sets it) and its last device end
        host_start = [0] * len(classes)
        prev_end = [0] * len(classes)
        critical_of = [
            next(c for c, o in enumerate(classes) if o.critical and o.group_factor == rc.group_factor) for rc in classes
        ]
        reporting = next(c for c, rc in enumerate(classes) if 0 in rc.ranks)
        self.step_rows = []
        self.rank_split = RankSplit(len(classes))
        b = self.cfg.workload.batch_size
        for plan in self.plans:
            pm = self.phases[plan.phase]
            n_nodes = len(pm.graph.nodes)
            for chunk in plan.chunks(max(1, self.batch_rows // n_nodes)):
                k = len(chunk.steps)
                values = basis_values(b, chunk.sq, chunk.skv, chunk.attend)
                with np.errstate(over="raise", invalid="raise", divide="raise"):  # garbage in: stop, not NaN out
                    costs = evaluate_costs(
                        pm.reps, self.device, values, self.weights_nz, comm_group=self.parallel.group
                    )
                _check_representable(costs, plan.phase, self.cfg)
                # rows are step-major: row = step_offset * n_nodes + node
                cols = np.arange(k)[:, None]
                sig = pm.sig[None, :]
                dur_f = costs.dur[sig, cols]
                if jitter.kernel_cv > 0:
                    sigma = np.sqrt(np.log1p(jitter.kernel_cv**2))
                    dur_f = dur_f * np.exp(np.abs(rng.normal(0.0, sigma, dur_f.shape)))
                disp = None
                if self.host.mode == "eager":
                    disp = np.full(dur_f.shape, self.host.dispatch_ns, dtype=np.int64)
                    disp[:, pm.comm] = self.host.collective_launch_ns
                    if jitter.host_cv > 0:
                        sigma = np.sqrt(np.log1p(jitter.host_cv**2))
                        disp = np.rint(disp * np.exp(np.abs(rng.normal(0.0, sigma, disp.shape)))).astype(np.int64)
                times = []
                for rc in classes:
                    df = dur_f if rc.factor == 1.0 else np.where(pm.comm[None, :], dur_f, dur_f * rc.factor)
                    dur = np.maximum(np.rint(df).astype(np.int64), 1)
                    times.append(RankTimes(rc, dur, np.empty_like(dur), np.empty_like(dur), None))
                    if disp is not None:
                        times[-1].lstart = np.empty_like(dur)
                for j in range(k):
                    starts = list(host_start)  # this step's: a critical class moves its own on as it finishes
                    for c, rt in enumerate(times):
                        floor = None
                        if not rt.cls.critical:  # its collectives end when the group's slowest rank's do
                            crit = times[critical_of[c]]
                            floor = np.where(pm.sync, crit.start[j] + crit.dur[j], 0)
                        tl = simulate_step(
                            rt.dur[j],
                            None if disp is None else disp[j],
                            self.host,
                            starts[critical_of[c]],
                            prev_end[c],
                            floor,
                        )
                        rt.start[j], rt.wait[j] = tl.start, tl.wait
                        waited = int((tl.end - tl.start - rt.dur[j])[pm.sync].sum())
                        rt.dur[j] = tl.end - tl.start
                        if rt.lstart is not None and tl.launch_start is not None:
                            rt.lstart[j] = tl.launch_start
                        self.rank_split.add(c, plan.phase, tl, rt.dur[j], pm.comm, waited)
                        if c == reporting:
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
                        prev_end[c] = int(tl.end[-1])
                        if rt.cls.critical:
                            host_start[c] = tl.sync_end
                yield TimedChunk(plan, chunk, pm, values, costs, dur_f, disp, times, op_index)
                op_index += k * n_nodes

    def step_walls(self) -> pa.Table:
        """The steps table alone (timeline only, no op columns): what a what-if needs, several times faster."""
        for _ in self._timed_chunks():
            pass
        return self.steps_table()

    def batches(self, only_rank: int | None = None) -> Iterator[pa.RecordBatch]:
        """The op table in batches of whole steps: per chunk, each rank's rows (rank 0 first); `only_rank`: just
        that rank's (a single-device view: the summary, the trace)."""
        for tc in self._timed_chunks():
            shared = shared_columns(tc, self._dicts_arrays)
            for rt in sorted(tc.ranks, key=lambda r: int(r.cls.ranks[0])):
                wanted = rt.cls.ranks if only_rank is None else rt.cls.ranks[rt.cls.ranks == only_rank]
                if not len(wanted):
                    continue
                arrays = {**shared, **time_columns(tc, rt)}
                for r in wanted:
                    rows = len(arrays["op_index"])
                    arrays["rank"] = pa.array(np.full(rows, r, dtype=np.int32))
                    arrays["stage"] = pa.array(np.full(rows, self.parallel.stage_of(np.array([r]))[0], np.int32))
                    yield pa.RecordBatch.from_arrays([arrays[f.name] for f in OPS_SCHEMA], schema=OPS_SCHEMA)

    def steps_table(self) -> pa.Table:
        return pa.Table.from_pylist(self.step_rows, schema=STEPS_SCHEMA)
