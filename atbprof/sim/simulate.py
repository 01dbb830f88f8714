"""The run pipeline: config -> model graph -> fusion passes -> device model -> op table batches.

Decode steps repeat the same fused graph; only the KV length changes. Costs are evaluated once per unique kernel
signature for a chunk of steps, then expanded to rows with array operations, so a run streams millions of ops
without one Python object per op.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pyarrow as pa

from atbprof.config.models import RunConfig
from atbprof.device.kernels import BOUND_NAMES, TASK_TYPES, KernelCosts, evaluate_costs, signatures
from atbprof.device.spec import DeviceSpec, load_device
from atbprof.errors import ConfigError, DoesNotFitError
from atbprof.fusion import FusionContext, FusionResult, apply_fusion, load_rules
from atbprof.fusion.rules import Rule
from atbprof.graph.builder import build_graph
from atbprof.graph.dims import ModelDims, resolve_model
from atbprof.graph.expr import basis_values
from atbprof.graph.memo import NodeMemo
from atbprof.graph.nodes import Graph, Node
from atbprof.optable.schema import OPS_SCHEMA, STEPS_SCHEMA
from atbprof.parallel.collectives import COMM_STREAM, insert_collectives
from atbprof.parallel.pipeline import stage_graph
from atbprof.parallel.plan import ParallelPlan, plan_parallel
from atbprof.sim.deployment_clock import DeploymentClock
from atbprof.sim.memory import MemoryEstimate, StageShare, does_not_fit, estimate_memory
from atbprof.sim.models import Dictionaries, PhaseModel, RankTimes, StageModel, TimedChunk
from atbprof.sim.rank_split import RankSplit
from atbprof.sim.rows import shared_columns, summary_columns, time_columns
from atbprof.sim.steps import PHASES, StepPlan, plan_steps, prefill_chunk
from atbprof.sim.timeline import HostModel

# The calibrated host parameters (scripts/calibrate.py fits them to seed 000's table; README lists them)
EAGER_DISPATCH_US = 45.0  # torch_npu eager: host cost per kernel launch (aten -> aclnn tiling -> launch)
EAGER_STEP_OVERHEAD_US = 1300.0  # eager generate loop per token (Python, logits processing, KV bookkeeping)
GRAPH_STEP_OVERHEAD_US = 300.0  # captured graph: input preparation only


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


def _check_context(cfg: RunConfig, dims: ModelDims) -> None:
    """A sequence longer than the model's context is refused: past max_position_embeddings RoPE meets positions the
    model was never trained on, unless RoPE scaling stretches it."""
    w = cfg.workload
    needed = w.prompt_len + w.decode_tokens
    if dims.context and needed > dims.context:
        stretched = " (max_position_embeddings)"
        if dims.context != dims.max_positions:
            stretched = f" (max_position_embeddings {dims.max_positions:,} with RoPE scaling)"
        factor = -(-needed // dims.max_positions)
        raise ConfigError(
            f"workload: prompt_len + decode_tokens = {needed:,} tokens is beyond {dims.name}'s context of "
            f"{dims.context:,}{stretched}: shorten the prompt, or set model.rope_scaling_factor (e.g. {factor} for "
            "linear or dynamic RoPE scaling) to run it stretched"
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


def _numbered_per_pass(comm_names: list[str], names: list[str]) -> list[str]:
    """`names` (one pass's node names, repeated per pass) with pass i's HCCL task `<type>_<group>_<k>` renamed
    `<type>_<group>_<k + i x n>`, n = the pass's tasks of that group (`comm_names`: "" for other nodes)."""
    per_group: dict[str, int] = {}
    for name in comm_names:
        if name:
            group = name.rsplit("_", 1)[0]
            per_group[group] = per_group.get(group, 0) + 1
    n = len(comm_names)
    out = list(names)
    for i in range(n, len(names)):
        base = comm_names[i % n]
        if base:
            group, k = base.rsplit("_", 1)
            out[i] = f"{group}_{int(k) + (i // n) * per_group[group]}"
    return out


@lru_cache(maxsize=8)
def _model_graph(dims: ModelDims) -> Graph:
    """One rank's model graph with its collectives (cached: the fusion passes remember their results per graph
    object, so a sweep's points of one model reuse them)."""
    return insert_collectives(build_graph(dims), dims)


@lru_cache(maxsize=32)
def _stage_graph(dims: ModelDims, stage: int, bounds: tuple[tuple[int, int], ...]) -> Graph:
    return stage_graph(_model_graph(dims), stage, bounds)


@dataclass(frozen=True)
class _NodeFacts:
    """What a phase model takes from its nodes alone (remembered per node sequence: graph/memo.py)."""

    layer: np.ndarray
    stream: np.ndarray
    comm: np.ndarray  # an HCCL task
    sync: np.ndarray  # joins the tp group (an HCCL task or an MC2 kernel)
    receive: np.ndarray
    send: np.ndarray
    roles: list[str]
    names: list[str]
    types: list[str]
    fused_from: pa.Array


def _node_facts(nodes: Sequence[Node]) -> _NodeFacts:
    comm = np.array([x.stream == COMM_STREAM for x in nodes], dtype=bool)
    kinds = np.array([next((w.kind for w in x.work if w.unit == "comm"), "") for x in nodes])
    return _NodeFacts(
        layer=np.array([x.layer for x in nodes], dtype=np.int32),
        stream=np.array([x.stream for x in nodes], dtype=np.int32),
        comm=comm,
        sync=np.array([any(w.unit == "comm" for w in x.work) for x in nodes], dtype=bool),
        receive=comm & (kinds == "Receive"),
        send=comm & (kinds == "Send"),
        roles=[x.role for x in nodes],
        names=[x.op_name for x in nodes],
        types=[x.op_type for x in nodes],
        fused_from=pa.array([list(x.fused_from) for x in nodes], pa.list_(pa.string())),
    )


_NODE_FACTS = NodeMemo(_node_facts)


class Simulation:
    """Everything resolved from a config; `batches()` streams the op table."""

    def __init__(self, cfg: RunConfig, batch_rows: int = 1 << 17) -> None:
        if cfg.workload.kind != "batch":  # a serving workload prices its iterations through a batch config
            raise ConfigError("workload.kind: serving runs through `atbprof run` (atbprof/serving/), not one batch")
        self.cfg = cfg
        self.device: DeviceSpec = load_device(cfg.device.preset, cfg.device.spec)
        full = resolve_model(cfg.model)
        tp = cfg.parallel.tp
        # one rank's share
        self.dims: ModelDims = full.sharded(tp, cfg.parallel.sequence_parallel) if tp > 1 else full
        _check_context(cfg, self.dims)
        if self.dims.sp and cfg.workload.batch_size % tp:
            raise ConfigError(
                f"parallel.sequence_parallel splits each step's tokens over the {tp} tp ranks: a decode step has "
                f"workload.batch_size = {cfg.workload.batch_size} tokens; use a batch divisible by {tp}"
            )
        if cfg.model.dtype == "bf16" and not self.device.supports_bf16:
            raise ConfigError(
                f"model.dtype = 'bf16': device {self.device.name} ({self.device.soc_version}) has no bf16 cube "
                "support; use dtype fp16 or a 910B device"
            )
        rules = load_rules(cfg.fusion.rules_file)
        self.rules: list[Rule] = rules.resolve(cfg.fusion.strategy, cfg.fusion.enable, cfg.fusion.disable)
        self.host = _host_model(cfg, self.device)
        self.parallel: ParallelPlan = plan_parallel(cfg, self.device, full.layers, full.name)
        wf = cfg.execution.weight_format or ("nd" if cfg.execution.mode == "eager" else "nz")
        self.weights_nz = wf == "nz"
        self.batch_rows = batch_rows  # rows per streamed batch (whole steps): bounds memory
        self.kv_cache_len = _fixed_cache_len(cfg, full)
        m = self.parallel.microbatches
        self.micro_batch = cfg.workload.batch_size // m  # sequences per microbatch (the batch without stages)
        w = cfg.workload
        self.prefill_chunk = prefill_chunk(w.prompt_len, w.batch_size, w.max_num_batched_tokens)
        self.plans: list[StepPlan] = plan_steps(w.prompt_len, w.decode_tokens, self.kv_cache_len, self.prefill_chunk)
        self.prefill_steps = len(self.plans[0].steps)
        self.base_ops_per_step = len(_model_graph(self.dims).nodes)
        fused: list[dict[str, FusionResult]] = []
        for s in range(self.parallel.pp):
            base = _stage_graph(self.dims, s, self.parallel.stage_bounds)
            fused.append({})
            for plan in self.plans:
                ctx = FusionContext(
                    phase=plan.phase,
                    soc_version=self.device.soc_version,
                    tokens=int(self.micro_batch * plan.sq[0]),
                    seq_len=int(plan.skv.max()),
                    softmax_fusion_max_seq=cfg.fusion.softmax_fusion_max_seq,
                    shape_buckets=cfg.fusion.shape_buckets,
                    dtype=cfg.model.dtype,
                )
                fused[s][plan.phase] = apply_fusion(base, self.rules, ctx)
        self.dicts = Dictionaries()
        for stage in fused:
            for res in stage.values():
                f = _NODE_FACTS(res.graph.nodes)
                for values, table in (
                    (f.roles, self.dicts.roles),
                    (f.names, self.dicts.names),
                    (f.types, self.dicts.types),
                ):
                    known = set(table)
                    table.extend(v for v in dict.fromkeys(values) if v not in known)  # first appearance order
        self.stages: list[StageModel] = [
            StageModel(
                s, {phase: self._phase_model(phase, res, m) for phase, res in stage.items()}, self.parallel.comm[s]
            )
            for s, stage in enumerate(fused)
        ]
        self.phases: dict[str, PhaseModel] = self.stages[0].phases  # rank 0's
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
        per_stage = [sum(st.phases[p.phase].n_nodes * len(p.steps) for p in self.plans) for st in self.stages]
        self.ops_per_rank = max(per_stage)
        self.total_ops = sum(per_stage) * self.parallel.tp * self.parallel.dp
        cap = cfg.output.max_ops
        if self.total_ops > cap:
            per_step = self.phases[self.plans[-1].phase].n_nodes
            ranks = f" x {devices:,} devices" if devices > 1 else ""
            raise ConfigError(
                f"this run would produce {self.total_ops:,} ops ({per_step:,} per decode step x "
                f"{cfg.workload.decode_tokens + 1:,} steps{ranks}), more than output.max_ops = {cap:,}: reduce "
                "workload.decode_tokens (or the model's layers), or raise output.max_ops"
            )
        par = self.parallel
        estimates = [
            estimate_memory(
                {p: pm.graph for p, pm in st.phases.items()},
                self.dims,
                self.device.cores.split,
                self.device.hbm.capacity_gb,
                2 * self.device.cores.aiv * self.device.buffers_kb.get("ub", 192) * 1024,
                w.batch_size,
                w.prompt_len,
                w.decode_tokens,
                capacity_ignored=cfg.device.ignore_capacity,
                max_num_batched_tokens=w.max_num_batched_tokens,
                cache_len=self.kv_cache_len,
                full_dims=full,
                buffer_bytes_per_communicator=self.device.topology.buffer_mb * 1e6 if self.device.topology else 0.0,
                share=None
                if par.pp == 1
                else StageShare(hi - lo, embedding=st.stage == 0, lm_head=st.stage == par.pp - 1),
                microbatches=m,
                communicators=(par.tp > 1) + (par.pp > 1),
                stage=st.stage,
            )
            for st, (lo, hi) in zip(self.stages, par.stage_bounds, strict=True)
        ]
        # the stage that needs the most (the first one of a tie)
        self.memory: MemoryEstimate = max(estimates, key=lambda e: (e.total_gb, -e.stage))
        if not self.memory.fits and not cfg.device.ignore_capacity:
            raise DoesNotFitError(
                does_not_fit(
                    self.memory,
                    self.device.name,
                    w.batch_size,
                    self.kv_cache_len or w.prompt_len + w.decode_tokens,
                    cfg.parallel.tp,
                    cfg.parallel.pp,
                ),
                self.memory,
            )

    def _phase_model(self, phase: str, res: FusionResult, passes: int) -> PhaseModel:
        """A stage's step of `phase`: its fused pass graph, the per-node arrays repeated for each microbatch."""
        nodes = res.graph.nodes
        sig, reps = signatures(res.graph)
        f = _NODE_FACTS(nodes)
        n = len(nodes)
        rep = lambda a: np.tile(a, passes)  # noqa: E731
        names = f.names * passes
        if passes > 1:  # HCCL numbers a communicator's tasks as they run: each microbatch's get their own names
            names = _numbered_per_pass([x if c else "" for x, c in zip(f.names, f.comm, strict=True)], names)
            for name in names:
                if name not in self.dicts.names:
                    self.dicts.names.append(name)
        return PhaseModel(
            phase=phase,
            graph=res.graph,
            fusion=res,
            passes=passes,
            sig=rep(sig),
            reps=reps,
            shape_nodes=nodes * passes,
            layer=rep(f.layer),
            role=rep(self.dicts.index(f.roles, self.dicts.roles)),
            name=self.dicts.index(names, self.dicts.names),
            op_type=rep(self.dicts.index(f.types, self.dicts.types)),
            stream=rep(f.stream),
            fused_from=f.fused_from if passes == 1 else pa.concat_arrays([f.fused_from] * passes),
            node_id=rep(np.arange(n, dtype=np.int32)),
            microbatch=np.repeat(np.arange(passes, dtype=np.int32), n),
            comm=rep(f.comm),
            sync=rep(f.sync),
            receive=rep(f.receive),
            send=rep(f.send),
        )

    # -- streaming --------------------------------------------------------------------------------------------
    def _stage_chunk(self, st: StageModel, plan: StepPlan, chunk: StepPlan, rng: np.random.Generator) -> TimedChunk:
        """A stage's chunk through the device model, with empty timelines for each of its rank classes."""
        pm = st.phases[plan.phase]
        k = len(chunk.steps)
        jitter = self.cfg.execution.jitter
        values = basis_values(self.micro_batch, chunk.sq, chunk.skv, chunk.attend, experts=self.dims.moe)
        with np.errstate(over="raise", invalid="raise", divide="raise"):  # garbage in: stop, not NaN out
            costs = evaluate_costs(pm.reps, self.device, values, self.weights_nz, comm_groups=st.comm)
        _check_representable(costs, plan.phase, self.cfg)
        # rows are step-major: row = step_offset * n_nodes + node
        dur_f = costs.dur[pm.sig[None, :], np.arange(k)[:, None]]
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
        for pipe in self.parallel.pipelines:
            for rc in pipe.stages[st.stage]:
                df = dur_f if rc.factor == 1.0 else np.where(pm.comm[None, :], dur_f, dur_f * rc.factor)
                dur = np.maximum(np.rint(df).astype(np.int64), 1)
                times.append(RankTimes(rc, dur, np.empty_like(dur), np.empty_like(dur), None))
                if disp is not None:
                    times[-1].lstart = np.empty_like(dur)
        return TimedChunk(plan, chunk, pm, values, costs, dur_f, disp, times, 0)

    def _timed_chunks(self) -> Iterator[list[TimedChunk]]:
        """Each chunk of steps, per stage, with its kernel costs and every rank class's host/device timeline
        (sim/deployment_clock.py); records the step rows and each class's per-step time split.

        The step's frame (steps.parquet) runs from the batch's previous token back on the host to this one, as
        the tp group's slowest rank delivers it; a rank's own frame (its time split, its ProfilerStep) runs
        from the end of its previous step to the end of this one."""
        rng = np.random.default_rng(self.cfg.seed)
        par = self.parallel
        clock = DeploymentClock(par, self.host)
        op_index = [0] * par.pp
        frame_end = [0] * len(par.classes)  # per class: the end of its previous step
        self.step_rows = []
        self.rank_split = RankSplit(len(par.classes), steady=par.pp > 1)
        b = self.cfg.workload.batch_size
        for plan in self.plans:
            n_most = max(st.phases[plan.phase].n_nodes for st in self.stages)
            for chunk in plan.chunks(max(1, self.batch_rows // n_most)):
                k = len(chunk.steps)
                tcs = [self._stage_chunk(st, plan, chunk, rng) for st in self.stages]
                for s, tc in enumerate(tcs):
                    tc.op_index = op_index[s]
                classes = [(clock.index_of[id(rt.cls)], tc, rt) for tc in tcs for rt in tc.ranks]
                # the classes of each stage's leading rank (replica 0's tp rank 0): the step rows follow them
                lead = [next(c for c, _, rt in classes if r in rt.cls.ranks) for r in par.stage_leaders()]
                for j in range(k):
                    frame_start = clock.batch_token()
                    done = clock.step(tcs, j)
                    for c, tc, rt in classes:
                        self.rank_split.add(
                            c,
                            plan.phase,
                            done.ends[c] - frame_end[c],
                            rt.start[j],
                            rt.dur[j],
                            tc.pm.comm,
                            tc.pm.receive,
                            done.waited[c],
                        )
                        frame_end[c] = done.ends[c]
                    n0 = tcs[0].pm.n_nodes
                    self.step_rows.append(
                        {
                            "step": int(chunk.steps[j]),
                            "phase": plan.phase,
                            "kv_len": int(chunk.skv[j]),
                            "tokens": int(b * chunk.sq[j]),
                            "host_start_ns": frame_start,
                            "host_overhead_ns": self.host.step_overhead_ns,
                            "first_op_index": op_index[0] + j * n0,
                            "op_count": n0,
                            "device_start_ns": done.first_start[lead[0]],
                            "device_end_ns": clock.prev_end[lead[-1]],
                            "sync_end_ns": clock.batch_token(),  # the whole batch has its token
                        }
                    )
                yield tcs
                for s, tc in enumerate(tcs):
                    op_index[s] += k * tc.pm.n_nodes

    def step_walls(self) -> pa.Table:
        """The steps table alone (timeline only, no op columns): what a what-if needs, several times faster."""
        for _ in self._timed_chunks():
            pass
        return self.steps_table()

    def summary_batches(self) -> Iterator[pa.RecordBatch]:
        """What `batches(only_ranks=stage_leaders())` gives, with only the columns the run summary reads (sim/rows.py
        SUMMARY_COLUMNS): a summary-only run (a sweep's point) skips building the rest."""
        for tc, rt, wanted in self._rank_classes(self.parallel.stage_leaders()):
            arrays = summary_columns(tc, rt, self._dicts_arrays)
            for r in wanted:
                arrays["rank"] = pa.array(np.full(len(arrays["step"]), r, dtype=np.int32))
                yield pa.RecordBatch.from_pydict(arrays)

    def batches(self, only_ranks: list[int] | None = None) -> Iterator[pa.RecordBatch]:
        """The op table in batches of whole steps: per chunk, stage by stage, each rank's rows (in rank order);
        `only_ranks`: just those ranks'."""
        last: TimedChunk | None = None
        shared: dict[str, pa.Array] = {}
        for tc, rt, wanted in self._rank_classes(only_ranks):
            if tc is not last:  # what every rank of the chunk shares, built once per chunk
                shared, last = shared_columns(tc, self._dicts_arrays), tc
            arrays = {**shared, **time_columns(tc, rt)}
            rows = len(arrays["op_index"])
            arrays["stage"] = pa.array(np.full(rows, rt.cls.stage, np.int32))
            for r in wanted:
                arrays["rank"] = pa.array(np.full(rows, r, dtype=np.int32))
                yield pa.RecordBatch.from_arrays([arrays[f.name] for f in OPS_SCHEMA], schema=OPS_SCHEMA)

    def _rank_classes(self, only_ranks: list[int] | None) -> Iterator[tuple[TimedChunk, RankTimes, np.ndarray]]:
        """Per chunk, stage by stage, each rank class (in rank order) with its ranks among `only_ranks` (all: None)."""
        for tcs in self._timed_chunks():
            for tc in tcs:
                for rt in sorted(tc.ranks, key=lambda r: int(r.cls.ranks[0])):
                    wanted = rt.cls.ranks if only_ranks is None else rt.cls.ranks[np.isin(rt.cls.ranks, only_ranks)]
                    if len(wanted):
                        yield tc, rt, wanted

    def steps_table(self) -> pa.Table:
        return pa.Table.from_pylist(self.step_rows, schema=STEPS_SCHEMA)
