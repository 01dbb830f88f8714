"""From what an importer read (absolute times, source order) to a `Profile` (relative times, our schemas).

Importers fill `RawOps` / `RawFramework` / `RawSteps` with absolute ns (epoch ns for Ascend and Kineto) and hand them
to `assemble`, which
  - takes the profile's first event as time 0 (`meta["origin_ns"]` keeps it),
  - orders the op rows by start time (stable: the source order breaks ties) and numbers them (`op_index`),
  - gives device tasks and framework ops the ProfilerStep#N they fall in when the source did not say,
  - nests the framework ops per thread (depth, parent) and builds one step frame per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.importers.base import FRAMEWORK_SCHEMA, HOST_CALLS_SCHEMA, STEP_FRAMES_SCHEMA, Profile
from atbprof.importers.coded import canonical_dictionary
from atbprof.importers.native import native
from atbprof.importers.sanity import check_spans, check_task_times
from atbprof.optable.schema import OPS_SCHEMA

_RELATIVE = ("task_start_ns", "host_launch_start_ns")  # absolute in Raw*, relative in the Profile


@dataclass
class RawOps:
    """Op rows in source order. `columns` uses our names; times are absolute int64 ns; strings plain strings."""

    columns: dict[str, pa.Array]
    step_time_ns: np.ndarray | None = None  # per row, absolute: the host time that decides the step (launch)

    @property
    def rows(self) -> int:
        return len(self.columns["task_start_ns"])

    @staticmethod
    def empty() -> RawOps:
        """No op rows (a CPU-only trace)."""
        text, times = pa.array([], pa.string()), pa.array([], pa.int64())
        return RawOps({"op_name": text, "op_type": text, "task_start_ns": times, "task_dur_ns": times})


@dataclass
class RawFramework:
    """Framework ops (cpu_op events) in source order, absolute times."""

    index: np.ndarray  # event position in the source
    name: list[str] | pa.Array
    start_ns: np.ndarray
    dur_ns: np.ndarray
    pid: list[object] | np.ndarray  # as the source wrote them (int, or str for some Kineto pseudo-processes);
    tid: list[object] | np.ndarray  # an int64 array where every one is an integer
    input_shapes: list[str | None] | pa.Array = field(default_factory=list)


@dataclass
class RawHostCalls:
    """Runtime calls of the host (HOST_CALLS_SCHEMA kinds), absolute times."""

    kind: list[str]
    name: pa.Array
    start_ns: np.ndarray
    dur_ns: np.ndarray


@dataclass
class RawSteps:
    """ProfilerStep#N frames, absolute times (duplicates of one N are merged); `kind` is the step_frames `frame`
    they become (ProfilerStep, or iteration: a serving loop's, importers/kineto_steps.py)."""

    step: np.ndarray
    start_ns: np.ndarray
    dur_ns: np.ndarray
    kind: str = "ProfilerStep"

    def merged(self) -> RawSteps:
        if len(self.step) == 0:
            return self
        uniq, inverse = np.unique(self.step, return_inverse=True)
        start = np.full(len(uniq), np.iinfo(np.int64).max)
        end = np.full(len(uniq), np.iinfo(np.int64).min)
        np.minimum.at(start, inverse, self.start_ns)
        np.maximum.at(end, inverse, self.start_ns + self.dur_ns)
        order = np.argsort(start, kind="stable")
        return RawSteps(uniq[order], start[order], (end - start)[order], self.kind)

    def step_at(self, times: np.ndarray) -> np.ndarray:
        """The step whose frame contains each time (-1: none). Frames are taken as non-overlapping."""
        frames = self.merged()
        if len(frames.step) == 0 or len(times) == 0:
            return np.full(len(times), -1, np.int64)
        idx = np.searchsorted(frames.start_ns, times, side="right") - 1
        safe = np.clip(idx, 0, None)
        inside = (idx >= 0) & (times < frames.start_ns[safe] + frames.dur_ns[safe])
        return np.where(inside, frames.step[safe], -1).astype(np.int64)


def assemble(
    kind: str,
    source: str,
    ops: RawOps,
    *,
    framework: RawFramework | None = None,
    profiler_steps: RawSteps | None = None,
    first_event_ns: int | None = None,
    meta: dict[str, object] | None = None,
    host_calls: RawHostCalls | None = None,
) -> Profile:
    meta = dict(meta or {})
    ops, framework, profiler_steps, notes = _sane(ops, framework, profiler_steps, source)
    if notes:
        found = meta.get("warnings")
        meta["warnings"] = [*(found if isinstance(found, list) else []), *notes]
    origin = _origin(ops, framework, profiler_steps, first_event_ns)
    meta["origin_ns"] = origin
    ops_table = _ops_table(ops, profiler_steps, origin)
    fw_table = _framework_table(framework, profiler_steps, origin) if framework is not None else None
    frames = _step_frames(ops_table, profiler_steps, origin)
    calls = None
    if host_calls is not None and len(host_calls.start_ns):
        calls = pa.Table.from_arrays(
            [
                pa.array(host_calls.kind, pa.string()),
                host_calls.name,
                pa.array(host_calls.start_ns - origin, pa.int64()),
                pa.array(np.maximum(host_calls.dur_ns, 0), pa.int64()),
            ],
            schema=HOST_CALLS_SCHEMA,
        )
    return Profile(kind, source, ops_table, fw_table, None, meta, frames, calls)


def _sane(
    ops: RawOps, framework: RawFramework | None, steps: RawSteps | None, source: str
) -> tuple[RawOps, RawFramework | None, RawSteps | None, list[str]]:
    """The rows whose times a real profiler could have written (see sanity.py); what was dropped, as notes."""
    keep, notes = check_task_times(ops.columns, source)
    if not keep.all():
        mask = pa.array(keep)
        step_time = ops.step_time_ns[keep] if ops.step_time_ns is not None else None
        ops = RawOps({k: v.filter(mask) for k, v in ops.columns.items()}, step_time)
    if framework is not None:
        fw_keep, fw_notes = check_spans(framework.start_ns, framework.dur_ns, "framework op")
        if fw_notes:
            framework = _filter_framework(framework, fw_keep)
            notes += fw_notes
    if steps is not None:
        st_keep, st_notes = check_spans(steps.start_ns, steps.dur_ns, "profiler step")
        if st_notes:
            steps = RawSteps(steps.step[st_keep], steps.start_ns[st_keep], steps.dur_ns[st_keep], steps.kind)
            notes += st_notes
    return ops, framework, steps, notes


def _filter_framework(fw: RawFramework, keep: np.ndarray) -> RawFramework:
    rows = np.flatnonzero(keep)

    def pick(values: list[Any] | pa.Array) -> list[Any] | pa.Array:
        if isinstance(values, pa.Array):
            return values.take(pa.array(rows))
        return [values[i] for i in rows.tolist()] if values else values

    def ids(values: list[object] | np.ndarray) -> list[object] | np.ndarray:
        return values[rows] if isinstance(values, np.ndarray) else list(pick(values))

    return RawFramework(
        index=fw.index[rows],
        name=pick(fw.name),
        start_ns=fw.start_ns[rows],
        dur_ns=fw.dur_ns[rows],
        pid=ids(fw.pid),
        tid=ids(fw.tid),
        input_shapes=pick(fw.input_shapes),
    )


def _origin(ops: RawOps, framework: RawFramework | None, steps: RawSteps | None, first_event_ns: int | None) -> int:
    candidates = [first_event_ns] if first_event_ns is not None else []
    for arr in (ops.columns["task_start_ns"], ops.columns.get("host_launch_start_ns")):
        if arr is not None and len(arr) and arr.null_count < len(arr):
            candidates.append(int(pc.min(arr).as_py()))
    if framework is not None and len(framework.start_ns):
        candidates.append(int(framework.start_ns.min()))
    if steps is not None and len(steps.start_ns):
        candidates.append(int(steps.start_ns.min()))
    return min(candidates, default=0)


def _ops_table(ops: RawOps, steps: RawSteps | None, origin: int) -> pa.Table:
    n = ops.rows
    start = ops.columns["task_start_ns"].to_numpy(zero_copy_only=False)
    order = np.lexsort((np.arange(n), start))  # by start; equal starts keep the source order
    cols = dict(ops.columns)
    no_step = "step" not in cols or cols["step"].null_count == n  # kernel_details without a schedule: Step Id empty
    if no_step and steps is not None and len(steps.step):
        when = ops.step_time_ns if ops.step_time_ns is not None else start
        step = steps.step_at(when)
        cols["step"] = pa.array(step, pa.int64(), mask=step < 0)
    for name in _RELATIVE:
        if name in cols:
            cols[name] = pc.subtract(cols[name], pa.scalar(origin, pa.int64()))
    take = pa.array(order)
    arrays = []
    for f in OPS_SCHEMA:
        if f.name == "op_index":
            arrays.append(pa.array(np.arange(n, dtype=np.int64)))
        elif f.name in cols:
            arrays.append(_as_type(cols[f.name].take(take), f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(arrays, schema=OPS_SCHEMA)


def _as_type(arr: pa.Array, typ: pa.DataType) -> pa.Array:
    if pa.types.is_dictionary(typ):
        # a dictionary of texts is coded again from its codes: each distinct text hashed once, not each row's again
        encoded = canonical_dictionary(arr) if _coded_texts(arr) else pc.dictionary_encode(pc.cast(arr, pa.string()))
        return encoded.cast(typ) if not encoded.type.equals(typ) else encoded
    return arr if arr.type.equals(typ) else pc.cast(arr, typ)


def _coded_texts(arr: pa.Array) -> bool:
    typ = arr.type
    return pa.types.is_dictionary(typ) and pa.types.is_string(typ.value_type) and arr.dictionary.null_count == 0


def _framework_table(fw: RawFramework, steps: RawSteps | None, origin: int) -> pa.Table:
    n = len(fw.index)
    start, dur = fw.start_ns.astype(np.int64), np.maximum(fw.dur_ns.astype(np.int64), 0)
    thread = _thread_codes(fw.pid, fw.tid)
    rows = _by_start(start, dur, fw.index)  # by start, longer first, then source position
    # parents first: by thread, then as rows
    order = rows[np.argsort(thread[rows], kind="stable")]
    depth, parent = _nesting(order, thread, start, start + dur, fw.index)
    step = steps.step_at(start) if steps is not None else np.full(n, -1, np.int64)
    cols = {
        "index": pa.array(fw.index[rows].astype(np.int64)),
        "name": _names(fw.name, rows),
        "start_ns": pa.array(start[rows] - origin),
        "dur_ns": pa.array(dur[rows]),
        "pid": _ids(fw.pid, rows),
        "tid": _ids(fw.tid, rows),
        "depth": pa.array(depth[rows], pa.int32()),
        "parent": pa.array(parent[rows], pa.int64(), mask=parent[rows] < 0),
        "step": pa.array(step[rows], pa.int32(), mask=step[rows] < 0),
        "input_shapes": _shapes(fw.input_shapes, rows),
    }
    return pa.Table.from_pydict(cols, schema=FRAMEWORK_SCHEMA)


def _by_start(start: np.ndarray, dur: np.ndarray, index: np.ndarray) -> np.ndarray:
    """np.lexsort((index, -dur, start)) (index unique), 10-20x faster: a trace's ops come nearly in start order,
    which a stable argsort takes in linear time, and only the runs of equal starts (few) are sorted by all three."""
    rows = np.argsort(start, kind="stable")
    at = start[rows]
    tied = np.zeros(len(rows), bool)
    same = at[1:] == at[:-1]
    tied[1:] |= same
    tied[:-1] |= same
    if tied.any():  # a run keeps its place (its start), ordered within by longer first, then source position
        runs = rows[tied]
        rows[tied] = runs[np.lexsort((index[runs], -dur[runs], start[runs]))]
    return rows


def _names(names: list[str] | pa.Array, rows: np.ndarray) -> pa.Array:
    if isinstance(names, pa.Array):
        return names.take(pa.array(rows))
    return pa.array([names[i] for i in rows.tolist()], pa.string())


def _shapes(shapes: list[str | None] | pa.Array, rows: np.ndarray) -> pa.Array:
    if isinstance(shapes, pa.Array):
        return shapes.take(pa.array(rows))
    return pa.array([shapes[i] for i in rows.tolist()] if shapes else [None] * len(rows), pa.string())


def _ids(values: list[object] | np.ndarray, rows: np.ndarray) -> pa.Array:
    """pid / tid as int64; other spellings (Kineto's "Spans", digits as text) are converted or null."""
    if isinstance(values, np.ndarray):
        return pa.array(values[rows], pa.int64())
    kinds = set(map(type, values))
    if kinds <= {int} or kinds == {str}:
        try:  # whole columns: ints, or texts that are all plain integers (old Kineto: "tid": "25738")
            arr = pa.array(values, pa.int64() if kinds <= {int} else pa.string())
            return pc.cast(arr, pa.int64()).take(pa.array(rows))
        except (pa.ArrowInvalid, OverflowError):  # beyond int64, or "Spans": one value at a time
            pass
    return pa.array([_int_or_none(values[i]) for i in rows.tolist()], pa.int64())


def _int_or_none(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    try:
        out = int(value)
    except ValueError:  # Kineto pseudo-processes: "Spans", "Traces"
        return None
    return out if -(2**63) <= out < 2**63 else None


def _thread_codes(pid: list[object] | np.ndarray, tid: list[object] | np.ndarray) -> np.ndarray:
    """One code per (pid, tid)."""
    pids, tids = _int_ids(pid), _int_ids(tid)
    if len(pid) and pids is not None and tids is not None:
        pid_code = np.unique(pids, return_inverse=True)[1].reshape(-1)
        tid_uniq, tid_code = np.unique(tids, return_inverse=True)
        return pid_code.astype(np.int64) * len(tid_uniq) + tid_code.reshape(-1)
    # keyed by text: 25738 and "25738" (old Kineto writes both) are the same thread
    pid_code, tid_code = (pc.dictionary_encode(_id_texts(v)) for v in (pid, tid))
    code = pid_code.indices.to_numpy().astype(np.int64) * len(tid_code.dictionary) + tid_code.indices.to_numpy()
    return np.unique(code, return_inverse=True)[1].reshape(-1).astype(np.int64)


def _int_ids(values: list[object] | np.ndarray) -> np.ndarray | None:
    """The ids as int64 when every one is an integer that fits (None otherwise)."""
    if isinstance(values, np.ndarray):
        return values
    if not set(map(type, values)) <= {int}:
        return None
    try:
        return np.array(values, np.int64)
    except OverflowError:  # ids beyond int64: the generic path
        return None


def _id_texts(values: list[object] | np.ndarray) -> pa.Array:
    """str() of each id, by column when the column is all ints or all texts."""
    if isinstance(values, np.ndarray):
        return pc.cast(pa.array(values, pa.int64()), pa.string())
    kinds = set(map(type, values))
    try:
        if kinds <= {int}:
            return pc.cast(pa.array(values, pa.int64()), pa.string())
        if kinds == {str}:
            return pa.array(values, pa.string())
    except (pa.ArrowInvalid, OverflowError):
        pass
    return pa.array([str(v) for v in values], pa.string())


def _nesting(
    order: np.ndarray, thread: np.ndarray, start: np.ndarray, end: np.ndarray, index: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Depth and parent (source index, -1 = none) of each op on its thread.

    A stack of open ops per thread: an op is the child of the innermost open op that contains it. An op that
    only partly overlaps the open one (rounding artefacts, < 1 µs in real traces) closes it. `native.nest` runs
    the loop of `nesting_python` in C.
    """
    if native is None:
        return nesting_python(order, thread, start, end, index)
    n = len(order)
    depth, parent = np.zeros(n, np.int64), np.zeros(n, np.int64)
    native.nest(*(np.ascontiguousarray(a, np.int64) for a in (order, thread, start, end, index)), depth, parent)
    return depth, parent


def nesting_python(
    order: np.ndarray, thread: np.ndarray, start: np.ndarray, end: np.ndarray, index: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    n = len(order)
    depth = [0] * n
    parent = [-1] * n
    th, st, en, ix = thread.tolist(), start.tolist(), end.tolist(), index.tolist()
    stack_end: list[int] = []
    stack_ix: list[int] = []
    current = None
    for i in order.tolist():
        if th[i] != current:
            current = th[i]
            stack_end.clear()
            stack_ix.clear()
        s, e = st[i], en[i]
        while stack_end and (stack_end[-1] <= s or stack_end[-1] < e):
            stack_end.pop()
            stack_ix.pop()
        if stack_end:
            parent[i] = stack_ix[-1]
            depth[i] = len(stack_end)
        stack_end.append(e)
        stack_ix.append(ix[i])
    return np.array(depth, np.int64), np.array(parent, np.int64)


def _step_frames(ops: pa.Table, steps: RawSteps | None, origin: int) -> pa.Table | None:
    """ProfilerStep frames where recorded; otherwise (or for steps they miss) the span of the step's ops."""
    step_col = ops.column("step")
    counts: dict[int, tuple[int, int, int, int]] = {}  # step -> (ops, first op, first start, last end)
    if step_col.null_count < len(step_col):
        table = pa.table(
            {
                "step": step_col,
                "i": ops.column("op_index"),
                "s": ops.column("task_start_ns"),
                "e": pc.add(ops.column("task_start_ns"), ops.column("task_dur_ns")),
            }
        ).filter(pc.is_valid(step_col))
        agg = table.group_by("step").aggregate([("i", "count"), ("i", "min"), ("s", "min"), ("e", "max")])
        for row in agg.to_pylist():
            counts[row["step"]] = (row["i_count"], row["i_min"], row["s_min"], row["e_max"])
    rows: list[dict[str, object]] = []
    seen: set[int] = set()
    if steps is not None:
        frames = steps.merged()
        for step, start, dur in zip(
            frames.step.tolist(), frames.start_ns.tolist(), frames.dur_ns.tolist(), strict=True
        ):
            n_ops, first, _, _ = counts.get(step, (0, None, 0, 0))
            rows.append(_frame(step, start - origin, dur, n_ops, first, frames.kind))
            seen.add(step)
    for step, (n_ops, first, lo, hi) in sorted(counts.items()):
        if step not in seen:
            rows.append(_frame(step, lo, hi - lo, n_ops, first, "ops"))
    if not rows:
        return None
    rows.sort(key=lambda r: (r["start_ns"], r["step"]))
    return pa.Table.from_pylist(rows, schema=STEP_FRAMES_SCHEMA)


def _frame(step: int, start: int, dur: int, n_ops: int, first: int | None, frame: str) -> dict[str, object]:
    return {"step": step, "start_ns": start, "dur_ns": dur, "op_count": n_ops, "first_op_index": first, "frame": frame}
