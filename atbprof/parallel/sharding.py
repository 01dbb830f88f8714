"""Sharding rules (atbprof/data/parallel.yaml): per-rank linear shapes and where collectives go (tensor
parallel), which model-level ops every pipeline stage runs and the roles of its sends and receives."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict

from atbprof.graph.dims import ModelDims
from atbprof.yamlio import load_data

Collective = Literal["AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Send", "Receive", "Broadcast"]
SizeBy = Literal["heads", "kv_heads", "inter", "expert_inter", "vocab"]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LinearSplit(_M):
    split: Literal["n", "k"]
    by: SizeBy


class EmbeddingSplit(_M):
    by: SizeBy


class CollectiveAfter(_M):
    after: str
    op_type: str | None = None
    collective: Collective
    role: str
    last: bool = False  # after the last kernel of the role in the layer (a norm's chain), not the first
    tokens: bool = False  # gathers / scatters the tokens (sequence parallelism), not the vocabulary


class PointToPoint(_M):
    role: str


class PipelineRules(_M):
    every_stage: tuple[str, ...]
    send: PointToPoint
    receive: PointToPoint


class TensorParallelRules(_M):
    linears: dict[str, LinearSplit]
    embedding: EmbeddingSplit
    collectives: tuple[CollectiveAfter, ...]
    sequence_parallel: tuple[CollectiveAfter, ...]

    def linear(self, dims: ModelDims, role: str, k: int, n: int) -> tuple[int, int]:
        """One rank's (K, N) of the linear of `role` whose full weight is K x N."""
        rule = self.linears.get(role)
        if rule is None or dims.tp == 1:
            return k, n
        full, local = dims.local(rule.by)
        if rule.split == "n":
            return k, n * local // full
        return k * local // full, n

    def embedding_rows(self, dims: ModelDims, rows: int) -> int:
        full, local = dims.local(self.embedding.by)
        return rows * local // full


@lru_cache(maxsize=1)
def tensor_parallel_rules() -> TensorParallelRules:
    text = resources.files("atbprof.data").joinpath("parallel.yaml").read_text(encoding="utf-8")
    return TensorParallelRules.model_validate(load_data(text)["tensor_parallel"])  # our data: a bug if bad


@lru_cache(maxsize=1)
def pipeline_rules() -> PipelineRules:
    text = resources.files("atbprof.data").joinpath("parallel.yaml").read_text(encoding="utf-8")
    return PipelineRules.model_validate(load_data(text)["pipeline"])  # our data: a bug if bad
