"""The recipes of `atbprof predict` (data: atbprof/data/predict_recipes.yaml): which cost shape each op type has."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Recipe(_M):
    recipe: Literal["gemm", "attention", "vector"]
    passes: float = Field(default=1.0, gt=0, le=1000)
    inplace: tuple[int, ...] = Field(default=(), strict=False, max_length=64)
    reads_output_only: bool = False  # a slice / gather reads the elements it copies, not its whole input
    fills: bool = False  # writes its output without reading its input (ZerosLike: the input only gives the shape)
    products: int = Field(default=2, ge=1, le=16)
    score_passes: float = Field(default=7.8, ge=0, le=1000)
    family: Literal["gemm", "attention", "norm", "rope", "swiglu", "elementwise"] | None = None

    @property
    def kernel_family(self) -> str:
        """The family the kernel is reported under: `family`, else its recipe's (vector: elementwise)."""
        return self.family or {"gemm": "gemm", "attention": "attention"}.get(self.recipe, "elementwise")


class Communication(_M):
    op_type_prefixes: tuple[str, ...] = Field(strict=False)
    task_types: tuple[str, ...] = Field(strict=False)


FAMILIES = ("gemm", "attention", "norm", "rope", "swiglu", "elementwise", "communication", "other")
"""Kernel families `atbprof predict` reports, in this order (other: an op type the recipes do not list)."""


class Recipes(_M):
    communication: Communication
    op_types: dict[str, Recipe]

    def is_communication(self, op_type: str, task_type: str | None) -> bool:
        return op_type.startswith(self.communication.op_type_prefixes) or (task_type or "") in (
            self.communication.task_types
        )


@lru_cache(maxsize=1)
def load_recipes() -> Recipes:
    text = resources.files("atbprof.data").joinpath("predict_recipes.yaml").read_text(encoding="utf-8")
    return Recipes.model_validate(yaml.safe_load(text))  # our own data: a failure here is a bug
