"""The op table as NumPy columns in stream order, shared by the analyzers (read-only; the table is not modified).

Stream order: sorted by (step, stream, start, op_index); one group per (step, stream). Null steps and streams read
as -1 (a profile without steps is one group per stream).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def int_column(table: pa.Table, name: str, fill: int = -1) -> np.ndarray:
    """An integer column as int64, nulls (and a missing column) read as `fill`."""
    if name not in table.column_names:
        return np.full(table.num_rows, fill, dtype=np.int64)
    col = table.column(name)
    if col.null_count:
        col = pc.fill_null(col.cast(pa.int64()), fill)
    return np.asarray(col.to_numpy(), dtype=np.int64)


def has_values(table: pa.Table, name: str) -> bool:
    """Does the table have this column with at least one non-null value (a source that records it)?"""
    return name in table.column_names and table.column(name).null_count < table.num_rows


def dict_codes(values: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[str]]:
    """(code per row, -1 for null; the distinct values) of a string or dictionary column."""
    if isinstance(values, pa.Array):
        values = pa.chunked_array([values])
    if not pa.types.is_dictionary(values.type):
        values = pc.dictionary_encode(values)
    values = values.unify_dictionaries()
    if values.num_chunks == 0:
        return np.zeros(0, dtype=np.int64), []
    names: list[str] = values.chunk(0).dictionary.to_pylist()
    parts = [np.asarray(pc.fill_null(c.indices, -1).to_numpy(), dtype=np.int64) for c in values.chunks]
    return (np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)), names


def _is_sorted(keys: list[np.ndarray]) -> bool:
    """Are rows already in lexicographic order of `keys` (most significant first)?"""
    if len(keys[0]) < 2:
        return True
    undecided = np.ones(len(keys[0]) - 1, dtype=bool)
    for k in keys:
        d = np.diff(k)
        if (d[undecided] < 0).any():
            return False
        undecided &= d == 0
    return True


def running_max_in_groups(values: np.ndarray, group_first: np.ndarray) -> np.ndarray:
    """Running maximum of `values` that restarts at each group's first row (rows are grouped contiguously)."""
    if not len(values):
        return values.copy()
    gid = np.cumsum(group_first) - 1
    lo = int(values.min())
    span = int(values.max()) - lo + 1
    if span * (int(gid[-1]) + 1) < 2**62:
        # offsetting each group above all earlier ones turns the restart into one global accumulate
        shifted = (values - lo) + gid * span
        return np.maximum.accumulate(shifted) - gid * span + lo
    out = np.empty_like(values)
    starts = [*np.flatnonzero(group_first).tolist(), len(values)]
    for a, b in itertools.pairwise(starts):
        out[a:b] = np.maximum.accumulate(values[a:b])
    return out


class RowsOf:
    """Row positions of the values of an index column (op_index, a framework table's `index`), sorted once: a long
    trace asks it for thousands of findings' members."""

    def __init__(self, index: np.ndarray) -> None:
        self.index = index
        self.order = np.argsort(index, kind="stable")
        self.sorted = index[self.order]

    def rows(self, values: list[int] | np.ndarray) -> np.ndarray:
        """The rows holding `values`, in their order; values not in the column are left out."""
        wanted = np.asarray(values, np.int64)
        if not len(self.index) or not len(wanted):
            return np.zeros(0, np.int64)
        at = self.order[np.clip(np.searchsorted(self.sorted, wanted), 0, len(self.index) - 1)]
        return at[self.index[at] == wanted]


