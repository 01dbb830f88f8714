"""Vectorised text of the combined diff trace's op slices, and the stream lanes that keep them nested.

Every row's JSON is joined column-wise by pyarrow (`binary_join_element_wise`): dictionary values are escaped once
(orjson) and taken per row, times are integer ns printed as µs with three decimals (`<ns // 1000>.<ns % 1000>`),
so no float ever touches a timestamp. Optional args (null or empty in the source) are left out.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

CHUNK_ROWS = 1 << 16
"""Rows per text pass (bounded memory for million-op sides)."""
OP_COLUMNS = ("op_index", "op_name", "op_type", "step", "phase", "layer", "role", "input_shapes", "fused_from")
_FRACTIONS = [f".{i:03d}" for i in range(1000)]


def js(value: object) -> str:
    return orjson.dumps(value).decode()


def us(ns: int) -> str:
    """Integer ns as the µs text of a Chrome trace: exact, three decimals."""
    return f"{ns // 1000}.{ns % 1000:03d}" if ns >= 0 else f"-{us(-ns)}"


def stream_lanes(stream: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lane per op (0 = the stream's own thread) so that slices on one (stream, lane) never overlap.

    Ops whose interval overlaps an earlier op of the same stream (foreign profiles: concurrent kernels, µs
    rounding) go to the first lane that is free again (first fit in start order). Runs without overlap are
    found vectorised; only clusters of overlapping ops are walked in Python.
    """
    lanes = np.zeros(len(stream), np.int64)
    order = np.lexsort((end, start, stream))
    s, e, sid = start[order], end[order], stream[order]
    cut = np.flatnonzero(sid[1:] != sid[:-1]) + 1
    for lo, hi in zip(np.concatenate(([0], cut)).tolist(), np.concatenate((cut, [len(sid)])).tolist(), strict=True):
        reach = np.maximum.accumulate(e[lo:hi])
        clean = np.ones(hi - lo, bool)
        clean[1:] = s[lo + 1 : hi] >= reach[:-1]  # starts after every earlier op ended: all lanes free
        if clean.all():
            continue
        heads = np.flatnonzero(clean)
        sizes = np.diff(np.append(heads, hi - lo))
        for h, n in zip(heads[sizes > 1].tolist(), sizes[sizes > 1].tolist(), strict=True):
            a, b = lo + h, lo + h + n
            lanes[order[a:b]] = _first_fit(s[a:b].tolist(), e[a:b].tolist())
    return lanes


def _first_fit(starts: list[int], ends: list[int]) -> list[int]:
    free_at: list[int] = []  # per lane: end of its last op
    out = []
    for s, e in zip(starts, ends, strict=True):
        for lane, t in enumerate(free_at):
            if t <= s:
                free_at[lane] = e
                out.append(lane)
                break
        else:
            free_at.append(e)
            out.append(len(free_at) - 1)
    return out


class OpSliceText:
    """X events of one side's op slices; escaped dictionary values are cached across chunks."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._cache: dict[str, dict[object, str]] = {}
        self._fractions = pa.array(_FRACTIONS, pa.string())

    def text(self, ops: pa.Table, tid: np.ndarray, ts_ns: np.ndarray, dur_ns: np.ndarray) -> memoryview:
        """`,\\n{...}` per row of `ops` (OP_COLUMNS), concatenated; `tid`, `ts_ns`, `dur_ns` are row-aligned."""
        col = {name: ops.column(name).combine_chunks() for name in OP_COLUMNS}
        head = f',"ph":"X","pid":{self.pid},"tid":'
        tids = np.arange(int(tid.max()) + 1 if len(tid) else 1)  # small: a lookup table
        pieces: list[pa.Array | pa.Scalar] = [
            self._dict(col["op_name"], "name", lambda v: f',\n{{"name":{js(v)}{head}', ',\n{"name":""' + head),
            pa.array([f'{t},"ts":' for t in tids.tolist()], pa.string()).take(pa.array(tid)),
            *self._fixed3(ts_ns, ',"dur":'),
            *self._fixed3(dur_ns, ',"args":{"op_index":'),
            pc.cast(col["op_index"], pa.string()),
            self._lit(',"dur_ns":'),
            pc.cast(pa.array(dur_ns), pa.string()),
            self._int(col["step"], "step"),
            self._dict(col["phase"], "phase", _kv("phase")),
            self._int(col["layer"], "layer"),
            self._dict(col["op_type"], "op_type", _kv("op_type")),
            self._dict(col["role"], "role", _kv("role")),
            self._dict(col["input_shapes"], "input_shapes", _kv("input_shapes")),
            self._dict(pc.binary_join(col["fused_from"], "+"), "fused_from", _kv("fused_from")),
            self._lit("}}"),
        ]
        rows = pc.binary_join_element_wise(*pieces, "")
        return _buffer_text(rows)

    def _lit(self, s: str) -> pa.Scalar:
        return pa.scalar(s, pa.string())

    def _fixed3(self, ns: np.ndarray, suffix: str) -> list[pa.Array | pa.Scalar]:
        frac = self._fractions if not suffix else pa.array([f + suffix for f in _FRACTIONS], pa.string())
        return [pc.cast(pa.array(ns // 1000), pa.string()), frac.take(pa.array(ns % 1000))]

    def _int(self, arr: pa.Array, key: str) -> pa.Array:
        text = pc.binary_join_element_wise(f',"{key}":', pc.cast(arr, pa.string()), "")
        return pc.fill_null(text, "")

    def _dict(self, arr: pa.Array, key: str, fmt: Callable[[str], str], null: str = "") -> pa.Array:
        """Escaped text per distinct value (built once per side), taken per row; `null` where the value is null."""
        enc = arr if pa.types.is_dictionary(arr.type) else pc.dictionary_encode(arr)
        known = self._cache.setdefault(key, {})
        texts = [known[v] if v in known else known.setdefault(v, fmt(v)) for v in enc.dictionary.to_pylist()]
        return pc.fill_null(pa.array(texts, pa.string()).take(enc.indices), null)


def _kv(key: str) -> Callable[[str], str]:
    return lambda v: f',"{key}":{js(v)}' if v else ""


def _buffer_text(rows: pa.Array) -> memoryview:
    """The concatenated text of a string array (its data buffer between the first and last offsets)."""
    if len(rows) == 0:
        return memoryview(b"")
    _, offsets, data = rows.buffers()
    off = np.frombuffer(offsets, np.int32, len(rows) + 1, rows.offset * 4)
    return memoryview(data)[int(off[0]) : int(off[-1])]
