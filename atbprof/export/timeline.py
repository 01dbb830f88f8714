"""trace_view.json (torch_npu) and msprof_*.json (native msprof): the op table as a Chrome trace, Ascend style.

Real conventions (docs/ascend_profiling_formats.md §1.4, §2.4; samples in shared/anchors/ascend_samples): a bare JSON
array; `ts` a string of absolute epoch µs with three decimals, `dur` a number; pids bit-packed as
`(os_pid << 10) | (sort_index << 5) | device_id` and named by process_name / process_labels / process_sort_index
metadata; `Ascend Hardware` has a thread per stream ("Stream N"); `CANN` holds one `Node@launch` per kernel launch,
linked to its task by a `HostToDevice` flow; `Overlap Analysis` has Computing / Free intervals. torch_npu adds the
`Python` process (raw os pid): a `ProfilerStep#N` per step and a `cpu_op` per framework call (see framework.py),
linked to the task by an `async_npu` flow. torch_npu writes `json.dumps` spacing, native msprof compact text with
the keys in the order name, pid, tid, ts, dur, ph, cat, args.

Each op row's events are joined into one text per row (in row order), so the bytes do not depend on batching.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Literal, TypeAlias, Union

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.errors import InputError
from atbprof.export.common import (
    DEVICE_ID,
    EPOCH_BASE_NS,
    GRAPH_EXECUTE,
    MODEL_ID_NONE,
    Piece,
    RunSource,
    abs_ns,
    fixed3,
    int_text,
    join_pieces,
    map_dictionary,
    model_id,
    text_bytes,
)
from atbprof.export.framework import framework_call
from atbprof.writers.grouping import BusyIntervals

Style = Literal["torch_npu", "msprof"]
Value: TypeAlias = Union[str, pa.Array, "Fields"]  # JSON text, JSON text per row, or a nested object
Fields: TypeAlias = list[tuple[str, Value]]

HOST_DEVICE_ID = 31  # msprof's device id of host-side layers (json_constant.h HOST_PID)
SORT_INDEX = {"Python": 0, "CANN": 7, "Ascend Hardware": 13, "AI Core Freq": 14, "Overlap Analysis": 23}
LABELS = {"Python": "CPU", "CANN": "CPU", "Ascend Hardware": "NPU", "AI Core Freq": "NPU", "Overlap Analysis": "NPU"}
OVERLAP_TIDS = {  # the thread ids differ by producer: match them by thread_name
    "torch_npu": {"Computing": 0, "Communication": 1, "Communication(Not Overlapped)": 2, "Free": 3},
    "msprof": {"Communication": 0, "Communication(Not Overlapped)": 1, "Computing": 2, "Free": 3},
}
_CANONICAL = ("name", "pid", "tid", "ts", "dur", "ph", "bp", "cat", "id", "args")
_NO_END = np.iinfo(np.int64).min
_CPU_OP_ARGS: Fields = [("Sequence number", "-1"), ("Fwd thread id", "0")]


def packed_pid(os_pid: int, layer: str, device_id: int) -> int:
    return (os_pid << 10) | (SORT_INDEX[layer] << 5) | device_id


def js(value: object) -> str:
    return orjson.dumps(value).decode()


@dataclass(frozen=True)
class BusyUpdate:
    """What one batch adds to the merged device busy intervals."""

    new_busy: np.ndarray  # per row: ns of the row's task not already covered by earlier tasks
    gap_rows: np.ndarray  # rows that start after a gap: a busy interval closed just before them
    closed_start: np.ndarray  # per gap row: the closed interval's start ...
    closed_end: np.ndarray  # ... and end (= the idle gap's start)
    gap_end: np.ndarray  # per gap row: the row's start


class BusyTracker:
    """Merges task intervals (in start order) into device busy intervals, across batches."""

    def __init__(self) -> None:
        self._intervals = BusyIntervals()  # the merging the trace writers use too
        self.last_start = _NO_END

    def feed(self, start: np.ndarray, end: np.ndarray) -> BusyUpdate:
        if len(start) == 0:
            empty = np.zeros(0, np.int64)
            return BusyUpdate(empty, empty, empty, empty, empty)
        if start[0] < self.last_start or (len(start) > 1 and np.any(start[1:] < start[:-1])):
            raise InputError(
                "ops.parquet: task start times are not in device order; re-create the run with `atbprof run`"
            )
        self.last_start = int(start[-1])
        gap_rows, starts, ends, nxt = self._intervals.feed(start, end)
        new_busy = np.maximum(end - np.maximum(start, self._intervals.prev), 0)
        return BusyUpdate(new_busy, gap_rows, starts, ends, nxt)

    @property
    def open(self) -> tuple[int, int] | None:
        return self._intervals.open

    def batches(self, source: RunSource, columns: Sequence[str]) -> Iterator[tuple[pa.RecordBatch, BusyUpdate]]:
        """The run's op batches, each with what it adds to the busy intervals. At the end the rows read are checked
        against the ops.parquet footer: a file cut short raises instead of exporting part of the run."""
        rows = 0
        for b in source.iter_batches(columns):
            start = b.column("task_start_ns").to_numpy()
            yield b, self.feed(start, start + b.column("task_dur_ns").to_numpy())
            rows += b.num_rows
        if rows != source.ops_rows:
            raise InputError(
                f"{source.ops_path}: read {rows} rows, its footer says {source.ops_rows}; re-create the run"
            )


class TraceWriter:
    """Streams one trace JSON file: `open(streams)` -> `write_batch`* -> `close()`."""

    def __init__(self, fh: IO[bytes], source: RunSource, style: Style) -> None:
        self.fh, self.source, self.style = fh, source, style
        self.compact = style == "msprof"
        self.sep = "," if self.compact else ", "
        os_pid = source.os_pid()
        self.tid = os_pid  # the profiled process's main thread launches every kernel (no task queue)
        host_dev = HOST_DEVICE_ID if style == "msprof" else DEVICE_ID
        self.pid = {name: packed_pid(os_pid, name, DEVICE_ID) for name in SORT_INDEX}
        self.pid["CANN"] = packed_pid(os_pid, "CANN", host_dev)
        self.pid["Python"] = os_pid
        self.layers = [n for n in SORT_INDEX if n != "Python" or style == "torch_npu"]
        self.overlap_tid = OVERLAP_TIDS[style]
        self.events = 0
        self._names: dict[str, str] = {}
        self._calls: dict[str, str] = {}

    # -- JSON text ---------------------------------------------------------------------------------------------

    def _obj(self, fields: Fields, top: bool = True) -> list[Piece]:
        """JSON object pieces; msprof orders an event's own keys canonically (args keep their order)."""
        if self.compact and top:
            fields = sorted(fields, key=lambda kv: _CANONICAL.index(kv[0]) if kv[0] in _CANONICAL else 99)
        kv_sep = ":" if self.compact else ": "
        out: list[Piece] = ["{"]
        for i, (key, value) in enumerate(fields):
            out.append(("" if i == 0 else self.sep) + js(key) + kv_sep)
            out.extend(self._obj(value, top=False) if isinstance(value, list) else [value])
        out.append("}")
        return out

    def _text(self, fields: Fields) -> str:
        pieces = self._obj(fields)
        assert all(isinstance(p, str) for p in pieces)
        return "".join(p for p in pieces if isinstance(p, str))

    def _meta(self, layer: str, kind: str, value: object, tid: int = 0) -> str:
        key = {"process_labels": "labels"}.get(kind, "sort_index" if kind.endswith("sort_index") else "name")
        fields: Fields = [("name", js(kind)), ("pid", str(self.pid[layer])), ("tid", str(tid))]
        fields += [("args", [(key, js(value))]), ("ph", '"M"')]
        if layer == "Python":  # torch_npu writes its own layer's metadata with `ph` first
            fields = [fields[-1], *fields[:-1]]
        return self._text(fields)

    def _x(self, name: str, layer: str, tid: int, start: int, end: int, extra: Fields | None = None) -> str:
        """One complete event from run-relative ns (step frames, the last busy interval)."""
        fields: Fields = [("name", js(name)), ("pid", str(self.pid[layer])), ("tid", str(tid))]
        fields += [("ts", _ts_literal(start)), ("dur", _us(end - start)), ("ph", '"X"')]
        if extra:
            fields += extra
        if layer == "Python":  # torch_npu's own events: ph first
            fields = [fields[5], *fields[:5], *fields[6:]]
        return self._text(fields)

    # -- stream ------------------------------------------------------------------------------------------------

    def _write(self, text: str | memoryview) -> None:
        self.fh.write(text.encode() if isinstance(text, str) else text)

    def open(self, streams: list[int], steps: pa.Table) -> None:
        head: list[str] = []
        for layer in self.layers:
            head.append(self._meta(layer, "process_name", layer))
            head.append(self._meta(layer, "process_labels", LABELS[layer]))
            head.append(self._meta(layer, "process_sort_index", SORT_INDEX[layer]))
            threads: list[tuple[int, str]] = []
            if layer in ("Python", "CANN"):
                threads = [(self.tid, f"Thread {self.tid}")]
            elif layer == "Ascend Hardware":
                threads = [(s, f"Stream {s}") for s in streams]
            elif layer == "Overlap Analysis":
                threads = sorted((tid, name) for name, tid in self.overlap_tid.items())
            for tid, name in threads:
                head.append(self._meta(layer, "thread_name", name, tid))
                head.append(self._meta(layer, "thread_sort_index", tid, tid))
        freq: Fields = [("name", '"AI Core Freq"'), ("ts", _ts_literal(0)), ("pid", str(self.pid["AI Core Freq"]))]
        freq += [("tid", "0"), ("args", [("MHz", js(round(self.source.clock_ghz * 1000.0, 3)))]), ("ph", '"C"')]
        head.append(self._text(freq))
        if self.source.execution_mode == "graph":
            # a graph-mode step is one replay: one graph execute call on the CANN layer, from the end of the step's
            # host work to its first device task (what the run's host model says the replay took to start)
            for r in steps.to_pylist():
                at = r["host_start_ns"] + r["host_overhead_ns"]
                args: Fields = [("Thread Id", str(self.tid)), ("level", '"acl"'), ("id", '"aclmdlRIExecuteAsync"')]
                head.append(
                    self._x(GRAPH_EXECUTE, "CANN", self.tid, at, max(r["device_start_ns"], at + 1), [("args", args)])
                )
        if self.style == "torch_npu":
            for r in steps.to_pylist():
                extra: Fields = [("cat", '"cpu_op"'), ("args", _CPU_OP_ARGS)]
                head.append(
                    self._x(
                        f"ProfilerStep#{r['step']}", "Python", self.tid, r["host_start_ns"], r["sync_end_ns"], extra
                    )
                )
        self.events += len(head)
        self._write("[" + self.sep.join(head))

    def write_batch(self, b: pa.RecordBatch, busy: BusyUpdate) -> None:
        c, n = b.column, b.num_rows
        if n == 0:
            return
        start, dur = c("task_start_ns"), c("task_dur_ns")
        hs, hd = c("host_launch_start_ns"), c("host_launch_dur_ns")
        conn = int_text(pc.add(c("op_index"), 1))
        stream = int_text(c("stream_id"))
        name = map_dictionary(c("op_name"), js, self._names)
        ah, cann, py = (str(self.pid[k]) for k in ("Ascend Hardware", "CANN", "Python"))
        launch_ts, task_ts = _ts_column(hs), _ts_column(start)
        graph_model = str(model_id(self.source.execution_mode))
        task_args: Fields = [("Model Id", graph_model), ("Task Type", map_dictionary(c("task_type"), js))]
        task_args += [("Physic Stream Id", stream), ("Task Id", int_text(c("task_id"))), ("Batch Id", "0")]
        task_args += [("Subtask Id", str(MODEL_ID_NONE)), ("connection_id", conn)]
        launched = pc.if_else(pc.is_valid(hs), conn, pa.scalar(None, pa.string()))  # null: no host launch (graph)
        flow_name = join_pieces(['"HostToDevice', launched, '"'])
        flow_id = join_pieces(['"', launched, '"'])
        events: list[tuple[Fields, bool]] = []  # (event, optional): optional events are absent on some rows
        if self.style == "torch_npu":
            call = map_dictionary(c("op_type"), lambda t: js(framework_call(t)), self._calls)
            cpu_op: Fields = [("ph", '"X"'), ("name", call), ("pid", py), ("tid", str(self.tid))]
            cpu_op += [("ts", launch_ts), ("dur", fixed3(hd)), ("cat", '"cpu_op"'), ("args", _CPU_OP_ARGS)]
            events += [(cpu_op, True), (_flow("s", py, str(self.tid), launch_ts, launched), True)]
        launch_args: Fields = [("Thread Id", str(self.tid)), ("level", '"node"'), ("id", '"launch"')]
        launch_args += [("item_id", name), ("connection_id", conn)]
        launch: Fields = [("name", '"Node@launch"'), ("pid", cann), ("tid", str(self.tid)), ("ts", launch_ts)]
        launch += [("dur", fixed3(hd)), ("args", launch_args), ("ph", '"X"')]
        flow_start: Fields = [("name", flow_name), ("ph", '"s"'), ("cat", '"HostToDevice"'), ("id", flow_id)]
        flow_start += [("pid", cann), ("tid", str(self.tid)), ("ts", launch_ts)]
        task: Fields = [("name", name), ("pid", ah), ("tid", stream), ("ts", task_ts), ("dur", fixed3(dur))]
        task += [("args", task_args), ("ph", '"X"')]
        flow_end: Fields = [("name", flow_name), ("ph", '"f"'), ("id", flow_id), ("ts", task_ts)]
        flow_end += [("cat", '"HostToDevice"'), ("pid", ah), ("tid", stream), ("bp", '"e"')]
        events += [(launch, True), (flow_start, True), *((e, True) for e in self._overlap(busy, n))]
        events += [(task, False), (flow_end, True)]
        if self.style == "torch_npu":
            events.append((_flow("f", ah, stream, task_ts, launched), True))
        # one text per row, every event led by the separator; an optional event is null (skipped) as a whole
        row: list[Piece] = []
        for fields, optional in events:
            pieces = [self.sep, *self._obj(fields)]
            if optional:
                text = join_pieces(pieces)
                self.events += len(text) - text.null_count
                row.append(text)
            else:
                row.extend(pieces)
                self.events += n
        self._write(text_bytes(join_pieces(row, null_handling="skip")))

    def _overlap(self, busy: BusyUpdate, n: int) -> list[Fields]:
        """Computing (closed busy interval) and Free (the gap after it), on the rows that start after a gap."""
        out: list[Fields] = []
        for name, lo, hi in (
            ("Computing", busy.closed_start, busy.closed_end),
            ("Free", busy.closed_end, None),
        ):
            valid = np.zeros(n, bool)
            valid[busy.gap_rows] = True
            a, z = np.zeros(n, np.int64), np.zeros(n, np.int64)
            a[busy.gap_rows] = lo
            z[busy.gap_rows] = hi if hi is not None else busy.gap_end
            mask = ~valid
            tid = str(self.overlap_tid[name])
            fields: Fields = [("name", js(name)), ("pid", str(self.pid["Overlap Analysis"])), ("tid", tid)]
            fields += [("ts", _ts_column(pa.array(a, mask=mask))), ("dur", fixed3(pa.array(z - a, mask=mask)))]
            out.append([*fields, ("ph", '"X"')])
        return out

    def close(self, tracker: BusyTracker) -> None:
        tail = ""
        if tracker.open is not None:
            s, e = tracker.open
            tail = self.sep + self._x("Computing", "Overlap Analysis", self.overlap_tid["Computing"], s, e)
            self.events += 1
        self._write(tail + "]")


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _ts_literal(rel_ns: int) -> str:
    return f'"{_us(EPOCH_BASE_NS + rel_ns)}"'


def _ts_column(rel_ns: pa.Array) -> pa.Array:
    return join_pieces(['"', fixed3(abs_ns(rel_ns)), '"'])


def _flow(ph: str, pid: str, tid: str, ts: Piece, launched: pa.Array) -> Fields:
    """An `async_npu` flow end (torch_npu: framework call -> device task); absent (null) where nothing launched."""
    fields: Fields = [("ph", js(ph)), ("bp", '"e"'), ("name", '"torch_to_npu"'), ("id", launched)]
    return [*fields, ("pid", pid), ("tid", tid), ("ts", ts), ("cat", '"async_npu"')]
