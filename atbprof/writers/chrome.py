"""Chrome Trace Event Format writer in msprof's trace_view layout (gzip, streamed, byte-reproducible).

pids: 1 `CANN` (host launches, step frames), 2 `Ascend Hardware` (a thread per stream; counters), 3
`Overlap Analysis` (Computing / Free), 4 `Model` (steps / layers / blocks); `ts`/`dur`: µs, 3 decimals (ns).
A chunk's text is one pyarrow `take` from a pool of strings (literals, lookup tables, escaped dictionary
values, casts) with an index matrix built in numpy. Events a group completes go just before the op that
completes it and the compressor gets fixed-size blocks, so the bytes do not depend on batching.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from isal import igzip

from atbprof.optable.schema import PIPES, SCHEMA_VERSION, check_table
from atbprof.writers.base import StagedFile, TraceMeta, atomic_path, guarded, op_arg_keys
from atbprof.writers.grouping import LEVELS, NO_END, BusyIntervals, ModelGroups, sequential
from atbprof.writers.ranks import (
    COLLECTIVE_FLOW_BASE,
    FLOW_MARKER,
    PID_DEVICE,
    PID_HOST,
    PID_MODEL,
    PID_OVERLAP,
    RankLayout,
    comm_rows,
    rank_flows,
)

__all__ = ["PID_DEVICE", "PID_HOST", "PID_MODEL", "PID_OVERLAP", "ChromeTraceWriter"]
# Process ids (writers/ranks.py): the device's is above every stream tid (stream 0 is 65536): a thread whose tid
# equals its pid is shown as the process's "main thread" in the Perfetto UI, which a stream is not.
STREAM0_TID = 65536
"""tid of stream 0 (Perfetto merges tid 0 into the process's main thread)."""
STATIC_KEYS = {"task_type": "Task Type", "op_type": "OP Type", "role": "role", "block_dim": "Block Dim"}
STATIC_KEYS |= {"input_shapes": "Input Shapes", "input_dtypes": "Input Data Types"}
STATIC_KEYS |= {"output_shapes": "Output Shapes", "output_dtypes": "Output Data Types", "bound": "bound"}
RATIO_KEYS = {p: {"mac": "aic_mac_ratio", "vec": "aiv_vec_ratio"}.get(p, f"{p}_ratio") for p in PIPES}
_CHUNK = 8192  # max rows per text pass: small text buffers (~1 KB/row) are reused by the allocator; big ones
# are returned to the OS and page-faulted in again (25% slower)
_GROUP_CHUNK = 1 << 16  # rows per pass for group / busy-interval texts
_GZ_BLOCK = 1 << 20  # bytes per compressor call
_SMALL = 1 << 16  # ints in [-1, _SMALL) come from lookup tables
Frag = tuple[list[str], np.ndarray]  # text per dictionary value, row indices


def _rank_of(batch: pa.RecordBatch) -> int:
    """The rank of a batch's rows (one rank per batch, as runs stream them; no rank column or null: 0)."""
    if "rank" not in batch.schema.names:
        return 0
    value = batch.column("rank")[0].as_py()
    return 0 if value is None else int(value)


def _js(value: object) -> str:
    return orjson.dumps(value).decode()


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _x(name: str, pid: int, tid: int, start: int, end: int) -> str:
    span = f'"ts":{_us(start)},"dur":{_us(end - start)}'
    return f',\n{{"name":{_js(name)},"pid":{pid},"tid":{tid},{span},"ph":"X"}}'


def _kv(key: str, value: object) -> str:
    return f',"{key}":{_js(value)}'


def _ratio_table(key: str) -> list[str]:
    return [f"{key}{_us(i)}" for i in range(1001)]


def _meta(kind: str, pid: int, tid: int | None, value: object) -> str:
    t = "" if tid is None else f',"tid":{tid}'
    key = "labels" if kind == "process_labels" else "sort_index" if kind.endswith("sort_index") else "name"
    return f',\n{{"name":"{kind}","ph":"M","pid":{pid}{t},"args":{{"{key}":{_js(value)}}}}}'


def _text(arr: pa.Array) -> memoryview:
    """The concatenated text of a string array: its data buffer between the first and the last offset."""
    bufs = arr.buffers()
    if len(arr) == 0 or bufs[2] is None:
        return memoryview(b"")
    off = np.frombuffer(bufs[1], dtype=np.int32, count=len(arr) + 1, offset=arr.offset * 4)
    return memoryview(bufs[2])[int(off[0]) : int(off[-1])]


def _combine(frags: list[Frag], suf: str = "") -> list[tuple[pa.Array, np.ndarray]]:
    """Adjacent dictionary fragments as few pieces: the text of each distinct combination, built once."""
    out: list[tuple[pa.Array, np.ndarray]] = []
    i = 0
    while i < len(frags):
        key, radix, group = np.zeros(len(frags[i][1]), np.int64), 1, []
        while i < len(frags) and radix * len(frags[i][0]) < 1 << 62:
            radix *= len(frags[i][0])
            key *= len(frags[i][0])
            key += frags[i][1]
            group.append(frags[i][0])
            i += 1
        enc = pc.dictionary_encode(pa.array(key))
        ixs, rem = [], enc.dictionary.to_numpy().copy()
        for texts in reversed(group):
            ixs.append((rem % len(texts)).tolist())
            rem //= len(texts)
        end = suf if i == len(frags) else ""
        texts = ["".join(map(list.__getitem__, group, ix)) + end for ix in zip(*reversed(ixs), strict=True)]
        out.append((pa.array(texts, pa.string()), enc.indices.to_numpy()))
    return out


class _Static:
    """Lookup tables and literals shared by a writer's assemblers (chunk 0 of every `take`)."""

    def __init__(self) -> None:
        self.parts: list[pa.Array] = []
        self.index: dict[tuple[Any, ...], int] = {}
        self.size, self.array = 0, None

    def get(self, key: tuple[Any, ...], build: Callable[[], list[str]]) -> int:
        """Offset of table `key` in the pool (built on first use)."""
        if key not in self.index:
            self.index[key], arr, self.array = self.size, pa.array(build(), pa.string()), None
            self.parts.append(arr)
            self.size += len(arr)
        return self.index[key]

    def pool(self) -> pa.Array:
        if self.array is None:
            self.array = pa.concat_arrays(self.parts)
        return self.array


class _Asm:
    """Rows of text = pieces concatenated per row: one `take` from [static tables, dynamic columns]."""

    def __init__(self, st: _Static, n: int, valid: np.ndarray | None = None) -> None:
        self.st, self.n, self.valid = st, n, valid
        self.dyn: list[pa.Array] = []
        self.dsize = 0
        self.cols: list[tuple[bool, Any, Any, str | None]] = []  # dynamic?, index, valid, literal
        self.memo: dict[Any, tuple[np.ndarray, ...]] = {}  # casts / divisions reused (keeps the key alive)

    def lit(self, s: str, masked: bool = False) -> None:
        """A literal piece (merged into a preceding one); `masked`: empty on rows where `valid` is False."""
        valid = self.valid if masked else None
        prev = self.cols[-1][3] if self.cols and self.cols[-1][2] is valid else None
        if prev is not None:
            s = prev + s
            self.cols.pop()
        self.cols.append((False, self.st.get(("lit", s), lambda: [s]), valid, s))

    def table(self, key: tuple[Any, ...], build: Callable[[], list[str]], idx: Any, valid: Any = None) -> None:
        self.cols.append((False, self.st.get(key, build) + idx, valid, None))

    def add(self, arr: pa.Array, idx: np.ndarray | None = None, valid: np.ndarray | None = None) -> None:
        """arr[idx[row]] per row (idx None: arr is row-aligned); empty where `valid` is False."""
        self.cols.append((True, self.dsize + (np.arange(self.n) if idx is None else idx), valid, None))
        self.dyn.append(arr)
        self.dsize += len(arr)

    def int(self, v: np.ndarray, pre: str = "", suf: str = "", valid: np.ndarray | None = None) -> None:
        """Decimal text of int64 `v` between `pre` and `suf`: small values by table lookup, others cast."""
        if len(v) and v.min() >= -1 and v.max() < _SMALL:
            size = min(_SMALL, 1 << int(v.max() + 2).bit_length())
            build = lambda: [f"{pre}{i - 1}{suf}" for i in range(size + 1)]  # noqa: E731
            self.table(("int", pre, suf, size), build, v + 1, valid)
            return
        if pre:
            self.lit(pre, valid is not None)
        if id(v) not in self.memo:
            self.memo[id(v)] = (v, pc.cast(pa.array(v), pa.string()))
        self.add(self.memo[id(v)][1], None, valid)
        if suf:
            self.lit(suf, valid is not None)

    def fixed3(self, v: np.ndarray, suf: str = "", valid: np.ndarray | None = None, pre: str = "") -> None:
        """`v` (non-negative thousandths, e.g. ns) as "<v // 1000>.<3 digits>" between `pre` and `suf`."""
        if ("q", id(v)) not in self.memo:
            self.memo["q", id(v)] = (v, v // 1000, v % 1000)
        _, q, r = self.memo["q", id(v)]
        self.int(q, pre, "", valid)
        self.table(("frac", suf), lambda: [f".{i:03d}{suf}" for i in range(1000)], r, valid)

    def text(self) -> pa.Array:
        """One string per row."""
        empty, static = self.st.get(("lit", ""), lambda: [""]), self.st.pool()
        perm = np.empty((self.n, len(self.cols)), np.int32)
        for j, (dyn, col, valid, _) in enumerate(self.cols):
            if valid is not None:
                perm[:, j] = np.where(valid, col + len(static) if dyn else col, empty)
            elif dyn:
                np.add(col, len(static), out=perm[:, j], casting="unsafe")
            else:
                perm[:, j] = col
        pieces = pa.chunked_array([static, *self.dyn], pa.string()).take(pa.array(perm.reshape(-1)))
        pieces = pieces.chunk(0) if pieces.num_chunks == 1 else pieces.combine_chunks()
        _, offsets, data = pieces.buffers()
        k = len(self.cols)
        rows = np.frombuffer(offsets, np.int32, self.n * k + 1, pieces.offset * 4)[::k].copy()
        return pa.Array.from_buffers(pa.string(), self.n, [None, pa.py_buffer(rows), data])


class _Rank:
    """One traced rank's processes and what its events need carried from batch to batch."""

    def __init__(self, layout: RankLayout) -> None:
        self.layout = layout
        self.streams: set[int] = set()  # streams whose thread metadata is written
        self.streams_seen: set[int] = set()
        self.busy = BusyIntervals()
        self.model = ModelGroups()
        self.host_end = NO_END
        self.util = f'}}}},\n{{"name":"AI Core utilization","pid":{layout.device},"ts":'


class ChromeTraceWriter(StagedFile):
    """RunWriter for `trace.json.gz` (Chrome JSON, msprof layout). `abort()` discards a half-written file."""

    filename = "trace.json.gz"

    def __init__(self, compresslevel: int = 1) -> None:
        if not 1 <= compresslevel <= 3:
            raise ValueError(f"compresslevel must be 1..3, got {compresslevel}")
        self.compresslevel = compresslevel
        self._stack: ExitStack | None = None  # temp file (renamed on success), raw file, gzip stream

    @guarded
    def open(self, directory: Path, meta: TraceMeta) -> None:
        if meta.host_tid <= 0:
            raise ValueError(f"host_tid must be a positive integer, got {meta.host_tid}")
        self.meta, self._host_tid, self._st = meta, meta.host_tid, _Static()
        multi = len(meta.ranks) > 1
        self._ranks = {r: _Rank(RankLayout(r, multi)) for r in meta.ranks}
        self._comm: list[pa.Table] = []  # the HCCL tasks of every traced rank, for the flows between ranks
        self._frags: dict[str, tuple[pa.Array, list[str]]] = {}
        self._values: dict[str, dict[Any, str]] = {}
        self._n_ops = self._n_launch = 0
        self._pending = bytearray()
        self._stack = ExitStack()
        tmp = self._stack.enter_context(atomic_path(Path(directory) / self.filename))
        raw = self._stack.enter_context(open(tmp, "wb"))  # noqa: SIM115 - the stack closes it
        self._gz = self._stack.enter_context(igzip.IGzipFile("", "wb", self.compresslevel, raw, mtime=0))
        self._write(self._header())

    @guarded
    def write_batch(self, batch: pa.RecordBatch) -> None:
        check_table(batch.schema, "op batch")
        if not batch.num_rows:
            return
        rank = _rank_of(batch)
        if rank not in self._ranks:
            raise ValueError(f"op batch of rank {rank}: the trace holds ranks {sorted(self._ranks)}")
        st = self._ranks[rank]
        if len(self._ranks) > 1 and (rows := comm_rows(batch)) is not None:
            self._comm.append(rows)
        for off in range(0, batch.num_rows, _GROUP_CHUNK):  # group texts per 64k rows, op texts per <= 8k
            b = batch.slice(off, _GROUP_CHUNK)
            s, dur = b.column("task_start_ns").to_numpy(), b.column("task_dur_ns").to_numpy()
            if min(s.min(), dur.min()) < 0:
                raise ValueError(f"op batch at op_index {b.column('op_index')[0]}: negative task time")
            e = s + dur
            prefix = [self._overlap(st, s, e), *self._groups(st, b, s, e)]
            size = -(-b.num_rows // -(-b.num_rows // _CHUNK))  # even chunks of <= _CHUNK rows
            for lo in range(0, b.num_rows, size):
                self._chunk(st, b.slice(lo, size), lo, prefix)

    @guarded
    def close(self, steps: pa.Table) -> None:
        self._finish(steps)
        self._gz.write(self._pending)
        stack, self._stack = self._stack, None
        assert stack is not None
        stack.close()

    def _rank_flows(self) -> list[str]:
        """Flows joining the traced ranks' HCCL tasks (writers/ranks.py), after every rank's ops: a zero-length
        marker inside each of the two tasks, joined by a v2 flow (`bind_id`). Perfetto orients a v1 (s/f) flow
        by its slices' starts, which turns around a Receive that began waiting before its Send."""
        if not self._comm:
            return []
        flows = rank_flows(pa.concat_tables(self._comm), self.meta.tp, self.meta.pp)
        out = []
        for k, f in enumerate(flows):
            head = f',\n{{"name":{_js(f.name)},"cat":"HCCL","ph":"X","dur":0,"bind_id":"0x{COLLECTIVE_FLOW_BASE + k:x}"'
            for rank, stream, ts, side in (
                (f.src_rank, f.src_stream, f.src_ts, "out"),
                (f.dst_rank, f.dst_stream, f.dst_ts, "in"),
            ):
                lay = self._ranks[rank].layout
                at = f'"pid":{lay.device},"tid":{lay.tid(stream or STREAM0_TID)},"ts":{_us(ts)}'
                out.append(f'{head},{at},"flow_{side}":true,"args":{{"Task Type":"{FLOW_MARKER}"}}}}')
        return out

    def _write(self, data: str | memoryview) -> None:
        """Feed the compressor whole _GZ_BLOCK blocks only: the output does not depend on call boundaries."""
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
        first = next(iter(self._ranks.values())).layout
        out = [
            f'{{"traceEvents":[\n{{"name":"process_name","ph":"M","pid":{first.host},"args":{{"name":{_js(first.name("CANN"))}}}}}'
        ]
        for k, st in enumerate(self._ranks.values()):
            out += self._rank_header(st, skip_host_name=k == 0)
        return "".join(out)

    def _rank_header(self, st: _Rank, skip_host_name: bool) -> list[str]:
        tid, lay = self._host_tid, st.layout
        procs = [
            (lay.host, "CANN", "CPU", [(tid + 1, "Host steps", 0), (tid, f"Thread {tid}", 1)]),
            (lay.device, "Ascend Hardware", "NPU", []),
            (lay.overlap, "Overlap Analysis", "NPU", [(1, "Computing", 1), (2, "Free", 2)]),
            (lay.model, "Model", "atbprof", [(1, "Steps", 1), (2, "Layers", 2), (3, "Blocks", 3)]),
        ]
        out = []
        for pid, name, label, threads in procs:
            out += (
                [_meta("process_name", pid, None, lay.name(name))] if not (skip_host_name and pid == lay.host) else []
            )
            out += [_meta("process_labels", pid, None, lay.label(label))]
            out += [_meta("process_sort_index", pid, None, lay.sort_index(pid))]
            for tid, tname, sort in threads:
                t = lay.tid(tid)
                out += [_meta("thread_name", pid, t, tname), _meta("thread_sort_index", pid, t, sort)]
        return out + self._stream_meta(st, set(self.meta.streams))

    def _stream_meta(self, st: _Rank, streams: set[int]) -> list[str]:
        out = []
        for sid in sorted(streams - st.streams):
            tid = st.layout.tid(sid or STREAM0_TID)
            out += [
                _meta("thread_name", st.layout.device, tid, f"Stream {sid}"),
                _meta("thread_sort_index", st.layout.device, tid, sid),
            ]
        st.streams |= streams
        return out

    def _frag(self, col: Any, key: str, fmt: Callable[[Any], str]) -> Frag:
        """Text per dictionary value (each escaped once) and the row indices into it."""
        col = col if pa.types.is_dictionary(col.type) else pc.dictionary_encode(col)
        d, hit = col.dictionary, self._frags.get(key)
        if hit is None or not (hit[0] is d or hit[0].equals(d)):
            known = self._values.setdefault(key, {})  # value -> text across dictionaries (bounded)
            if len(known) > _SMALL:
                known.clear()
            hit = self._frags[key] = (d, [known.get(v) or known.setdefault(v, fmt(v)) for v in d.to_pylist()])
        ix = col.indices
        return hit[1], ix.to_numpy(zero_copy_only=False)

    def _chunk(self, st: _Rank, b: pa.RecordBatch, off: int, prefix: list[tuple[pa.Array, np.ndarray]]) -> None:
        """Text of rows [off, off + len(b)) of a group chunk: events completed there, host X + s, device X, f."""
        c = b.column
        s, dur, stream = (c(k).to_numpy() for k in ("task_start_ns", "task_dur_ns", "stream_id"))
        h = c("host_launch_start_ns")
        v = None if h.null_count in (0, len(h)) else pc.is_valid(h).to_numpy(zero_copy_only=False)
        hs, hd = (pc.fill_null(c(k), 0).to_numpy() for k in ("host_launch_start_ns", "host_launch_dur_ns"))
        if min(stream.min(), hs.min(), hd.min()) < 0:
            raise ValueError(f"op batch at op_index {c('op_index')[0]}: negative launch time or stream id")
        st.streams_seen.update(pc.unique(c("stream_id")).to_pylist())
        lay = st.layout
        a = _Asm(self._st, b.num_rows, v)
        for text, at in prefix:
            i, j = np.searchsorted(at, [off, off + b.num_rows])
            if j > i:
                idx, hit = np.zeros(len(s), np.int64), np.zeros(len(s), bool)
                idx[at[i:j] - off], hit[at[i:j] - off] = np.arange(i, j), True
                a.add(text, idx, hit)
        conn = pc.cast(pc.add(c("op_index"), 1 + lay.flow_base), pa.string())
        sid = np.where(stream == 0, STREAM0_TID, stream) + lay.tid(0)
        host_tid = lay.tid(self._host_tid)
        if h.null_count < len(h):  # host launch + flow start
            a.fixed3(hs, ',"dur":', v, f',\n{{"name":"Node@launch","pid":{lay.host},"tid":{host_tid},"ts":')
            a.fixed3(hd, ',"ph":"X","args":{"item_id":', v)
            name, idx = self._frag(c("op_name"), "hname", lambda x: f'{_js(x)},"level":"node","connection_id":')
            a.add(pa.array(name, pa.string()), idx, v)
            a.add(conn, None, v)
            flow = f'}}}},\n{{"name":"HostToDevice","pid":{lay.host},"tid":{host_tid},"ts":'
            a.fixed3(hs, ',"ph":"s","cat":"HostToDevice","id":', v, flow)
            a.add(conn, None, v)
            a.lit("}", True)
        name_sid = [self._frag(c("op_name"), "dname", lambda x: f',\n{{"name":{_js(x)}')]
        name_sid.append(self._frag(pa.array(sid), f"sid{lay.rank}", lambda x: f',"pid":{lay.device},"tid":{x},"ts":'))
        a.add(*_combine(name_sid)[0])
        a.fixed3(s, ',"dur":')
        a.fixed3(dur, ',"ph":"X","cat":"Task","args":{"Model Id":4294967295,"Physic Stream Id":')
        a.int(stream, "", ',"Task Id":')
        a.int(c("task_id").to_numpy(), "", ',"Batch Id":0,"Subtask Id":0,"connection_id":')
        a.add(conn)
        a.int(c("layer").to_numpy(), ',"layer":')
        a.int(c("step").to_numpy(), ',"step":', ',"hbm_bytes":')
        a.int(c("hbm_read_bytes").to_numpy() + c("hbm_write_bytes").to_numpy())
        a.int(c("flops").to_numpy(), ',"flops":')
        x = np.empty((len(PIPES), b.num_rows))
        for i, p in enumerate(PIPES):
            x[i] = c(f"{p}_ratio").to_numpy()
        x *= 1000.0
        with np.errstate(invalid="ignore"):  # NaN -> int64 min -> the slow path below
            milli = np.rint(x, out=x).astype(np.int64)
        fast = (milli.min(axis=1) >= 0) & (milli.max(axis=1) <= 1000)
        for p, m, xp, ok in zip(PIPES, milli, x, fast, strict=True):
            key = f',"{RATIO_KEYS[p]}":'
            if ok:
                a.table(("ratio", key), partial(_ratio_table, key), m)
            else:
                a.fixed3(np.clip(np.nan_to_num(xp), 0, 1 << 40).astype(np.int64), "", None, key)
        frags = [self._frag(c(k), k, partial(_kv, STATIC_KEYS[k])) for k in STATIC_KEYS]
        fused = pc.binary_join(c("fused_from"), "+")
        frags.append(self._frag(fused, "fused", lambda x: f',"fused_from":{_js(x)}' if x else ""))
        if self.meta.op_args:  # numerics figures of the fused kernel types (run --numerics)
            args = self.meta.op_args
            text = lambda k: "".join(f",{_js(n)}:{_js(v)}" for n, v in args.get(k, {}).items())  # noqa: E731
            frags.append(self._frag(op_arg_keys(b), "numerics", text))
        for piece in _combine(frags, "}}"):
            a.add(*piece)
        if h.null_count < len(h):  # flow end
            a.int(sid, f',\n{{"name":"HostToDevice","pid":{lay.device},"tid":', ',"ts":', v)
            a.fixed3(s, ',"ph":"f","bp":"e","cat":"HostToDevice","id":', v)
            a.add(conn, None, v)
            a.lit("}", True)
        self._write(_text(a.text()))
        self._n_ops += b.num_rows
        self._n_launch += b.num_rows - h.null_count

    def _overlap(self, st: _Rank, s: np.ndarray, e: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        """Merge busy intervals (touching tasks coalesce): closed Computing intervals and the Free gaps."""
        closed, starts, ends, nxt = st.busy.feed(s, e)
        if len(closed) == 0:
            return pa.array([], pa.string()), closed
        a = _Asm(self._st, len(closed))
        for tid, name, lo, hi in ((1, "Computing", starts, ends), (2, "Free", ends, nxt)):
            a.fixed3(
                lo, ',"dur":', None, f',\n{{"name":"{name}","pid":{st.layout.overlap},"tid":{st.layout.tid(tid)},"ts":'
            )
            a.fixed3(hi - lo, ',"ph":"X"}')
        return a.text(), closed

    def _groups(self, st: _Rank, b: pa.RecordBatch, s: np.ndarray, e: np.ndarray) -> list[tuple[pa.Array, np.ndarray]]:
        return [
            (self._group_text(st, level, cols) if len(at) else pa.array([], pa.string()), at)
            for level, cols, at in st.model.feed(b, s, e)
        ]

    def _group_text(self, st: _Rank, level: str, cols: list[np.ndarray]) -> pa.Array:
        """One string per completed group: its slice on the Model track, with counter samples."""
        start, end = st.model.spans(level, cols)
        a = _Asm(self._st, len(start))
        if level == "step":  # few
            a.add(pa.array([f',\n{{"name":{_js(x)}' for x in st.model.step_labels(cols)], pa.string()))
        else:  # "layer <l>" (layer >= 0) or the block name (attention, ffn, head, ...)
            names = tuple(_js(n) for n in st.model.block_names)
            is_layer = (cols[1] >= 0) & (level == "layer")
            a.int(cols[1], ',\n{"name":"layer ', '"', is_layer)
            a.table(("label", *names), lambda: [f',\n{{"name":{n}' for n in names], cols[-5], ~is_layer)
        a.fixed3(
            start, ',"dur":', None, f',"pid":{st.layout.model},"tid":{st.layout.tid(LEVELS.index(level) + 1)},"ts":'
        )
        a.fixed3(end - start, ',"ph":"X"}')
        if level != "layer":  # HBM GB/s (= bytes/ns) and AI Core busy % at block starts; 0 at step ends
            span = (end - start).astype(np.float64)
            rate = np.where(span > 0, 1.0 / np.where(span > 0, span, 1.0), 0.0) * (level == "block")
            ts = end if level == "step" else start
            hbm = f',\n{{"name":"HBM bandwidth","pid":{st.layout.device},"ts":'
            a.fixed3(ts, ',"ph":"C","args":{"GB/s":', None, hbm)
            a.fixed3(np.rint(cols[-2] * rate * 1e3).astype(np.int64), st.util)
            a.fixed3(ts, ',"ph":"C","args":{"%":')
            a.fixed3(np.rint(cols[-1] * rate * 1e5).astype(np.int64), "}}")
        return a.text()

    def _finish(self, steps: pa.Table) -> None:
        out: list[str] = []
        for st in self._ranks.values():
            if st.busy.open is not None:
                self._write(_x("Computing", st.layout.overlap, st.layout.tid(1), *st.busy.open))
            for level, cols in st.model.flush():
                self._write(_text(self._group_text(st, level, cols)))
            out += self._stream_meta(st, st.streams_seen)
        # the host step frames (the steps table): the first traced rank's host
        st = next(iter(self._ranks.values()))
        tid = st.layout.tid(self._host_tid + 1)
        host = st.layout.host
        for r in steps.sort_by("step").to_pylist():
            lo, hi = np.array([r["host_start_ns"]]), np.array([r["sync_end_ns"]])
            (a,), (z,), st.host_end = sequential(lo, hi, st.host_end)
            a, z = int(a), int(z)
            out.append(_x(f"Step {r['step']} ({r['phase']})", host, tid, a, z))
            ov_end = min(a + max(r["host_overhead_ns"], 0), z)
            out += [_x("host overhead", host, tid, a, ov_end)] if ov_end > a else []
            sync = max(r["device_end_ns"], ov_end)
            out += [_x("sync (D2H token)", host, tid, sync, z)] if z > sync else []
        out += self._rank_flows()
        m = self.meta
        other: dict[str, Any] = {"run_name": m.run_name, "device_name": m.device_name, "extra": m.extra}
        other |= {"soc_version": m.soc_version, "execution_mode": m.execution_mode, "host_tid": m.host_tid}
        streams = sorted(set().union(*(st.streams for st in self._ranks.values())))
        other |= {"streams": streams, "schema_version": SCHEMA_VERSION, "generator": "atbprof"}
        other |= {"ops": self._n_ops, "host_launches": self._n_launch}
        if len(self._ranks) > 1:
            other |= {"ranks": sorted(self._ranks)}
        tail = orjson.dumps(other, option=orjson.OPT_SORT_KEYS).decode()
        self._write("".join(out) + f'\n],"displayTimeUnit":"ns","otherData":{tail}}}\n')
