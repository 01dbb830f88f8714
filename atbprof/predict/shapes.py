"""Tensors as a profile records them: msprof `Input Shapes` / `Input Data Types` strings, parsed and bounded."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

DTYPE_BYTES = {
    "DT_BF16": 2,
    "BF16": 2,
    "DT_FLOAT16": 2,
    "FLOAT16": 2,
    "FP16": 2,
    "DT_FLOAT": 4,
    "FLOAT": 4,
    "FLOAT32": 4,
    "DT_DOUBLE": 8,
    "DOUBLE": 8,
    "INT64": 8,
    "DT_INT64": 8,
    "UINT64": 8,
    "INT32": 4,
    "DT_INT32": 4,
    "UINT32": 4,
    "INT16": 2,
    "UINT16": 2,
    "INT8": 1,
    "DT_INT8": 1,
    "UINT8": 1,
    "BOOL": 1,
    "DT_BOOL": 1,
    "HIFLOAT8": 1,
    "FLOAT8_E4M3FN": 1,
    "FLOAT8_E5M2": 1,
}
MAX_ELEMENTS = 1 << 40
"""No tensor of a real kernel holds more elements (4 TB of int8): a larger one is a damaged row."""


@dataclass(frozen=True)
class TensorShape:
    dims: tuple[int, ...]
    dtype: str

    @property
    def elements(self) -> int:
        return prod(self.dims)

    @property
    def nbytes(self) -> int:
        return self.elements * DTYPE_BYTES[self.dtype]

    @property
    def is_float32(self) -> bool:
        return DTYPE_BYTES[self.dtype] == 4 and "INT" not in self.dtype


class ShapeError(ValueError):
    """A shape or dtype string that does not parse (the message says which part)."""


def parse_tensors(shapes: str | None, dtypes: str | None) -> list[TensorShape | None]:
    """One entry per tensor slot (None for an absent optional input). Raises ShapeError."""
    if not shapes or shapes.strip().upper() in {"N/A", "NA", ""}:
        return []
    slots = shapes.strip().strip('"').split(";")
    types = (dtypes or "").strip().strip('"').split(";") if dtypes else []
    out: list[TensorShape | None] = []
    for i, slot in enumerate(slots):
        slot = slot.strip()
        dtype = types[i].strip().upper() if i < len(types) else ""
        if not slot and dtype in ("", "DT_UNDEFINED", "UNDEFINED"):  # an optional input left out
            out.append(None)
            continue
        if dtype not in DTYPE_BYTES:
            raise ShapeError(f"tensor {i}: data type {dtype or '(none)'!r} is not one atbprof knows")
        try:
            dims = tuple(int(d) for d in slot.split(",")) if slot else ()
        except ValueError:
            raise ShapeError(f"tensor {i}: shape {slot!r} is not comma-separated integers") from None
        if any(d < 0 for d in dims) or prod(dims) > MAX_ELEMENTS:
            raise ShapeError(f"tensor {i}: shape {slot!r} is out of range (negative or over 2^40 elements)")
        out.append(TensorShape(dims, dtype))
    return out
