"""Perfetto protobuf trace writer (TrackEvent): the Chrome JSON trace's content as a native track hierarchy.

Tracks (uuid; explicit child ordering): process `CANN` (1, pid 1) with thread tracks "Host steps" (step frames)
and "Thread <host_tid>" (`Node@launch` slices, flow sources); `Ascend Hardware` (2, pid 65537 as in the JSON
trace) with a thread track "Stream <sid>" per stream (uuid 64 + sid, tid sid or 65536) and below it the counters
"AI Core utilization %" and "HBM bandwidth GB/s"; `Overlap Analysis` (3): thread tracks Computing, Free (tids 1,
2); `Model` (4): thread tracks Steps, Layers, Blocks (tids 1-3, in that order). Slices are BEGIN/END pairs with
integer ns timestamps relative to the run start (no µs rounding); a launch's `flow_ids` = op_index + 1 = its
device slice's `terminating_flow_ids`. Event names, the category, annotation names and string values are
interned on sequence 1. Device slices carry the JSON writer's args as debug annotations.

The hot path builds packet bytes with numpy (`protowire`), a chunk of ops at a time; the generated classes
encode only the rare packets (track descriptors, interned data). The packets a group or busy interval completes
(and the interned data first used there) go just before the op that completes it, so the bytes do not depend on
batching. Trace processors sort by timestamp; file order only matters among equal timestamps (ends first).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackDescriptor

from atbprof.optable.schema import PIPES, check_table
from atbprof.writers import protowire as pw
from atbprof.writers.base import StagedFile, TraceMeta, atomic_path, guarded, op_arg_keys
from atbprof.writers.chrome import RATIO_KEYS, STATIC_KEYS, STREAM0_TID
from atbprof.writers.grouping import LEVELS, NO_END, BusyIntervals, ModelGroups, sequential
from atbprof.writers.ranks import COLLECTIVE_FLOW_BASE, RankLayout, comm_rows, rank_flows

SEQ = 1  # trusted_packet_sequence_id of every packet
CLEARED, NEEDS_STATE = 1, 2  # TracePacket.sequence_flags
BEGIN, END, INSTANT, COUNTER = 1, 2, 3, 4  # TrackEvent.type
U_LAUNCH, U_HOST_STEPS, U_HBM, U_UTIL = 11, 12, 21, 22  # track uuids; process tracks: uuid = pid (1-4)
U_TRACK = {"Computing": 31, "Free": 32, "step": 41, "layer": 42, "block": 43}
U_STREAM0 = 64  # + stream id
RANK_UUID_SHIFT = 32  # rank r's tracks: the uuids above + (r << 32)
NAME, CAT, ANN, STR = "event_names", "event_categories", "debug_annotation_names", "debug_annotation_string_values"
FIXED_NAMES = ("Node@launch", "Computing", "Free", "host overhead", "sync (D2H token)")
STR_KEYS = {k: v for k, v in STATIC_KEYS.items() if k != "block_dim"}
INT_KEYS = {"task_id": "Task Id", "layer": "layer", "step": "step", "block_dim": "Block Dim"}
INT_KEYS |= {"hbm_bytes": "hbm_bytes", "flops": "flops"}
ANN_KEYS = (*INT_KEYS.values(), *RATIO_KEYS.values(), *STR_KEYS.values(), "fused_from", "item_id")
_CHUNK = 1 << 15  # ops per encoding pass
_DENSE = 0.25  # busy intervals closed per op above which their packets are encoded as (masked) parts of the ops


def _wrap(packet: TracePacket) -> bytes:
    """One packet as a `Trace.packet` field."""
    raw = packet.SerializeToString()
    return pw.key(1, pw.LEN) + pw.varint(len(raw)) + raw


def _descriptor(uuid: int, name: str, parent: int | None, rank: int, **kind: Any) -> bytes:
    packet = TracePacket()
    d = packet.track_descriptor
    d.uuid, d.sibling_order_rank = uuid, rank
    if parent is not None:
        d.parent_uuid = parent
    if "tid" in kind:
        d.thread.pid, d.thread.tid, d.thread.thread_name = kind["pid"], kind["tid"], name
    elif "pid" in kind:
        d.process.pid, d.process.process_name = kind["pid"], name
        d.process.process_labels.append(kind["label"])
        d.child_ordering = TrackDescriptor.ChildTracksOrdering.EXPLICIT
    else:
        d.name = name
    if "unit" in kind:
        d.counter.unit_name = kind["unit"]
    return _wrap(packet)


def _splice(ops: np.ndarray, row_sizes: np.ndarray, extras: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> Any:
    """`ops` (rows back to back) with each extra item's bytes inserted before the row at its position; items at
    one position keep the order of `extras`."""
    pos, data, sizes = (np.concatenate([x[i] for x in extras]) for i in range(3))
    if len(pos) == 0:
        return ops
    order = np.argsort(pos, kind="stable")
    so = sizes[order]
    src = (np.cumsum(sizes) - sizes)[order] - (np.cumsum(so) - so)
    values = data[np.repeat(src, so) + np.arange(int(so.sum()))]
    row_start = np.concatenate(([0], np.cumsum(row_sizes)[:-1]))
    return np.insert(ops, np.repeat(row_start[pos[order]], so), values)


class _Interner:
    """iids per kind, assigned in (row, column) order of first use, so chunking does not change them."""

    def __init__(self) -> None:
        self.ids: dict[tuple[str, str], int] = {}
        self.count = dict.fromkeys((NAME, CAT, ANN, STR), 0)
        self.new: list[tuple[int, str, int, str]] = []  # row, kind, iid, text: not written yet
        self.pending: list[tuple[int, int, str, str, np.ndarray | None, int]] = []  # row, order, kind, text, lut, i
        self._luts: dict[str, tuple[pa.Array, np.ndarray]] = {}

    def get(self, kind: str, text: str, row: int = 0) -> int:
        iid = self.ids.get((kind, text))
        if iid is None:
            iid = self.ids[kind, text] = self.count[kind] = self.count[kind] + 1
            self.new.append((row, kind, iid, text))
        return iid

    def queue(self, row: int, order: int, kind: str, text: str) -> None:
        if (kind, text) not in self.ids:
            self.pending.append((row, order, kind, text, None, 0))

    def column(self, key: str, kind: str, col: Any, order: int, skip: str | None = None) -> Callable[[], np.ndarray]:
        """Queue the entries first used in `col`; the thunk gives the iid per row (-1: `skip`) after `assign`."""
        col = col if pa.types.is_dictionary(col.type) else pc.dictionary_encode(col)
        d, hit = col.dictionary, self._luts.get(key)
        if hit is None or not (hit[0] is d or hit[0].equals(d)):
            lut = np.array([-1 if v == skip else self.ids.get((kind, v), 0) for v in d.to_pylist()], np.int64)
            hit = self._luts[key] = (d, lut)
        lut, ix = hit[1], col.indices.to_numpy(zero_copy_only=False)
        if not lut.all() and (np.bincount(ix, minlength=len(lut)).astype(bool) & (lut == 0)).any():
            used, first = np.unique(ix, return_index=True)
            for i, row in zip(used.tolist(), first.tolist(), strict=True):
                if lut[i] == 0:
                    self.pending.append((row, order, kind, d[i].as_py(), lut, i))
        return lambda: lut[ix]

    def assign(self) -> None:
        for row, _, kind, text, lut, i in sorted(self.pending, key=lambda p: p[:2]):
            iid = self.get(kind, text, row)
            if lut is not None:
                lut[i] = iid
        self.pending.clear()

    def packets(self, flags: int = NEEDS_STATE) -> dict[int, bytes]:
        """An interned-data packet per row that first uses new entries."""
        out: dict[int, TracePacket] = {}
        for row, kind, iid, text in self.new:
            p = out.setdefault(row, TracePacket(trusted_packet_sequence_id=SEQ, sequence_flags=flags))
            entries = getattr(p.interned_data, kind)
            entries.add(iid=iid, **({"str": text.encode()} if kind == STR else {"name": text}))
        self.new.clear()
        return {row: _wrap(p) for row, p in out.items()}


class _Rank:
    """One traced rank's tracks (uuids offset by its rank) and what its events carry from batch to batch."""

    def __init__(self, layout: RankLayout) -> None:
        self.layout = layout
        self.off = layout.rank << RANK_UUID_SHIFT
        self.streams: set[int] = set()
        self.busy = BusyIntervals()
        self.model = ModelGroups()
        self.host_end = NO_END

    def u(self, uuid: Any) -> Any:
        return uuid + self.off


