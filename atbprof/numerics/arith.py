"""Where a kernel rounds: `Arith` for one execution path (NPU storage dtype with fp32 compute, or float64)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from atbprof.numerics.dtypes import Dtype, store

MASK_MIN = {"fp16": -65504.0, "bf16": -3.3895313892515355e38, "fp32": -3.4028234663852886e38, "f64": -np.inf}
"""The additive causal-mask value (Hugging Face uses the dtype's most negative finite number)."""


@dataclass(frozen=True)
class Arith:
    """`dtype` is the storage dtype of every tensor a kernel writes; `ref` = the float64 reference (no rounding)."""

    dtype: Dtype
    ref: bool = False

    @property
    def ft(self) -> type[np.floating]:
        """The compute type: float32 on the NPU path (vector units and cube accumulators), float64 for the reference."""
        return np.float64 if self.ref else np.float32

    @property
    def name(self) -> str:
        return "f64" if self.ref else self.dtype

    def st(self, x: np.ndarray) -> np.ndarray:
        """Write a tensor: round to the storage dtype (identity for the reference)."""
        return np.asarray(x, dtype=np.float64) if self.ref else store(x, self.dtype)

    def c(self, x: np.ndarray) -> np.ndarray:
        """Read a tensor into the compute type."""
        return np.asarray(x, dtype=self.ft)

    @property
    def mask_min(self) -> float:
        return MASK_MIN[self.name]


REF = Arith("fp32", ref=True)
