"""NPU storage dtypes emulated in numpy: values live in float32 arrays rounded to the storage dtype.

fp16 rounds through numpy's IEEE half; bf16 (no numpy type) rounds the float32 mantissa to 8 bits, nearest-even,
as the hardware's fp32->bf16 cast does; fp32 storage is exact. ULP distances count representable values between
two numbers of the storage dtype (the ordered integer encoding), the usual kernel-accuracy measure.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Dtype = Literal["fp16", "bf16", "fp32"]
FP16_MAX = 65504.0

EPS: dict[str, float] = {"fp16": 2.0**-10, "bf16": 2.0**-7, "fp32": 2.0**-23}
"""Machine epsilon (spacing above 1.0) per storage dtype."""


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 values (kept in float32): round to nearest even on the 16 dropped bits; NaN stays NaN."""
    x32 = np.ascontiguousarray(x, dtype=np.float32)
    bits = x32.view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    out = (rounded & np.uint32(0xFFFF0000)).view(np.float32)
    return np.where(np.isnan(x32), np.float32(np.nan), out)


def store(x: np.ndarray, dtype: Dtype) -> np.ndarray:
    """Round to the storage dtype (what writing the tensor to HBM does); result is float32."""
    if dtype == "fp16":
        with np.errstate(over="ignore"):  # overflow to +-Inf is the behaviour we model
            return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)
    if dtype == "bf16":
        return to_bf16(x)
    return np.asarray(x, dtype=np.float32)


def ordered(x: np.ndarray, dtype: Dtype) -> np.ndarray:
    """Monotone integer encoding of `x` rounded to the storage dtype (adjacent values differ by 1, -0 == +0)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype == "fp16":
            bits = np.asarray(x).astype(np.float16).view(np.uint16).astype(np.int32)
            sign = 1 << 15
        elif dtype == "bf16":
            bits = (to_bf16(np.asarray(x, dtype=np.float32)).view(np.uint32) >> np.uint32(16)).astype(np.int32)
            sign = 1 << 15
        else:
            bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.int64)
            sign = 1 << 31
    return np.where(bits & sign, sign - bits, bits)


def ulp_distance(a: np.ndarray, b: np.ndarray, dtype: Dtype) -> np.ndarray:
    """Representable values of `dtype` between a and b (both rounded to it); only meaningful where both are finite."""
    return np.abs(ordered(a, dtype) - ordered(b, dtype))
