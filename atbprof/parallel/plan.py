"""A deployment's ranks: tp x pp x dp devices, the tensor-parallel group every collective runs over, each pipeline
stage's layers and links, and which ranks share a timeline (TP ranks are symmetric and dp replicas identical; only
`execution.rank_slowdown` sets ranks apart). Global rank = tp rank + tp x (stage + pp x replica)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from atbprof.config.models import RunConfig
from atbprof.device.collectives import CollectiveGroup, CommGroups, place_group, place_pair, require_topology
from atbprof.device.spec import DeviceSpec
from atbprof.parallel.pipeline import stage_layers


@dataclass(frozen=True)
class RankClass:
    """Ranks of one stage that run the same timeline: their compute kernels take `factor` x the modelled time,
    and their tp group's slowest rank has `group_factor` (the timeline every collective of the group waits for)."""

    factor: float
    group_factor: float
    ranks: np.ndarray  # int32 global ranks
    stage: int = 0

    @property
    def critical(self) -> bool:
        return self.factor == self.group_factor


@dataclass(frozen=True)
class PipelineClass:
    """dp replicas whose stages have the same slowdowns, so the same timelines: per stage its rank classes, the
    critical one (the tp group's slowest rank) first."""

    stages: tuple[tuple[RankClass, ...], ...]


@dataclass(frozen=True)
class ParallelPlan:
    tp: int
    pp: int
    dp: int
    microbatches: int
    group: CollectiveGroup  # the tensor-parallel group every collective runs over
    stage_bounds: tuple[tuple[int, int], ...]  # [first, last) decoder layers per stage
    comm: tuple[CommGroups, ...]  # per stage: its tp group and the links to its neighbours
    pipelines: tuple[PipelineClass, ...]

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def classes(self) -> tuple[RankClass, ...]:
        """Every rank class, pipeline by pipeline, stage by stage."""
        return tuple(rc for p in self.pipelines for stage in p.stages for rc in stage)

    def stage_of(self, ranks: np.ndarray) -> np.ndarray:
        return ((ranks // self.tp) % self.pp).astype(np.int32)

    def stage_leaders(self) -> list[int]:
        """Replica 0's tp rank 0 of each stage: the ranks whose rows make up one token's path."""
        return [s * self.tp for s in range(self.pp)]


def _comm_groups(device: DeviceSpec, tp: int, pp: int, group: CollectiveGroup) -> tuple[CommGroups, ...]:
    """Per stage, its links to the neighbouring stages: the slowest of its tp ranks' pairs (rank r of stage s sends
    to rank r of stage s+1), placed as replica 0's ranks sit on the topology."""

    def slowest(s: int) -> CollectiveGroup:
        pairs = [place_pair(device.topology, s * tp + t, (s + 1) * tp + t, device.name) for t in range(tp)]
        return min(pairs, key=lambda g: g.levels[0].link.bandwidth_gbps)

    links = [slowest(s) for s in range(pp - 1)]
    return tuple(
        CommGroups(
            group,
            send=links[s] if s < pp - 1 else CommGroups(group).send,
            receive=links[s - 1] if s > 0 else CommGroups(group).receive,
        )
        for s in range(pp)
    )


def _pipelines(cfg: RunConfig) -> tuple[PipelineClass, ...]:
    par = cfg.parallel
    tp, pp, dp = par.tp, par.pp, par.dp
    slow = cfg.execution.rank_slowdown
    # a replica's timelines follow from the distinct (group's slowest, own) factors of each stage: replicas alike
    # in those share them (only the <= 64 replicas with a straggler need looking at)
    plain = tuple(((1.0, 1.0),) for _ in range(pp))
    factors: dict[int, np.ndarray] = {}
    for r, f in slow.items():
        factors.setdefault(r // (tp * pp), np.ones((pp, tp)))[(r // tp) % pp, r % tp] = f
    by_key: dict[tuple, list[int]] = defaultdict(list)
    for d, fac in sorted(factors.items()):
        g = fac.max(axis=1)
        key = tuple(tuple(sorted({(float(g[s]), float(f)) for f in fac[s]}, key=lambda k: -k[1])) for s in range(pp))
        if key != plain:  # a slowdown of 1.0 sets no rank apart
            by_key[key].append(d)
    odd = [d for reps in by_key.values() for d in reps]
    rest = np.setdiff1d(np.arange(dp), np.array(odd, dtype=np.int64))
    groups = [(plain, rest)] if len(rest) else []
    groups += [(key, np.array(reps)) for key, reps in by_key.items()]
    out = []
    for key, reps in sorted(groups, key=lambda kv: int(kv[1][0])):
        ranks = (np.arange(tp * pp).reshape(1, pp, tp) + (reps * tp * pp).reshape(-1, 1, 1)).astype(np.int32)
        stages = []
        for s in range(pp):
            fac = np.ones((len(reps), tp))
            for i, d in enumerate(reps):
                if int(d) in factors and key != plain:
                    fac[i] = factors[int(d)][s]
            stage_ranks = ranks[:, s, :]
            stages.append(
                tuple(
                    RankClass(f, g, np.sort(stage_ranks[fac == f]), s)
                    for g, f in key[s]  # sorted by factor, largest first: the critical class leads
                )
            )
        out.append(PipelineClass(tuple(stages)))
    return tuple(out)


def plan_parallel(cfg: RunConfig, device: DeviceSpec, layers: int, model: str) -> ParallelPlan:
    par = cfg.parallel
    require_topology(device.topology, par.devices, device.name)  # replicas sit on the topology too
    group = place_group(device.topology, par.tp, device.name)
    bounds = stage_layers(layers, par.pp, par.stage_layers, model)
    return ParallelPlan(
        tp=par.tp,
        pp=par.pp,
        dp=par.dp,
        microbatches=par.microbatches_for(cfg.workload.batch_size),
        group=group,
        stage_bounds=bounds,
        comm=_comm_groups(device, par.tp, par.pp, group),
        pipelines=_pipelines(cfg),
    )
