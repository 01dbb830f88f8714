"""A deployment's ranks: tp x pp x dp devices, their tensor-parallel collective group, and which ranks share a
timeline (TP ranks are symmetric; only `execution.rank_slowdown` sets ranks apart)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from atbprof.config.models import RunConfig
from atbprof.device.collectives import CollectiveGroup, place_group, require_topology
from atbprof.device.spec import DeviceSpec
from atbprof.errors import ConfigError


@dataclass(frozen=True)
class RankClass:
    """Ranks that run the same timeline: their compute kernels take `factor` x the modelled time, and their
    group's slowest rank has `group_factor` (the timeline every collective of the group waits for)."""

    factor: float
    group_factor: float
    ranks: np.ndarray  # int32 global ranks

    @property
    def critical(self) -> bool:
        return self.factor == self.group_factor


@dataclass(frozen=True)
class ParallelPlan:
    tp: int
    pp: int
    dp: int
    group: CollectiveGroup  # the tensor-parallel group every collective runs over
    classes: tuple[RankClass, ...]  # per group_factor, its critical class first: collectives wait for it

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp

    def stage_of(self, ranks: np.ndarray) -> np.ndarray:
        return ((ranks // self.tp) % self.pp).astype(np.int32)


def plan_parallel(cfg: RunConfig, device: DeviceSpec) -> ParallelPlan:
    par = cfg.parallel
    if par.pp > 1:
        raise ConfigError(
            f"parallel.pp = {par.pp}: pipeline parallelism is not simulated yet (tensor parallelism and data "
            "parallel replicas are); use parallel.pp 1"
        )
    require_topology(device.topology, par.devices, device.name)  # replicas sit on the topology too
    group = place_group(device.topology, par.tp, device.name)
    slow = cfg.execution.rank_slowdown
    ranks = np.arange(par.devices, dtype=np.int32)
    factors = np.array([slow.get(int(r), 1.0) for r in ranks])
    # a collective joins one tp group: its slowest rank sets the pace for that group only (dp replicas and
    # stages are independent of each other's stragglers)
    group_max = np.repeat(factors.reshape(-1, par.tp).max(axis=1), par.tp)
    keys = sorted({(float(g), float(f)) for g, f in zip(group_max, factors, strict=True)}, key=lambda k: (-k[0], -k[1]))
    classes = tuple(RankClass(f, g, ranks[(group_max == g) & (factors == f)]) for g, f in keys)
    return ParallelPlan(par.tp, par.pp, par.dp, group, classes)
