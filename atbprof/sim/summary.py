"""Run summary: the figures `atbprof run` prints and run.json stores, accumulated from op batches (pure)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow as pa
from pydantic import BaseModel

from atbprof.arrays import distinct
from atbprof.sim.categories import CATEGORIES
from atbprof.sim.memory import MemoryEstimate
from atbprof.sim.parallel_summary import CollectiveUse, Deployment
from atbprof.sim.rank_split import RankStepSplit

NORM_TYPES = ("RmsNorm", "AddRmsNorm", "LayerNormV3", "AddLayerNorm", "LayerNorm")


class OpTypeTime(BaseModel):
    op_type: str
    count_per_token: float
    device_ms_per_token: float
    attributed_ms_per_token: float


class NearMissRow(BaseModel):
    rule: str
    phase: str
    reason: str
    count: int
    first_layer: int


class RunSummary(BaseModel):
    ttft_ms: float
    decode_ms_per_token: float
    tokens_per_s: float
    norm_ms_per_token: float
    norm_kernel_ms_per_token: float
    norm_launch_ms_per_token: float
    device_busy_fraction: float
    host_bound_fraction: float
    ops_total: int
    ops_per_decode_step: int
    breakdown_ms_per_token: dict[str, float]
    ttft_breakdown_ms: dict[str, float]
    bound_ms_per_token: dict[str, float]
    top_op_types: list[OpTypeTime]
    hbm_floor_ms_per_token: float
    # the prefill's FLOPs (GEMMs, causal attention, vector work) per device over TTFT x the device's dense peak
    prefill_mfu: float = 0.0
    fusion_fired: dict[str, dict[str, int]]
    fusion_disabled: dict[str, str]
    near_misses: list[NearMissRow]
    decode_steps: int
    memory: MemoryEstimate | None = None
    # the deployment (sim/parallel_summary.py); one card: tp = pp = dp = 1 and no collectives
    parallel: Deployment | None = None
    communication_ms_per_token: float = 0.0  # rank 0's collectives per decode step (waits included)
    communication_share: float = 0.0  # of rank 0's decode step
    collectives: list[CollectiveUse] = []
    ranks: list[RankStepSplit] = []


class Latency(BaseModel):
    ttft_ms: float
    decode_ms_per_token: float


class LatencySummary(Latency):
    """Latency plus what the fusion passes did: all a what-if needs from a re-simulation."""

    fusion_fired: dict[str, dict[str, int]]
    fusion_disabled: dict[str, str]
    near_misses: list[NearMissRow]


def latency(steps: pa.Table) -> Latency:
    """TTFT (run start -> first token on the host) and the mean decode step wall time, from a steps table."""
    ph = np.array(steps.column("phase").to_pylist())
    wall = (steps.column("sync_end_ns").to_numpy() - steps.column("host_start_ns").to_numpy()).astype(float)
    dec = ph == "decode"
    # the first token is sampled at the end of the prefill's last step (its last chunk)
    ttft = float(steps.column("sync_end_ns").to_numpy()[int((ph == "prefill").sum()) - 1]) / 1e6
    per_tok = float(wall[dec].mean()) / 1e6 if dec.any() else 0.0
    return Latency(ttft_ms=round(ttft, 4), decode_ms_per_token=round(per_tok, 4))


_CAT_CODE = {"attention": 0, "ffn": 1, "other": 2}
_BOUND_CODE = {"compute": 0, "memory": 1, "launch": 2, "communication": 3}


class SummaryBuilder:
    """Feed it every batch in order, then `finish`. Decode figures are means over decode steps.

    Attribution: each task is charged the time the device timeline advanced when it ran: its duration plus the
    idle gap before it (the device waited for its launch - HTA-style, charged to the op that was waited for). The
    first task of a step is charged only its duration; the step's host lead-in (generate loop, launch latency) and
    the token sync go to `other`, so the rows add up to the measured per-token wall time.

    With pipeline stages, feed it every stage's leading rank (tp rank 0 of replica 0): a token's path is one
    microbatch's pass through each stage, so each stage's step (all its microbatches) counts 1/`microbatches`,
    and the busy fractions are per device (over `stages` devices).
    """

    def __init__(self, microbatches: int = 1, stages: int = 1, prefill_steps: int = 1) -> None:
        self.weight = 1.0 / microbatches
        self.prefill_steps = prefill_steps  # steps 0..prefill_steps-1 are the prefill (chunked: its iterations)
        self.stages = stages
        self._last: dict[int, tuple[int, int, int]] = {}  # per rank: its last step, microbatch and task end
        self.cat: dict[str, float] = defaultdict(float)
        self.prefill_cat: dict[str, float] = defaultdict(float)
        self.bound: dict[str, float] = defaultdict(float)
        self.type_dev: dict[str, float] = defaultdict(float)
        self.type_inc: dict[str, float] = defaultdict(float)
        self.type_count: dict[str, float] = defaultdict(float)
        self.norm_kernel = 0.0
        self.norm_launch = 0.0
        self.busy = 0
        self.decode_busy = 0
        self.ops = 0
        self.decode_ops = 0.0
        self.prefill_flops = 0.0

    def add(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        w = self.weight
        rank = batch.column("rank")[0].as_py()
        last_step, last_mb, last_end = self._last.get(rank, (-1, 0, 0))
        self.ops += n
        dur = batch.column("task_dur_ns").to_numpy()
        self.busy += int(dur.sum())
        step = batch.column("step").to_numpy()
        start = batch.column("task_start_ns").to_numpy()
        end = start + dur
        mb = batch.column("microbatch").to_numpy()
        prev_end = np.concatenate(([last_end], end[:-1]))
        prev_step = np.concatenate(([last_step], step[:-1]))
        prev_mb = np.concatenate(([last_mb], mb[:-1]))
        # a step's (a microbatch pass's) first task: its duration; the wait before it is the host's, or the token's
        inc = np.where((step != prev_step) | (mb != prev_mb), dur, end - prev_end)
        self._last[rank] = (int(step[-1]), int(mb[-1]), int(end[-1]))
        decode = step >= self.prefill_steps
        # categories, bounds and norm kinds per dictionary entry, then per row by index (integer masks: the same
        # elements in the same order as string masks, so the same sums, at a fraction of the cost)
        role_all = batch.column("role")
        roles = role_all.dictionary.to_pylist()
        cat_of_role = np.array([_CAT_CODE[CATEGORIES.get(r.split(".")[0], "other")] for r in roles], np.int8)
        ridx_all = role_all.indices.to_numpy()
        cat_all = cat_of_role[ridx_all]
        prefill = ~decode
        if prefill.any():
            self.prefill_flops += float(batch.column("flops").to_numpy()[prefill].sum())
        for name in ("attention", "ffn"):
            self.prefill_cat[name] += w * float(inc[prefill & (cat_all == _CAT_CODE[name])].sum())
        if not decode.any():
            return
        self.decode_ops += w * int(decode.sum())
        self.decode_busy += int(dur[decode].sum())
        inc, dur_d = inc[decode], dur[decode]
        ridx = ridx_all[decode]
        cat = cat_all[decode]
        for name in ("attention", "ffn", "other"):
            self.cat[name] += w * float(inc[cat == _CAT_CODE[name]].sum())
        bound = batch.column("bound")
        bcodes = np.array([_BOUND_CODE.get(b, -1) for b in bound.dictionary.to_pylist()], np.int8)
        bidx = bcodes[bound.indices.to_numpy()[decode]]
        for b in ("compute", "memory", "launch", "communication"):
            self.bound[b] += w * float(inc[bidx == _BOUND_CODE[b]].sum())
        ot = batch.column("op_type")
        types = ot.dictionary.to_pylist()
        tidx = ot.indices.to_numpy()[decode]
        for k in distinct(tidx).tolist():
            mask = tidx == k
            name = types[k]
            self.type_dev[name] += w * float(dur_d[mask].sum())
            self.type_inc[name] += w * float(inc[mask].sum())
            self.type_count[name] += w * int(mask.sum())
        # norm-related: norm kernels, the residual Adds that feed them, and the vector share of a norm folded
        # into a MatMul; each counted as kernel time plus its host launch (the eager dispatch it costs)
        norm_role = np.array([r.endswith((".norm", ".residual")) for r in roles], bool)[ridx]
        folded = np.array(["Norm" in t for t in types], bool)[tidx]
        folded &= ~norm_role
        launch = batch.column("host_launch_dur_ns").filter(pa.array(decode)).to_numpy(zero_copy_only=False)
        launch = np.nan_to_num(launch.astype(np.float64))
        vec = batch.column("vec_time_ns").filter(pa.array(decode)).to_numpy()
        self.norm_kernel += w * float(dur_d[norm_role].sum() + vec[folded].sum())
        self.norm_launch += w * float(launch[norm_role].sum())

    def finish(
        self,
        steps: pa.Table,
        batch_size: int,
        hbm_floor_ms: float,
        fusion: dict[str, object],
        memory: MemoryEstimate | None = None,
        peak_flops: float = 0.0,
    ) -> RunSummary:
        ph = np.array(steps.column("phase").to_pylist())
        wall = (steps.column("sync_end_ns").to_numpy() - steps.column("host_start_ns").to_numpy()).astype(float)
        dec = ph == "decode"
        n_dec = int(dec.sum())
        lat = latency(steps)
        ttft, per_tok = lat.ttft_ms, lat.decode_ms_per_token
        total_wall = float(steps.column("sync_end_ns").to_numpy()[-1])
        k = max(n_dec, 1) * 1e6
        breakdown = {name: self.cat[name] / k for name in ("attention", "ffn")}
        breakdown["other"] = per_tok - sum(breakdown.values())
        dec_wall = float(wall[dec].sum())
        ttft_rows = {name: self.prefill_cat[name] / 1e6 for name in ("attention", "ffn")}
        ttft_rows["other"] = ttft - sum(ttft_rows.values())
        top = sorted(self.type_inc, key=lambda t: -self.type_inc[t])[:10]
        return RunSummary(
            ttft_ms=round(ttft, 4),
            decode_ms_per_token=round(per_tok, 4),
            tokens_per_s=round(batch_size * 1000.0 / per_tok, 3) if per_tok else 0.0,
            norm_ms_per_token=round((self.norm_kernel + self.norm_launch) / k, 4),
            norm_kernel_ms_per_token=round(self.norm_kernel / k, 4),
            norm_launch_ms_per_token=round(self.norm_launch / k, 4),
            device_busy_fraction=round(self.busy / self.stages / total_wall, 4) if total_wall else 0.0,
            host_bound_fraction=round(1 - self.decode_busy / self.stages / dec_wall, 4) if dec_wall else 0.0,
            ops_total=self.ops,
            ops_per_decode_step=round(self.decode_ops / max(n_dec, 1)),
            breakdown_ms_per_token={kk: round(v, 4) for kk, v in breakdown.items()},
            ttft_breakdown_ms={kk: round(v, 4) for kk, v in ttft_rows.items()},
            bound_ms_per_token={
                b: round(self.bound[b] / k, 4)
                for b in ("compute", "memory", "launch", "communication")
                if b != "communication" or self.bound[b]
            },
            top_op_types=[
                OpTypeTime(
                    op_type=t,
                    count_per_token=round(self.type_count[t] / max(n_dec, 1), 3),
                    device_ms_per_token=round(self.type_dev[t] / k, 4),
                    attributed_ms_per_token=round(self.type_inc[t] / k, 4),
                )
                for t in top
            ],
            hbm_floor_ms_per_token=round(hbm_floor_ms, 4),
            prefill_mfu=round(self.prefill_flops / (ttft / 1e3 * peak_flops * self.stages), 4)
            if ttft and peak_flops
            else 0.0,
            decode_steps=n_dec,
            memory=memory,
            **fusion,  # type: ignore[arg-type]
        )
