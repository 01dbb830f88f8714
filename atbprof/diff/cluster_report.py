"""The typed result of `atbprof diff CLUSTER_A CLUSTER_B` (its JSON twin is the contract, schema
atbprof.cluster-diff/1); diff/clusters.py computes it, renderers read it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

CLUSTER_DIFF_SCHEMA_VERSION = "1"
COLUMNS = ("stage_us", "computing_us", "communication_not_overlapped_us", "free_us", "bubble_us")


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Change(_M):
    base: float
    new: float
    delta: float
    delta_pct: float | None
    ci_low: float | None
    ci_high: float | None
    significant: bool
    method: str  # paired-t | exact | untestable (one rank)


class StageChange(_M):
    stage: int | None
    ranks: list[int]  # the ranks both sides have in this stage
    columns: dict[str, Change]  # COLUMNS, µs


class RankChange(_M):
    rank: int
    stage: int | None
    columns: dict[str, Change]  # one value a side: base, new, delta (untestable alone)
    slow_base: bool
    slow_new: bool


class ClusterDiff(_M):
    schema_version: str = CLUSTER_DIFF_SCHEMA_VERSION
    base: str
    new: str
    summary: str
    added_ranks: list[int]
    removed_ranks: list[int]
    stages: list[StageChange]
    ranks: list[RankChange]
    slow_ranks_base: list[int]
    slow_ranks_new: list[int]

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract of `atbprof diff CLUSTER_A CLUSTER_B --format json`."""
        return self.model_dump(mode="json")
