"""Chrome Trace Event Format writer in msprof's trace_view layout, gzip-compressed and streamed.

pids: 1 `CANN` (host launches, step frames), 2 `Ascend Hardware` (a thread per stream; counters), 3 `Overlap
Analysis` (Computing / Free), 4 `Model` (step / layer / block annotations). `ts`/`dur` are µs with 3 decimals
(exact ns) from the run start. Event text is built with pyarrow compute over whole batches. Events a group or busy
interval completes are emitted just before the op that completes them, and the compressor is fed fixed-size
blocks, so the file does not depend on how the table was batched. Only the open groups are carried: flat memory.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from isal import igzip

from atbprof.optable.schema import PIPES, SCHEMA_VERSION, check_table
from atbprof.writers.base import TraceMeta, atomic_path

PID_HOST, PID_DEVICE, PID_OVERLAP, PID_MODEL = 1, 2, 3, 4
STREAM0_TID = 65536
"""tid of stream 0 (Perfetto merges tid 0 into the process's main thread)."""
BLOCK_NAMES = {"attn": "attention", "ffn": "ffn", "head": "head"}
SHAPE_KEYS = {
    "input_shapes": "Input Shapes",
    "input_dtypes": "Input Data Types",
    "output_shapes": "Output Shapes",
    "output_dtypes": "Output Data Types",
}
RATIO_KEYS = {p: {"mac": "aic_mac_ratio", "vec": "aiv_vec_ratio"}.get(p, f"{p}_ratio") for p in PIPES}
LEVELS = ("step", "layer", "block")
_CHUNK = 1 << 15  # rows per compute pass (bounds temporaries; keeps int32 string offsets far from overflow)
_GZ_BLOCK = 1 << 20  # bytes per compressor call
_NO_END = int(np.iinfo(np.int64).min)
_NULL_STR = pa.scalar(None, pa.string())

Pieces = list[Any]  # str constants and string arrays, joined element-wise


def _js(value: object) -> str:
    return orjson.dumps(value).decode()


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _fixed3(milli: Any) -> Pieces:
    """Non-negative int64 thousandths -> pieces of "<int>.<3 digits>" (ns -> µs, or a value x1000)."""
    s = pc.utf8_lpad(pc.cast(milli, pa.string()), 4, "0")
    return [pc.utf8_slice_codeunits(s, 0, -3), ".", pc.utf8_slice_codeunits(s, -3)]


def _join(pieces: Pieces, null_as_empty: bool = False) -> pa.Array:
    return pc.binary_join_element_wise(*pieces, "", null_handling="replace" if null_as_empty else "emit_null")


def _text(arr: pa.Array) -> memoryview:
    """The concatenated text of a string array: its data buffer between the first and the last offset."""
    bufs = arr.buffers()
    if len(arr) == 0 or bufs[2] is None:
        return memoryview(b"")
    off = np.frombuffer(bufs[1], dtype=np.int32, count=len(arr) + 1, offset=arr.offset * 4)
    return memoryview(bufs[2])[int(off[0]) : int(off[-1])]


def _scatter(text: pa.Array, at: np.ndarray, n: int) -> pa.Array:
    """A length-n string array holding text[j] at row at[j] and null elsewhere."""
    idx = np.full(n, -1, dtype=np.int64)
    idx[at] = np.arange(len(at))
    return text.take(pa.array(idx, mask=idx < 0))


def _x(name: str, pid: int, tid: int, start: int, end: int) -> str:
    head = f',\n{{"name":{_js(name)},"pid":{pid},"tid":{tid}'
    return f'{head},"ts":{_us(start)},"dur":{_us(end - start)},"ph":"X"}}'


def _x_vec(pid: int, tid: int, name: Any, start: np.ndarray, end: np.ndarray) -> Pieces:
    head = [',\n{"name":', name, f',"pid":{pid},"tid":{tid},"ts":', *_fixed3(pa.array(start))]
    return [*head, ',"dur":', *_fixed3(pa.array(end - start)), ',"ph":"X"}']


def _counters(ts: Any, gbps: Any, util: Any) -> Pieces:
    pieces = [',\n{"name":"HBM bandwidth","pid":2,"ts":', *ts, ',"ph":"C","args":{"GB/s":', *gbps]
    return [
        *pieces,
        '}},\n{"name":"AI Core utilization","pid":2,"ts":',
        *ts,
        ',"ph":"C","args":{"%":',
        *util,
        "}}",
    ]


def _meta(kind: str, pid: int, tid: int | None, value: object) -> str:
    t = "" if tid is None else f',"tid":{tid}'
    key = "labels" if kind == "process_labels" else "sort_index" if kind.endswith("sort_index") else "name"
    return f',\n{{"name":"{kind}","ph":"M","pid":{pid}{t},"args":{{"{key}":{_js(value)}}}}}'


def _sequential(start: np.ndarray, end: np.ndarray, last_end: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Clamp slices of one flat track so none starts before an earlier one ended (Perfetto needs nesting)."""
    prev = np.maximum.accumulate(np.concatenate(([last_end], end[:-1])))
    s = np.maximum(start, prev)
    e = np.maximum(end, s)
    return s, e, max(last_end, int(e.max()))


class _Runs:
    """Runs of equal keys in op order with min start, max end, byte and busy sums and a first-row payload.

    Columns: keys..., payload, start, end, bytes, busy. The last run stays open (the next batch may continue it);
    `feed` returns the completed runs and, per run, the chunk row whose arrival completed it.
    """

    def __init__(self) -> None:
        self.open: list[np.ndarray] | None = None

    def feed(
        self, keys: list[np.ndarray], payload: np.ndarray, vals: list[np.ndarray]
    ) -> tuple[list[np.ndarray], np.ndarray]:
        chg = np.zeros(len(payload), dtype=bool)
        for k in keys:
            chg[1:] |= k[1:] != k[:-1]
        first = np.concatenate(([0], np.flatnonzero(chg)))
        s, e, nbytes, busy = vals
        cols = [c[first] for c in (*keys, payload)]
        cols += [np.minimum.reduceat(s, first), np.maximum.reduceat(e, first)]
        cols += [np.add.reduceat(nbytes, first), np.add.reduceat(busy, first)]
        at = first[1:]
        if self.open is not None:
            o = self.open
            if all(o[i][0] == cols[i][0] for i in range(len(keys))):
                cols[len(keys)][0] = o[len(keys)][0]
                cols[-4][0], cols[-3][0] = min(cols[-4][0], o[-4][0]), max(cols[-3][0], o[-3][0])
                cols[-2][0] += o[-2][0]
                cols[-1][0] += o[-1][0]
            else:
                cols = [np.concatenate((a, b)) for a, b in zip(o, cols, strict=True)]
                at = first
        self.open = [c[-1:].copy() for c in cols]
        return [c[:-1] for c in cols], at

    def flush(self) -> list[np.ndarray] | None:
        out, self.open = self.open, None
        return out


class ChromeTraceWriter:
    """RunWriter for `trace.json.gz` (Chrome JSON, msprof layout). `abort()` discards a half-written file."""

    filename = "trace.json.gz"

    def __init__(self, compresslevel: int = 1) -> None:
        if not 1 <= compresslevel <= 3:
            raise ValueError(f"compresslevel must be 1..3, got {compresslevel}")
        self.compresslevel = compresslevel
        self._atomic: AbstractContextManager[Path] | None = None
        self._raw: IO[bytes] | None = None
        self._gz: igzip.IGzipFile | None = None

    # -- RunWriter -------------------------------------------------------------------------------------------
    def open(self, directory: Path, meta: TraceMeta) -> None:
        if meta.host_tid <= 0:
            raise ValueError(f"host_tid must be a positive integer, got {meta.host_tid}")
        self.meta, self._host_tid = meta, meta.host_tid
        self._streams: set[int] = set()  # streams with thread metadata written
        self._streams_seen: set[int] = set()
        self._frags: dict[str, tuple[pa.Array, pa.Array]] = {}
        self._codes: dict[str, dict[str, int]] = {"role": {}, "phase": {}}  # block / phase name -> code
        self._busy: tuple[int, int] | None = None  # the open Computing interval
        self._runs = {level: _Runs() for level in LEVELS}
        self._last_end = dict.fromkeys((*LEVELS, "host"), _NO_END)
        self._n_ops = self._n_launch = 0
        self._pending = bytearray()
        self._atomic = atomic_path(Path(directory) / self.filename)
        tmp = self._atomic.__enter__()
        try:
            self._raw = open(tmp, "wb")  # noqa: SIM115 - closed by close() / abort()
            self._gz = igzip.IGzipFile("", "wb", self.compresslevel, self._raw, mtime=0)
            self._write(self._header())
        except BaseException as err:
            self._fail(err)
            raise

    def write_batch(self, batch: pa.RecordBatch) -> None:
        try:
            check_table(batch.schema, "op batch")
            for off in range(0, batch.num_rows, _CHUNK):
                self._chunk(batch.slice(off, _CHUNK))
        except BaseException as err:
            self._fail(err)
            raise

    def close(self, steps: pa.Table) -> None:
        try:
            self._finish(steps)
            assert self._gz is not None and self._raw is not None and self._atomic is not None
            self._gz.write(self._pending)
            self._gz.close()
            self._raw.close()
            self._atomic.__exit__(None, None, None)
            self._atomic = self._gz = self._raw = None
        except BaseException as err:
            self._fail(err)
            raise

    def abort(self) -> None:
        """Discard the partial file (for a caller that fails between `open` and `close`)."""
        self._fail(RuntimeError("trace write aborted"))

    # -- output ----------------------------------------------------------------------------------------------
    def _fail(self, err: BaseException) -> None:
        for f in (self._gz, self._raw):
            if f is not None:
                with suppress(Exception):  # already failing; the temp file is removed next
                    f.close()
        if self._atomic is not None:
            self._atomic.__exit__(type(err), err, err.__traceback__)
        self._atomic = self._gz = self._raw = None

    def _write(self, data: str | memoryview) -> None:
        """Feed the compressor whole _GZ_BLOCK blocks only, so the output does not depend on call boundaries."""
        assert self._gz is not None
        mv = memoryview(data.encode()) if isinstance(data, str) else data
        if len(self._pending) + len(mv) < _GZ_BLOCK:
            self._pending += mv
            return
        cut = _GZ_BLOCK - len(self._pending)
        self._pending += mv[:cut]
        self._gz.write(self._pending)
        end = cut + (len(mv) - cut) // _GZ_BLOCK * _GZ_BLOCK
        for i in range(cut, end, _GZ_BLOCK):
            self._gz.write(mv[i : i + _GZ_BLOCK])
        self._pending = bytearray(mv[end:])

    def _header(self) -> str:
        host_threads = [
            (self._host_tid + 1, "Host steps", 0),
            (self._host_tid, f"Thread {self._host_tid}", 1),
        ]
        procs = [
            (PID_HOST, "CANN", "CPU", host_threads),
            (PID_DEVICE, "Ascend Hardware", "NPU", []),
            (PID_OVERLAP, "Overlap Analysis", "NPU", [(1, "Computing", 1), (2, "Free", 2)]),
            (PID_MODEL, "Model", "atbprof", [(1, "Steps", 1), (2, "Layers", 2), (3, "Blocks", 3)]),
        ]
        out = ['{"traceEvents":[\n{"name":"process_name","ph":"M","pid":1,"args":{"name":"CANN"}}']
        for pid, name, label, threads in procs:
            out += [_meta("process_name", pid, None, name)] if pid != PID_HOST else []
            out += [_meta("process_labels", pid, None, label), _meta("process_sort_index", pid, None, pid)]
            for tid, tname, sort in threads:
                out += [_meta("thread_name", pid, tid, tname), _meta("thread_sort_index", pid, tid, sort)]
        return "".join(out + self._stream_meta(set(self.meta.streams)))

    def _stream_meta(self, streams: set[int]) -> list[str]:
        out = []
        for sid in sorted(streams - self._streams):
            tid = sid or STREAM0_TID
            out += [_meta("thread_name", PID_DEVICE, tid, f"Stream {sid}")]
            out += [_meta("thread_sort_index", PID_DEVICE, tid, sid)]
        self._streams |= streams
        return out

    # -- per batch -------------------------------------------------------------------------------------------
    def _frag(self, col: pa.Array, key: str, fmt: Callable[[str], str] = _js) -> pa.Array:
        """JSON text per row of a dictionary (or low-cardinality string) column, each value escaped once."""
        if not pa.types.is_dictionary(col.type):
            col = pc.dictionary_encode(col)
        d, hit = col.dictionary, self._frags.get(key)
        if hit is None or not (hit[0] is d or hit[0].equals(d)):
            hit = self._frags[key] = (d, pa.array([fmt(v) for v in d.to_pylist()], pa.string()))
        return hit[1].take(col.indices)

    def _code(self, col: pa.Array, kind: str, fn: Callable[[str], str]) -> np.ndarray:
        table = self._codes[kind]
        codes = np.array([table.setdefault(fn(v), len(table)) for v in col.dictionary.to_pylist()], np.int64)
        return codes[col.indices.to_numpy(zero_copy_only=False)]

    def _chunk(self, b: pa.RecordBatch) -> None:
        c = b.column
        cols = [c(n) for n in ("task_start_ns", "task_dur_ns", "host_launch_start_ns", "host_launch_dur_ns")]
        mins = [pc.min_max(a)["min"].as_py() for a in (*cols, c("stream_id"))]
        if any(v is not None and v < 0 for v in mins):
            raise ValueError(f"op batch at op_index {c('op_index')[0]}: negative time, duration or stream id")
        self._streams_seen.update(pc.unique(c("stream_id")).to_pylist())
        s = cols[0].to_numpy()
        e = s + cols[1].to_numpy()
        prefix = [p for p in (self._overlap(s, e), *self._groups(b, s, e)) if p is not None]
        self._write(_text(self._op_events(b, mins[4] == 0, prefix)))
        self._n_ops += b.num_rows
        self._n_launch += b.num_rows - cols[2].null_count

    def _op_events(self, b: pa.RecordBatch, has_stream0: bool, prefix: list[pa.Array]) -> pa.Array:
        c = b.column
        stream = c("stream_id")
        if has_stream0:
            stream = pc.if_else(pc.equal(stream, 0), pa.scalar(STREAM0_TID, pa.int32()), stream)
        conn = pc.cast(pc.add(c("op_index"), 1), pa.string())
        sid, ts, name = (
            pc.cast(stream, pa.string()),
            _fixed3(c("task_start_ns")),
            self._frag(c("op_name"), "name"),
        )
        hbm = pc.cast(pc.add(c("hbm_read_bytes"), c("hbm_write_bytes")), pa.string())
        fused = self._frag(
            pc.binary_join(c("fused_from"), "+"), "fused", lambda v: f',"fused_from":{_js(v)}' * bool(v)
        )
        dev: Pieces = [',\n{"name":', name, ',"pid":2,"tid":', sid, ',"ts":', *ts, ',"dur":']
        dev += [
            *_fixed3(c("task_dur_ns")),
            ',"ph":"X","cat":"Task","args":{"Model Id":4294967295,"Task Type":',
        ]
        dev += [
            self._frag(c("task_type"), "task_type"),
            ',"Physic Stream Id":',
            pc.cast(c("stream_id"), pa.string()),
        ]
        dev += [
            ',"Task Id":',
            pc.cast(c("task_id"), pa.string()),
            ',"Batch Id":0,"Subtask Id":0,"connection_id":',
        ]
        dev += [
            conn,
            ',"OP Type":',
            self._frag(c("op_type"), "op_type"),
            ',"role":',
            self._frag(c("role"), "role"),
        ]
        dev += [',"layer":', pc.cast(c("layer"), pa.string()), ',"step":', pc.cast(c("step"), pa.string())]
        dev += [',"Block Dim":', pc.cast(c("block_dim"), pa.string())]
        dev += [
            self._frag(c(col), col, lambda v, k=key: f',"{k}":{_js(v)}') for col, key in SHAPE_KEYS.items()
        ]
        dev += [',"bound":', self._frag(c("bound"), "bound"), fused, ',"hbm_bytes":', hbm]
        dev += [',"flops":', pc.cast(c("flops"), pa.string())]
        for p in PIPES:
            milli = pc.cast(pc.round(pc.multiply(pc.cast(c(f"{p}_ratio"), pa.float64()), 1000.0)), pa.int64())
            dev += [f',"{RATIO_KEYS[p]}":', *_fixed3(pc.max_element_wise(milli, 0))]
        dev.append("}}")
        hstart = c("host_launch_start_ns")
        if hstart.null_count == len(hstart):
            return _join(prefix + dev, null_as_empty=True)
        hts, tid = _fixed3(hstart), self._host_tid
        host: Pieces = [f',\n{{"name":"Node@launch","pid":1,"tid":{tid},"ts":', *hts, ',"dur":']
        host += [*_fixed3(c("host_launch_dur_ns")), ',"ph":"X","args":{"item_id":', name]
        host += [',"level":"node","connection_id":', conn, "}}"]
        host += [f',\n{{"name":"HostToDevice","pid":1,"tid":{tid},"ts":', *hts]
        host += [',"ph":"s","cat":"HostToDevice","id":', conn, "}"]
        flow: Pieces = [',\n{"name":"HostToDevice","pid":2,"tid":', sid, ',"ts":', *ts]
        flow += [',"ph":"f","bp":"e","cat":"HostToDevice","id":', conn, "}"]
        if hstart.null_count == 0:
            return _join(prefix + host + dev + flow, null_as_empty=True)
        valid = pc.if_else(pc.is_valid(hstart), "", _NULL_STR)
        return _join([*prefix, _join(host), *dev, _join([valid, *flow])], null_as_empty=True)

    def _overlap(self, s: np.ndarray, e: np.ndarray) -> pa.Array | None:
        """Merge busy intervals (touching tasks coalesce): closed Computing intervals and the Free gaps between."""
        carry_end = _NO_END if self._busy is None else self._busy[1]
        cm = np.maximum(np.maximum.accumulate(e), carry_end)
        prev = np.concatenate(([carry_end], cm[:-1]))
        brk = np.flatnonzero(s > prev)
        starts = s[brk] if self._busy is None else np.concatenate(([self._busy[0]], s[brk]))
        closed = brk if self._busy is not None else brk[1:]
        self._busy = (int(starts[-1]), int(cm[-1]))
        if len(closed) == 0:
            return None
        ends = prev[closed]
        comp = _x_vec(PID_OVERLAP, 1, '"Computing"', starts[:-1], ends)
        text = _join(comp + _x_vec(PID_OVERLAP, 2, '"Free"', ends, s[closed]))
        return _scatter(text, closed, len(s))

    def _groups(self, b: pa.RecordBatch, s: np.ndarray, e: np.ndarray) -> list[pa.Array | None]:
        c = b.column
        step, layer = c("step").to_numpy().astype(np.int64), c("layer").to_numpy().astype(np.int64)
        block = self._code(c("role"), "role", lambda r: BLOCK_NAMES.get(r.split(".")[0], r.split(".")[0]))
        phase = self._code(c("phase"), "phase", str)
        vals = [
            s,
            e,
            pc.add(c("hbm_read_bytes"), c("hbm_write_bytes")).to_numpy(),
            c("task_dur_ns").to_numpy(),
        ]
        keys = {
            "step": ([step], phase),
            "layer": ([step, layer], block),
            "block": ([step, layer, block], block),
        }
        out: list[pa.Array | None] = []
        for level in LEVELS:
            cols, at = self._runs[level].feed(*keys[level], vals)
            out.append(_scatter(self._group_text(level, cols), at, len(s)) if len(at) else None)
        return out

    def _group_text(self, level: str, cols: list[np.ndarray]) -> pa.Array:
        """One string per completed group: its X slice on the Model track (+ counter samples)."""
        names = {k: {v: n for n, v in self._codes[k].items()} for k in self._codes}
        start, end, self._last_end[level] = _sequential(cols[-4], cols[-3], self._last_end[level])
        if level == "step":
            out = []
            for st, ph, a, z in zip(
                cols[0].tolist(), cols[1].tolist(), start.tolist(), end.tolist(), strict=True
            ):
                label = "prefill" if names["phase"][ph] == "prefill" else f"decode #{st}"
                out.append(_x(label, PID_MODEL, 1, a, z) + "".join(_counters([_us(z)], ["0.000"], ["0.000"])))
            return pa.array(out, pa.string())
        if level == "layer":
            label = [
                f'"layer {ly}"' if ly >= 0 else _js(names["role"][bk])
                for ly, bk in zip(*cols[1:3], strict=True)
            ]
            return _join(_x_vec(PID_MODEL, 2, pa.array(label, pa.string()), start, end))
        label = [_js(names["role"][bk]) for bk in cols[2].tolist()]
        span = (end - start).astype(np.float64)
        rate = np.where(span > 0, 1.0 / np.where(span > 0, span, 1.0), 0.0)
        gbps = np.round(cols[-2] * rate * 1000.0).astype(np.int64)  # bytes/ns = GB/s
        util = np.round(cols[-1] * rate * 100_000.0).astype(np.int64)
        counters = _counters(_fixed3(pa.array(start)), _fixed3(pa.array(gbps)), _fixed3(pa.array(util)))
        return _join(_x_vec(PID_MODEL, 3, pa.array(label, pa.string()), start, end) + counters)

    # -- close -----------------------------------------------------------------------------------------------
    def _finish(self, steps: pa.Table) -> None:
        if self._busy is not None:
            self._write(_x("Computing", PID_OVERLAP, 1, *self._busy))
        for level in LEVELS:
            cols = self._runs[level].flush()
            if cols is not None:
                self._write(_text(self._group_text(level, cols)))
        out = self._stream_meta(self._streams_seen)
        tid = self._host_tid + 1
        for r in steps.sort_by("step").to_pylist():
            (a,), (z,), self._last_end["host"] = _sequential(
                np.array([r["host_start_ns"]]), np.array([r["sync_end_ns"]]), self._last_end["host"]
            )
            out.append(_x(f"Step {r['step']} ({r['phase']})", PID_HOST, tid, int(a), int(z)))
            ov_end = int(min(a + max(r["host_overhead_ns"], 0), z))
            out += [_x("host overhead", PID_HOST, tid, int(a), ov_end)] if ov_end > a else []
            sync = max(r["device_end_ns"], ov_end)
            out += [_x("sync (D2H token)", PID_HOST, tid, sync, int(z))] if z > sync else []
        m = self.meta
        other = {
            "run_name": m.run_name,
            "device_name": m.device_name,
            "soc_version": m.soc_version,
            "execution_mode": m.execution_mode,
            "streams": sorted(self._streams),
            "host_tid": m.host_tid,
            "extra": m.extra,
            "schema_version": SCHEMA_VERSION,
            "generator": "atbprof",
            "ops": self._n_ops,
            "host_launches": self._n_launch,
        }
        tail = orjson.dumps(other, option=orjson.OPT_SORT_KEYS).decode()
        self._write("".join(out) + f'\n],"displayTimeUnit":"ns","otherData":{tail}}}\n')