@dataclass(frozen=True)
class OpView:
    table: pa.Table
    rows: np.ndarray  # original row of each position
    identity: bool  # rows == arange (the table already was in stream order)
    op_index: np.ndarray
    step: np.ndarray
    stream: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    end: np.ndarray
    group_first: np.ndarray  # first op of its (step, stream) group
    gap: np.ndarray  # idle time of the stream before the op (0 for a group's first op)
    type_codes: np.ndarray
    type_names: list[str]
    cache: dict[tuple[object, ...], Any] = field(default_factory=dict, compare=False, repr=False)  # lazily read columns

    @classmethod
    def build(
        cls,
        table: pa.Table,
        index_col: str = "op_index",
        start_col: str = "task_start_ns",
        dur_col: str = "task_dur_ns",
        type_col: str = "op_type",
        stream_col: str = "stream_id",
    ) -> OpView:
        n = table.num_rows
        op_index = int_column(table, index_col, 0) if index_col in table.column_names else np.arange(n)
        step = int_column(table, "step")
        stream = int_column(table, stream_col)
        start = int_column(table, start_col, 0)
        dur = int_column(table, dur_col, 0)
        keys = [step, stream, start, op_index]
        identity = _is_sorted(keys)
        rows = np.arange(n) if identity else np.lexsort(keys[::-1])
        if not identity:
            op_index, step, stream, start, dur = (a[rows] for a in (op_index, step, stream, start, dur))
        codes, names = dict_codes(table.column(type_col))
        if not identity:
            codes = codes[rows]
        end = start + dur
        group_first = np.ones(n, dtype=bool)
        if n > 1:
            group_first[1:] = (step[1:] != step[:-1]) | (stream[1:] != stream[:-1])
        prev_end = np.empty_like(end)
        if n:
            run = running_max_in_groups(end, group_first)
            prev_end[1:] = run[:-1]
            prev_end[group_first] = start[group_first]
        gap = np.maximum(start - prev_end, 0)
        return cls(table, rows, identity, op_index, step, stream, start, dur, end, group_first, gap, codes, names)

    def __len__(self) -> int:
        return len(self.rows)

    def ints(self, name: str, positions: np.ndarray | None = None, fill: int = -1) -> np.ndarray:
        """An integer column in view order (at `positions`), nulls and a missing column read as `fill`."""
        key = ("int", name, fill)
        if key not in self.cache:
            values = int_column(self.table, name, fill)
            self.cache[key] = values if self.identity else values[self.rows]
        full: np.ndarray = self.cache[key]
        return full if positions is None else full[positions]

    def codes(self, name: str) -> tuple[np.ndarray, list[str]]:
        """Dictionary codes (view order, -1 = null) and values of a string column; all -1 when it is absent."""
        key = ("codes", name)
        if key not in self.cache:
            if name not in self.table.column_names:
                self.cache[key] = (np.full(len(self), -1, dtype=np.int64), [])
            else:
                codes, names = dict_codes(self.table.column(name))
                self.cache[key] = ((codes if self.identity else codes[self.rows]), names)
        result: tuple[np.ndarray, list[str]] = self.cache[key]
        return result

    def take(self, name: str, positions: np.ndarray) -> list[object]:
        """Python values of a column at view positions (None for null), for the rows findings need."""
        if name not in self.table.column_names:
            return [None] * len(positions)
        typ = self.table.schema.field(name).type
        if pa.types.is_integer(typ):
            missing = np.iinfo(np.int64).min
            values = self.ints(name, positions, missing)
            return [None if v == missing else v for v in values.tolist()]
        codes, names = self.codes(name)
        lookup = np.array([*names, None], dtype=object)  # code -1 -> None
        return list(lookup[codes[positions]])

    def arrow(self, name: str, positions: np.ndarray, typ: pa.DataType) -> pa.Array:
        """A column at view positions as an Arrow array of `typ` (null where null or absent), without Python
        objects per row."""
        if name not in self.table.column_names:
            return pa.nulls(len(positions), typ)
        if pa.types.is_integer(self.table.schema.field(name).type):
            missing = np.iinfo(np.int64).min
            values = self.ints(name, positions, missing)
            return pa.array(values, typ, mask=values == missing)
        codes, names = self.codes(name)
        at = codes[positions]
        key = ("arrow-values", name, str(typ))
        if key not in self.cache:  # the column's distinct values, converted once (findings ask per pattern)
            self.cache[key] = pa.array(names, typ)
        distinct: pa.Array = self.cache[key]
        return distinct.take(pa.array(at, mask=at < 0))