class PerfettoTraceWriter(StagedFile):
    """RunWriter for `trace.pftrace` (Perfetto TrackEvent protobuf). `abort()` discards a half-written file."""

    filename = "trace.pftrace"

    def __init__(self) -> None:
        self._stack: ExitStack | None = None
        self.packets = 0  # TracePackets written so far

    @guarded
    def open(self, directory: Path, meta: TraceMeta) -> None:
        if meta.host_tid <= 0:
            raise ValueError(f"host_tid must be a positive integer, got {meta.host_tid}")
        self.meta, self.packets, self._names = meta, 0, _Interner()
        multi = len(meta.ranks) > 1
        self._ranks = {r: _Rank(RankLayout(r, multi)) for r in meta.ranks}
        self._comm: list[pa.Table] = []
        self._stack = ExitStack()
        tmp = self._stack.enter_context(atomic_path(Path(directory) / self.filename))
        self._fh: IO[bytes] = self._stack.enter_context(open(tmp, "wb"))  # noqa: SIM115 - the stack closes it
        self._num_keys = sorted({k for args in meta.op_args.values() for k in args})
        for kind, texts in ((NAME, FIXED_NAMES), (CAT, ("Task",)), (ANN, (*ANN_KEYS, *self._num_keys))):
            for text in texts:
                self._names.get(kind, text)
        out = [self._names.packets(CLEARED)[0]]
        for st in self._ranks.values():
            out += self._rank_descriptors(st)
        self.packets += len(out)
        self._fh.write(b"".join(out))

    @guarded
    def write_batch(self, batch: pa.RecordBatch) -> None:
        check_table(batch.schema, "op batch")
        if not batch.num_rows:
            return
        rank = 0 if "rank" not in batch.schema.names else int(batch.column("rank")[0].as_py() or 0)
        if rank not in self._ranks:
            raise ValueError(f"op batch of rank {rank}: the trace holds ranks {sorted(self._ranks)}")
        if len(self._ranks) > 1 and (rows := comm_rows(batch)) is not None:
            self._comm.append(rows)
        for off in range(0, batch.num_rows, _CHUNK):
            self._chunk(self._ranks[rank], batch.slice(off, _CHUNK))

    @guarded
    def close(self, steps: pa.Table) -> None:
        pieces: list[tuple[pw.Msg, int]] = []
        for st in self._ranks.values():
            if st.busy.open is not None:
                a, z = (np.array([v]) for v in st.busy.open)
                pieces.append((self._slice(1, st.u(U_TRACK["Computing"]), self._fixed("Computing"), a, z), 1))
            for level, cols in st.model.flush():
                start, end, labels = self._group_spans(st, level, cols)
                for text in labels:
                    self._names.get(NAME, text)
                pieces.append((self._group_msg(st, level, cols, start, end, labels), len(start)))
        pieces.append(self._host_frames(next(iter(self._ranks.values())), steps.sort_by("step")))
        pieces.append(self._rank_flows())
        interned = self._names.packets()
        self.packets += len(interned)
        self._fh.write(b"".join(interned.values()))
        for msg, rows in pieces:
            if rows:
                self._fh.write(pw.encode(msg, rows)[0].data)
        stack, self._stack = self._stack, None
        assert stack is not None
        stack.close()

    # -- packets -------------------------------------------------------------------------------------------

    def _rank_descriptors(self, st: _Rank) -> list[bytes]:
        # streams and Model levels are thread tracks, as in the JSON trace: the Perfetto UI (v52) orders a
        # process's thread tracks by tid and puts its counters below them, but orders other tracks by name
        lay, u = st.layout, st.u
        procs = (
            (1, "CANN", "CPU", lay.host),
            (2, "Ascend Hardware", "NPU", lay.device),
            (3, "Overlap Analysis", "NPU", lay.overlap),
            (4, "Model", "atbprof", lay.model),
        )
        out = [
            _descriptor(
                u(uuid),
                lay.name(name),
                None,
                uuid if not lay.multi else lay.sort_index(pid),
                pid=pid,
                label=lay.label(label),
            )
            for uuid, name, label, pid in procs
        ]
        h = self.meta.host_tid
        out.append(_descriptor(u(U_HOST_STEPS), "Host steps", u(1), 0, pid=lay.host, tid=lay.tid(h + 1)))
        out.append(_descriptor(u(U_LAUNCH), f"Thread {h}", u(1), 1, pid=lay.host, tid=lay.tid(h)))
        out.append(_descriptor(u(U_UTIL), "AI Core utilization %", u(2), 1 << 20, unit="%"))  # below the streams
        out.append(_descriptor(u(U_HBM), "HBM bandwidth GB/s", u(2), (1 << 20) + 1, unit="GB/s"))
        out += [
            _descriptor(u(U_TRACK[n]), n, u(3), i, pid=lay.overlap, tid=lay.tid(i))
            for i, n in enumerate(("Computing", "Free"), 1)
        ]
        out += [
            _descriptor(u(U_TRACK[n]), f"{n.title()}s", u(4), i, pid=lay.model, tid=lay.tid(i))
            for i, n in enumerate(LEVELS, 1)
        ]
        return out + [self._stream(st, sid) for sid in sorted(set(self.meta.streams))]

    def _rank_flows(self) -> tuple[pw.Msg, int]:
        """Instant events on the traced ranks' stream tracks, at the two ends of each flow between their HCCL
        tasks (writers/ranks.py): `flow_ids` at the source, `terminating_flow_ids` at the sink."""
        if not self._comm:
            return [], 0
        flows = rank_flows(pa.concat_tables(self._comm), self.meta.tp, self.meta.pp)
        if not flows:
            return [], 0
        n = len(flows)
        ids = COLLECTIVE_FLOW_BASE + np.arange(n, dtype=np.int64)
        names = np.array([self._names.get(NAME, f.name) for f in flows], np.int64)
        msg: pw.Msg = []
        for side, field in (("src", 47), ("dst", 48)):
            track = np.array(
                [self._ranks[getattr(f, f"{side}_rank")].u(U_STREAM0 + getattr(f, f"{side}_stream")) for f in flows]
            )
            ts = np.array([getattr(f, f"{side}_ts") for f in flows], np.int64)
            te = [*pw.field_varint(9, INSTANT), *pw.field_varint(11, track), *pw.field_varint(10, names)]
            msg += self._packet(n, ts, [*te, *pw.field_fixed64(field, ids)])
        return msg, n

    def _stream(self, st: _Rank, sid: int) -> bytes:
        st.streams.add(sid)
        lay = st.layout
        return _descriptor(
            st.u(U_STREAM0 + sid), f"Stream {sid}", st.u(2), sid, pid=lay.device, tid=lay.tid(sid or STREAM0_TID)
        )

    def _fixed(self, name: str) -> int:
        return self._names.ids[NAME, name]

    def _packet(self, rows: int, ts: np.ndarray, te: pw.Msg, present: np.ndarray | None = None) -> pw.Msg:
        self.packets += rows if present is None else int(np.count_nonzero(present))
        head = pw.field_varint(10, SEQ) + pw.field_varint(13, NEEDS_STATE)
        return pw.field_msg(1, [*head, *pw.field_varint(8, ts), *pw.field_msg(11, te)], present)

    def _slice(self, rows: int, track: Any, name: Any, a: Any, z: Any, present: Any = None, extra: Any = ()) -> Any:
        """BEGIN (with `extra` TrackEvent fields) and END packets of slices [a, z] on `track`."""
        begin = [*pw.field_varint(9, BEGIN), *pw.field_varint(11, track), *pw.field_varint(10, name), *extra]
        end = [*pw.field_varint(9, END), *pw.field_varint(11, track)]
        return [*self._packet(rows, a, begin, present), *self._packet(rows, z, end, present)]

    def _counter(self, track: int, ts: np.ndarray, value: np.ndarray) -> pw.Msg:
        te = [*pw.field_varint(9, COUNTER), *pw.field_varint(11, track), *pw.field_fixed64(44, value)]
        return self._packet(len(ts), ts, te)

    def _ann(self, key: str, value: pw.Msg, present: np.ndarray | None = None) -> pw.Msg:
        return pw.field_msg(4, [*pw.field_varint(1, self._names.ids[ANN, key]), *value], present)

    # -- ops -----------------------------------------------------------------------------------------------

    def _chunk(self, st: _Rank, b: pa.RecordBatch) -> None:
        """Ops b; before each op: new track descriptors and interned data, then the packets of the groups and
        the busy interval it completes."""
        n, c = b.num_rows, b.column
        if n == 0:
            return
        s, dur, stream = (c(k).to_numpy().astype(np.int64) for k in ("task_start_ns", "task_dur_ns", "stream_id"))
        if min(s.min(), dur.min()) < 0:
            raise ValueError(f"op batch at op_index {c('op_index')[0]}: negative task time")
        h = c("host_launch_start_ns")
        hs, hd = (pc.fill_null(c(k), 0).to_numpy() for k in ("host_launch_start_ns", "host_launch_dur_ns"))
        if min(stream.min(), hs.min(), hd.min()) < 0:
            raise ValueError(f"op batch at op_index {c('op_index')[0]}: negative launch time or stream id")
        e = s + dur
        busy = st.busy.feed(s, e)
        groups: list[tuple[np.ndarray, str, list[Any], np.ndarray, np.ndarray, list[str]]] = []
        for order, (level, cols, at) in enumerate(st.model.feed(b, s, e)):
            if len(at):
                start, end, labels = self._group_spans(st, level, cols)
                for row, text in zip(at.tolist(), labels, strict=True):
                    self._names.queue(row, order - len(LEVELS), NAME, text)
                groups.append((at, level, cols, start, end, labels))
        iids = {k: self._names.column(k, STR, c(k), i + 2) for i, k in enumerate(STR_KEYS)}
        iids["name"] = self._names.column("name", NAME, c("op_name"), 0)
        iids["item"] = self._names.column("item", STR, c("op_name"), 1)
        iids["fused"] = self._names.column("fused", STR, pc.binary_join(c("fused_from"), "+"), len(iids), "")
        numerics = self._numerics(b, iids) if self._num_keys else None
        self._names.assign()
        extras = [self._descriptors_and_names(st, stream)]
        extras += [(g[0], *pw.encode(self._group_msg(st, *g[1:]), len(g[0]))) for g in groups]
        launched = None if h.null_count == n else pc.is_valid(h).to_numpy(zero_copy_only=False)
        ops = self._ops(st, c, stream, s, e, hs, hs + hd, launched, {k: f() for k, f in iids.items()}, numerics)
        if len(busy[0]) > _DENSE * n:  # as masked parts of the op rows, else apart: the same bytes either way
            ops = self._busy_msg(st, *busy, rows=n) + ops
        else:
            extras.append((busy[0], *pw.encode(self._busy_msg(st, *busy), len(busy[0]))))
        self._fh.write(_splice(*pw.encode(ops, n), extras).data)

    def _descriptors_and_names(self, st: _Rank, stream: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Packets defining the streams and the interned entries first used in the chunk: rows, bytes, sizes."""
        pre: dict[int, list[bytes]] = {}
        sids, first = np.unique(stream, return_index=True)
        for sid, row in zip(sids.tolist(), first.tolist(), strict=True):
            if sid not in st.streams:
                pre.setdefault(row, []).append(self._stream(st, sid))
        for row, packet in self._names.packets().items():
            pre.setdefault(row, []).append(packet)
        self.packets += sum(map(len, pre.values()))
        rows = sorted(pre)
        raw = [b"".join(pre[r]) for r in rows]
        sizes = np.array([len(r) for r in raw], np.int64)
        return np.array(rows, np.int64), np.frombuffer(b"".join(raw), np.uint8), sizes

    def _busy_msg(self, st: _Rank, closed: Any, start: Any, end: Any, nxt: Any, rows: int | None = None) -> pw.Msg:
        """Computing [start, end] and Free [end, nxt]; with `rows`: as parts of that many rows (on `closed`)."""
        present = None
        if rows is not None:
            present = np.zeros(rows, bool)
            present[closed] = True
            full = np.zeros((3, rows), np.int64)
            full[:, closed] = start, end, nxt
            start, end, nxt = full
        k = len(start)
        msg = self._slice(k, st.u(U_TRACK["Computing"]), self._fixed("Computing"), start, end, present)
        return msg + self._slice(k, st.u(U_TRACK["Free"]), self._fixed("Free"), end, nxt, present)

    def _numerics(self, b: pa.RecordBatch, iids: dict[str, Any]) -> dict[str, tuple[str, np.ndarray, np.ndarray]]:
        """Per numerics arg key: (kind, value per op, present per op); string values are interned via `iids`."""
        keys = op_arg_keys(b)
        ix = keys.indices.to_numpy(zero_copy_only=False)
        table = [self.meta.op_args.get(k, {}) for k in keys.dictionary.to_pylist()]
        out: dict[str, tuple[str, np.ndarray, np.ndarray]] = {}
        for name in self._num_keys:
            have = np.array([name in t for t in table], bool)[ix]
            values = [t.get(name) for t in table]
            if any(isinstance(v, str) for v in values):
                col = pa.array([v if isinstance(v, str) else "" for v in values], pa.string()).take(pa.array(ix))
                iids[f"num:{name}"] = self._names.column(f"num:{name}", STR, col, len(iids), "")
                out[name] = ("str", np.zeros(len(ix), np.int64), have)
            elif any(isinstance(v, float) for v in values):
                out[name] = ("double", np.array([float(v or 0) for v in values], np.float64)[ix], have)
            else:
                out[name] = ("int", np.array([int(v or 0) for v in values], np.int64)[ix], have)
        return out

    def _ops(
        self,
        st: _Rank,
        c: Any,
        stream: Any,
        s: Any,
        e: Any,
        hs: Any,
        he: Any,
        launched: Any,
        iids: Any,
        numerics: Any = None,
    ) -> pw.Msg:
        """Per op: host launch slice (if launched; flow source), device slice with the JSON args as annotations."""
        n, flow = len(s), c("op_index").to_numpy() + 1 + st.layout.flow_base
        msg: pw.Msg = []
        some = None if launched is None or launched.all() else launched
        if launched is not None:
            extra = [*pw.field_fixed64(47, flow), *self._ann("item_id", pw.field_varint(17, iids["item"]))]
            msg += self._slice(n, st.u(U_LAUNCH), self._fixed("Node@launch"), hs, he, some, extra)
        extra = [*pw.field_varint(3, 1)]  # category "Task"
        if launched is not None:
            extra += pw.field_fixed64(48, flow, some)
        hbm = c("hbm_read_bytes").to_numpy() + c("hbm_write_bytes").to_numpy()
        for k, key in INT_KEYS.items():
            extra += self._ann(key, pw.field_varint(4, hbm if k == "hbm_bytes" else c(k).to_numpy()))
        x = np.empty((len(PIPES), n))
        for i, p in enumerate(PIPES):
            x[i] = c(f"{p}_ratio").to_numpy()
        x *= 1000.0  # rounded to 3 decimals as in the JSON (NaN -> 0)
        milli = np.clip(np.nan_to_num(np.rint(x, out=x), copy=False), 0, 1 << 40, out=x).astype(np.int64)
        for p, m in zip(PIPES, milli, strict=True):
            extra += self._ann(RATIO_KEYS[p], pw.field_fixed64(5, m / 1000.0))
        for k, key in STR_KEYS.items():
            extra += self._ann(key, pw.field_varint(17, iids[k]))
        f = iids["fused"]
        extra += self._ann("fused_from", pw.field_varint(17, np.maximum(f, 0)), f > 0)
        for name, (kind, values, have) in (numerics or {}).items():
            if kind == "str":
                values = iids[f"num:{name}"]
                value = pw.field_varint(17, np.maximum(values, 0))
            else:
                value = pw.field_fixed64(5, values) if kind == "double" else pw.field_varint(4, values)
            extra += self._ann(name, value, have)
        return msg + self._slice(n, st.u(stream + U_STREAM0), iids["name"], s, e, None, extra)

    # -- groups (Model tracks, counters) and host frames ----------------------------------------------------

    def _group_spans(self, st: _Rank, level: str, cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Start and end (clamped so slices of a track do not overlap) and name of each completed group."""
        start, end = st.model.spans(level, cols)
        if level == "step":
            return start, end, st.model.step_labels(cols)
        blocks = st.model.block_names
        layers = cols[1].tolist() if level == "layer" else [-1] * len(start)
        labels = [f"layer {ly}" if ly >= 0 else blocks[k] for ly, k in zip(layers, cols[-5].tolist(), strict=True)]
        return start, end, labels

    def _group_msg(self, st: _Rank, level: str, cols: list[Any], start: Any, end: Any, labels: list[str]) -> pw.Msg:
        """A group's slice on its Model track; steps and blocks add HBM GB/s and AI Core % samples (as the JSON)."""
        names = np.array([self._names.ids[NAME, t] for t in labels], np.int64)
        msg = self._slice(len(start), st.u(U_TRACK[level]), names, start, end)
        if level != "layer":  # bytes/ns = GB/s and busy share at block starts; 0 at step ends
            span = (end - start).astype(np.float64)
            rate = np.where(span > 0, 1.0 / np.where(span > 0, span, 1.0), 0.0) * (level == "block")
            ts = end if level == "step" else start
            msg += self._counter(st.u(U_HBM), ts, np.rint(cols[-2] * rate * 1e3).astype(np.int64) / 1000.0)
            msg += self._counter(st.u(U_UTIL), ts, np.rint(cols[-1] * rate * 1e5).astype(np.int64) / 1000.0)
        return msg

    def _host_frames(self, st: _Rank, steps: pa.Table) -> tuple[pw.Msg, int]:
        """Per step on "Host steps" (of the first traced rank): the frame, with "host overhead" and "sync (D2H
        token)" inside it."""
        n = steps.num_rows
        if n == 0:
            return [], 0
        col = {k: steps.column(k).to_numpy().astype(np.int64) for k in ("host_start_ns", "sync_end_ns")}
        a, z, st.host_end = sequential(col["host_start_ns"], col["sync_end_ns"], st.host_end)
        over = np.maximum(steps.column("host_overhead_ns").to_numpy(), 0)
        ov_end = np.minimum(a + over, z)
        sync = np.maximum(steps.column("device_end_ns").to_numpy(), ov_end)
        labels = [f"Step {s} ({p})" for s, p in zip(steps["step"].to_pylist(), steps["phase"].to_pylist(), strict=True)]
        names = np.array([self._names.get(NAME, t) for t in labels], np.int64)
        track = st.u(U_HOST_STEPS)
        begin = [*pw.field_varint(9, BEGIN), *pw.field_varint(11, track), *pw.field_varint(10, names)]
        msg = self._packet(n, a, begin)
        msg += self._slice(n, track, self._fixed("host overhead"), a, ov_end, ov_end > a)
        msg += self._slice(n, track, self._fixed("sync (D2H token)"), sync, z, z > sync)
        msg += self._packet(n, z, [*pw.field_varint(9, END), *pw.field_varint(11, track)])
        return msg, n
