"""The multi-device part of a run's summary: the deployment, its communication per token, the bandwidth each
collective reached and every rank's step split (pure: reads a finished Simulation)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, Field, model_validator

from atbprof.device.collectives import collective_ns, transit_bytes
from atbprof.graph.expr import basis_values
from atbprof.sim.rank_split import RankStepSplit

if TYPE_CHECKING:
    from atbprof.sim.simulate import Simulation


class Deployment(BaseModel):
    # bounded as a config is (config/models.py): a run.json read back holds what a run can have, nothing more
    tp: int = Field(ge=1, le=1024)
    pp: int = Field(ge=1, le=1024)
    dp: int = Field(ge=1, le=65_536)
    devices: int = Field(ge=1, le=65_536)
    microbatches: int = Field(default=1, ge=1, le=1 << 20)
    stage_layers: list[int] = Field(default=[], max_length=1024)  # decoder layers per pipeline stage
    transport: str  # the tensor-parallel group's slowest link (HCCS, PCIE, RDMA), "" on one card
    algorithm: str  # HCCL's algorithm per level, e.g. "mesh" or "ring+halving_doubling"

    @model_validator(mode="after")
    def _devices(self) -> Deployment:
        if self.devices != self.tp * self.pp * self.dp:
            raise ValueError(f"devices = {self.devices} is not tp x pp x dp = {self.tp * self.pp * self.dp}")
        return self


class CollectiveUse(BaseModel):
    """One kind of collective of one phase: per step, and what it reached (rank 0, the first step of the phase)."""

    phase: str
    op_type: str
    role: str
    count_per_step: int
    message_bytes: int  # the tensor (AllReduce input, AllGather output)
    transit_bytes: int  # what one rank sends over its links (msprof Transit Size)
    transfer_us: float  # alpha-beta transfer time, without the static task cost or any wait
    task_us: float  # the task as it runs: static cost + transfer
    bandwidth_gbps: float  # transit_bytes / transfer time (msprof's Bandwidth(GB/s))


def _collectives(sim: Simulation) -> list[CollectiveUse]:
    """Per phase, each kind of HCCL task of a token's path (one microbatch's pass through every stage)."""
    topo = sim.device.topology
    static_us = topo.collective_static_us if topo else 0.0
    out = []
    for plan in sim.plans:
        values = basis_values(sim.micro_batch, plan.sq[:1], plan.skv[:1], plan.attend[:1], experts=sim.dims.moe).astype(
            np.float64
        )
        seen: dict[tuple[str, str], list[Any]] = {}
        for st in sim.stages:
            for n in st.phases[plan.phase].graph.nodes:
                for w in n.work:
                    if w.unit != "comm":
                        continue
                    nbytes = np.asarray(w.comm_bytes.coef @ values)
                    key = (n.op_type, n.role)
                    if key not in seen:
                        group = st.comm.of(w.kind)
                        ns = float(collective_ns(w.kind, group, nbytes)[0])
                        sent = float(transit_bytes(w.kind, group, nbytes)[0])
                        seen[key] = [0, float(nbytes[0]), sent, ns]
                    seen[key][0] += 1
        for (op_type, role), (count, nbytes, sent, ns) in seen.items():
            out.append(
                CollectiveUse(
                    phase=plan.phase,
                    op_type=op_type,
                    role=role,
                    count_per_step=count,
                    message_bytes=round(nbytes),
                    transit_bytes=round(sent),
                    transfer_us=round(ns / 1e3, 3),
                    task_us=round(ns / 1e3 + static_us, 3),
                    bandwidth_gbps=round(sent / ns, 3) if ns else 0.0,
                )
            )
    return out


def parallel_summary(sim: Simulation, decode_steps: int) -> dict[str, Any]:
    """The RunSummary fields that describe the deployment (one card: tp = pp = dp = 1, no collectives).

    Takes the summary's decode step count, not the summary: sim/summary.py imports this module's models."""
    plan = sim.parallel
    group = plan.group
    ranks = []
    for c, rc in enumerate(plan.classes):
        split = sim.rank_split.decode_means(c)
        for r in rc.ranks:
            ranks.append(RankStepSplit(rank=int(r), stage=rc.stage, slowdown=rc.factor, **split))
    ranks.sort(key=lambda row: row.rank)
    # a token's path: one microbatch's pass through each stage (its leading rank's step / microbatches); a
    # Receive's time is the stage's bubble (reported per rank), the transfer it waits for is its Send's
    leaders = [ranks[r] for r in plan.stage_leaders()]
    comm_ms = sum(row.communication_us - row.bubble_us for row in leaders) / plan.microbatches / 1e3
    step_ms = ranks[0].step_us / 1e3
    return {
        "parallel": Deployment(
            tp=plan.tp,
            pp=plan.pp,
            dp=plan.dp,
            devices=plan.devices,
            microbatches=plan.microbatches,
            stage_layers=[hi - lo for lo, hi in plan.stage_bounds],
            transport=group.transport,
            algorithm="+".join(lv.algorithm for lv in group.levels),
        ),
        "ops_total": sim.total_ops,  # every rank's rows of ops.parquet (the other figures are rank 0's)
        "communication_ms_per_token": round(comm_ms, 4) if decode_steps else 0.0,
        "communication_share": round(comm_ms / step_ms, 4) if step_ms else 0.0,
        "collectives": _collectives(sim),
        "ranks": ranks,
    }
