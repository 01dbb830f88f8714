"""torch_npu / msprof SQLite exports (`export_type=db`): ascend_pytorch_profiler_<rank>.db, msprof_<ts>.db.

Read-only (an immutable URI open: nothing is written, no journal, no lock), schema-checked (META_DATA
SCHEMA_VERSION major 1; columns found by name, since releases add and drop some) and bounded by the input size cap
before SQLite opens it. Text columns are ids into STRING_IDS. The rows are what kernel_details.csv lists: one per
compute task (TASK joined with COMPUTE_TASK_INFO on globalTaskId) and one per communication op
(COMMUNICATION_OP, Accelerator Core HCCL as in the text export). Also read: PMU counters (TASK_PMU_INFO, times in
ns), step frames (STEP_TIME), host launches (CANN_API by connectionId), framework ops (PYTORCH_API of type `op`),
the chip (NPU_INFO), the AI Core clock (AICORE_FREQ) and the rank (RANK_DEVICE_MAP).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.errors import InputError
from atbprof.importers.assemble import RawFramework, RawOps, RawSteps, assemble
from atbprof.importers.base import Profile
from atbprof.importers.csv_tables import PIPE_SIDES
from atbprof.importers.device_tasks import graph_task
from atbprof.importers.optypes import base_ascend_types
from atbprof.inputs import regular_file

SQLITE_MAGIC = b"SQLite format 3\x00"
SCHEMA_MAJOR = "1"
REQUIRED_TABLES = ("TASK", "STRING_IDS", "COMPUTE_TASK_INFO")
_KERNEL_COLUMNS = {  # ours -> COMPUTE_TASK_INFO column (string ids unless noted)
    "op_name": "name",
    "op_type": "opType",
    "task_type": "taskType",
    "input_shapes": "inputShapes",
    "input_dtypes": "inputDataTypes",
    "output_shapes": "outputShapes",
    "output_dtypes": "outputDataTypes",
}
_NUMERIC = {"block_dim": "blockDim", "mix_block_dim": "mixBlockDim", "task_wait_ns": "waitNs"}
_TASK = {"stream_id": "streamId", "task_id": "taskId"}
_MISSING_TEXT = ("", "N/A")


class _BadTime(Exception):
    def __init__(self, where: str, value: object) -> None:
        super().__init__(where)
        self.where, self.value = where, value


@dataclass(frozen=True)
class AscendDb:
    ops: RawOps
    steps: RawSteps | None
    framework: RawFramework | None
    meta: dict[str, object]


def is_sqlite(head: bytes) -> bool:
    return head.startswith(SQLITE_MAGIC)


def read_ascend_db(path: Path) -> AscendDb:
    regular_file(path)  # the size cap, before SQLite maps the file
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error as err:
        raise InputError(f"{path}: cannot be opened as an SQLite database ({err})") from None
    try:
        return _read(path, _Db(con))
    except _BadTime as bad:
        message = f"{path}: {bad.where}: {bad.value!r} is not a time in ns; the file is damaged: re-export it"
        raise InputError(message) from None
    except sqlite3.Error as err:
        raise InputError(f"{path}: a damaged or unreadable SQLite database ({err}); re-export the profile") from None
    finally:
        con.close()


class _Db:
    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        self.tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        self._columns: dict[str, set[str]] = {}

    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            self._columns[table] = {r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')}
        return self._columns[table]

    def rows(self, sql: str, *args: object) -> list[tuple[object, ...]]:
        return self.con.execute(sql, args).fetchall()


class _Strings:
    """STRING_IDS as sorted ids and their texts: a column of ids becomes a string array in one vectorised take."""

    def __init__(self, db: _Db) -> None:
        pairs = [(i, v) for i, v in db.rows("SELECT id, value FROM STRING_IDS ORDER BY id") if isinstance(i, int)]
        self.ids = np.array([i for i, _ in pairs], dtype=np.int64)
        self.values = pa.array([None if v is None else str(v) for _, v in pairs], pa.string())
        self.by_text = {str(v): i for i, v in pairs}

    def texts(self, ids: list[object]) -> pa.Array:
        raw = np.array([i if isinstance(i, int) else -1 for i in ids], dtype=np.int64)
        if not len(self.ids):
            return pa.nulls(len(raw), pa.string())
        pos = np.clip(np.searchsorted(self.ids, raw), 0, len(self.ids) - 1)
        found = pa.array(self.ids[pos] == raw)
        return pc.if_else(found, self.values.take(pa.array(pos)), pa.scalar(None, pa.string()))


def _read(path: Path, db: _Db) -> AscendDb:
    missing = [t for t in REQUIRED_TABLES if t not in db.tables]
    if missing:
        what = "an msprof-analyze cluster database" if "ClusterCommAnalyzerTime" in db.tables else "this database"
        raise InputError(
            f"{path}: {what} has no {', '.join(missing)} table(s), so it holds no device kernels; pass the "
            "profile's ascend_pytorch_profiler_<rank>.db or msprof_<timestamp>.db (analysis.db holds only the "
            "communication summary)"
        )
    meta = _meta(path, db)
    strings = _Strings(db)
    kernels = _kernels(db, strings)
    comm = _communication(db, strings)
    ops = _concat([kernels, comm]) if comm is not None else kernels
    steps = _steps(db)
    return AscendDb(ops, steps, _framework(db, strings), meta)


def _meta(path: Path, db: _Db) -> dict[str, object]:
    meta: dict[str, object] = {"db_tables": sorted(db.tables)}
    if "META_DATA" in db.tables:
        values = {str(k): v for k, v in db.rows("SELECT name, value FROM META_DATA")}
        version = str(values.get("SCHEMA_VERSION") or "")
        if version and version.split(".")[0] != SCHEMA_MAJOR:
            raise InputError(
                f"{path}: META_DATA SCHEMA_VERSION {version}; atbprof reads schema {SCHEMA_MAJOR}.x (the layout of "
                "CANN 8.x torch_npu / msprof): re-export with export_type=text, or upgrade atbprof"
            )
        meta["db_schema_version"] = version or None
    if "NPU_INFO" in db.tables:
        names = sorted({str(n) for (_, n) in db.rows("SELECT id, name FROM NPU_INFO") if n})
        if names:
            meta["chip"] = names[0]
    if "AICORE_FREQ" in db.tables and "freq" in db.columns("AICORE_FREQ"):
        freqs = [float(f) for (f,) in db.rows("SELECT freq FROM AICORE_FREQ") if isinstance(f, int | float) and f > 0]
        if freqs:
            meta["aicore_clock_mhz"] = float(np.median(freqs))
    if "RANK_DEVICE_MAP" in db.tables:
        ranks = db.rows("SELECT rankId, deviceId FROM RANK_DEVICE_MAP")
        if len(ranks) == 1:
            meta["rank"], meta["devices"] = ranks[0][0], [ranks[0][1]]
    return meta


def _select(db: _Db, table: str, wanted: dict[str, str], alias: str) -> list[str]:
    have = db.columns(table)
    return [f'{alias}."{col}"' if col in have else "NULL" for col in wanted.values()]


def _kernels(db: _Db, strings: _Strings) -> RawOps:
    text_cols = _select(db, "COMPUTE_TASK_INFO", _KERNEL_COLUMNS, "c")
    num_cols = _select(db, "COMPUTE_TASK_INFO", _NUMERIC, "c")
    task_cols = _select(db, "TASK", _TASK, "t")
    launch = "CANN_API" in db.tables and {"connectionId", "startNs", "endNs"} <= db.columns("CANN_API")
    has_conn = "connectionId" in db.columns("TASK")
    launch_cols = "a.startNs, a.endNs" if launch and has_conn else "NULL, NULL"
    join = "LEFT JOIN CANN_API a ON a.connectionId = t.connectionId" if launch and has_conn else ""
    model_col = 't."modelId"' if "modelId" in db.columns("TASK") else "NULL"
    selected = ["t.startNs", "t.endNs", "t.globalTaskId", *task_cols, *text_cols, *num_cols, launch_cols, model_col]
    rows = db.rows(
        f"SELECT {', '.join(selected)} FROM TASK t JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId "
        f"{join} ORDER BY t.startNs, t.globalTaskId"
    )
    width = len(selected) + 1  # launch_cols is two columns
    cols: list[tuple[object, ...]] = list(zip(*rows, strict=True)) if rows else [()] * width
    start = _ints(cols[0], "TASK.startNs")
    end = _ints(cols[1], "TASK.endNs")
    out: dict[str, pa.Array] = {"task_start_ns": pa.array(start), "task_dur_ns": pa.array(end - start)}
    at = 3
    for ours in _TASK:
        out[ours] = _optional_ints(cols[at])
        at += 1
    for ours in _KERNEL_COLUMNS:
        texts = strings.texts(list(cols[at]))
        at += 1
        if ours.endswith("shapes"):
            texts = _clean_shapes(texts)
        elif ours not in ("op_name", "op_type"):
            texts = pc.if_else(pc.is_in(texts, pa.array(_MISSING_TEXT)), pa.scalar(None, pa.string()), texts)
        out[ours] = texts
    out["op_name"] = pc.fill_null(out["op_name"], "")
    out["op_type"] = base_ascend_types(pc.fill_null(out["op_type"], ""))
    for ours in _NUMERIC:
        out[ours] = _optional_ints(cols[at])
        at += 1
    launch_start, launch_end = _optional_ints(cols[at]), _optional_ints(cols[at + 1])
    model = [m if isinstance(m, int) and not isinstance(m, bool) else None for m in cols[at + 2]]
    out["graph_launch"] = pa.array([graph_task(m) for m in model], pa.bool_())
    if launch_start.null_count < len(launch_start):
        out["host_launch_start_ns"] = launch_start
        out["host_launch_dur_ns"] = pc.subtract(launch_end, launch_start)
    out.update(_pmu(db, strings, [int(g) for g in cols[2]]))  # type: ignore[call-overload]
    # the step of a kernel is the step its launch fell in (the device may run it after the host frame ends)
    when = pc.coalesce(launch_start, pa.array(start)).to_numpy(zero_copy_only=False)
    return RawOps(out, when)


def _pmu(db: _Db, strings: _Strings, task_ids: list[int]) -> dict[str, pa.Array]:
    """{pipe}_time_ns / {pipe}_ratio per kernel, the busier side of a MIX kernel (as the text importer)."""
    if "TASK_PMU_INFO" not in db.tables or not task_ids:
        return {}
    wanted = {
        f"{prefix}{pipe}_{kind}": (pipe, kind)
        for pipe, prefixes in PIPE_SIDES.items()
        for prefix in prefixes
        if prefix
        for kind in ("time", "ratio")
    }
    name_ids = {strings.by_text[n]: n for n in wanted if n in strings.by_text}
    if not name_ids:
        return {}
    marks = ",".join("?" * len(name_ids))
    rows = db.rows(f"SELECT globalTaskId, name, value FROM TASK_PMU_INFO WHERE name IN ({marks})", *name_ids)
    row_of: dict[object, int] = {g: i for i, g in enumerate(task_ids)}
    values: dict[str, np.ndarray] = {}
    for gid, name, value in rows:
        i = row_of.get(gid)
        if i is None or not isinstance(value, int | float) or not isinstance(name, int):
            continue
        pipe, kind = wanted[name_ids[name]]
        key = f"{pipe}_time_ns" if kind == "time" else f"{pipe}_ratio"
        arr = values.setdefault(key, np.full(len(task_ids), np.nan))
        arr[i] = value if np.isnan(arr[i]) else max(arr[i], value)
    out: dict[str, pa.Array] = {}
    for key, arr in values.items():
        top = 2.0**62 if key.endswith("_ns") else 1e6  # beyond: a damaged counter, read as missing
        missing = ~((arr >= 0) & (arr < top))
        arr = np.where(missing, 0.0, arr)
        if key.endswith("_ns"):
            out[key] = pa.array(np.rint(np.nan_to_num(arr)).astype(np.int64), mask=missing)
        else:
            out[key] = pa.array(np.nan_to_num(arr).astype(np.float32), mask=missing)
    return out


def _communication(db: _Db, strings: _Strings) -> RawOps | None:
    if "COMMUNICATION_OP" not in db.tables:
        return None
    have = db.columns("COMMUNICATION_OP")
    if not {"opName", "startNs", "endNs"} <= have:
        return None
    op_type = "opType" if "opType" in have else "NULL"
    wait = "waitNs" if "waitNs" in have else "NULL"
    rows = db.rows(f"SELECT startNs, endNs, opName, {op_type}, {wait} FROM COMMUNICATION_OP ORDER BY startNs")
    if not rows:
        return None
    start, end, names, types, waits = (list(c) for c in zip(*rows, strict=True))
    begin = _ints(start, "COMMUNICATION_OP.startNs")
    name = pc.fill_null(strings.texts(names), "")
    kind = strings.texts(types)
    # the text export's Type: the op name up to its numbering (hcom_allReduce__210_0_1 -> hcom_allReduce_)
    derived = pc.replace_substring_regex(name, r"_(\d+_)*\d+$", "")
    return RawOps(
        {
            "op_name": name,
            "op_type": pc.coalesce(kind, derived),
            "task_type": pa.array(["HCCL"] * len(rows), pa.string()),
            "task_start_ns": pa.array(begin),
            "task_dur_ns": pa.array(_ints(end, "COMMUNICATION_OP.endNs") - begin),
            "task_wait_ns": _optional_ints(waits),
        },
        begin,
    )


def _concat(parts: list[RawOps]) -> RawOps:
    names = [n for n in parts[0].columns if all(n in p.columns for p in parts)]
    extra = {n for p in parts for n in p.columns} - set(names)
    cols: dict[str, pa.Array] = {}
    for n in [*names, *sorted(extra)]:
        typ = next(p.columns[n].type for p in parts if n in p.columns)
        cols[n] = pa.concat_arrays([p.columns[n] if n in p.columns else pa.nulls(p.rows, typ) for p in parts])
    times = [p.step_time_ns if p.step_time_ns is not None else np.zeros(p.rows, np.int64) for p in parts]
    return RawOps(cols, np.concatenate(times))


def _steps(db: _Db) -> RawSteps | None:
    if "STEP_TIME" not in db.tables or not {"id", "startNs", "endNs"} <= db.columns("STEP_TIME"):
        return None
    rows = [r for r in db.rows("SELECT id, startNs, endNs FROM STEP_TIME ORDER BY startNs") if None not in r]
    if not rows:
        return None
    step, start, end = (np.array(c, dtype=np.int64) for c in zip(*rows, strict=True))
    return RawSteps(step, start, end - start)


def _framework(db: _Db, strings: _Strings) -> RawFramework | None:
    if "PYTORCH_API" not in db.tables or not {"startNs", "endNs", "name"} <= db.columns("PYTORCH_API"):
        return None
    have = db.columns("PYTORCH_API")
    where = ""
    if "type" in have and "ENUM_API_TYPE" in db.tables:
        op = [i for (i, n) in db.rows("SELECT id, name FROM ENUM_API_TYPE") if n == "op"]
        where = f"WHERE type = {int(op[0])}" if op else ""  # type: ignore[call-overload]
    tid = "globalTid" if "globalTid" in have else "NULL"
    shapes = "inputShapes" if "inputShapes" in have else "NULL"
    rows = db.rows(
        f"SELECT startNs, endNs, name, {tid}, {shapes} FROM PYTORCH_API {where} ORDER BY CAST(startNs AS INTEGER)"
    )
    if not rows:
        return None
    start, end, names, tids, shape_ids = (list(c) for c in zip(*rows, strict=True))
    begin = _ints(start, "PYTORCH_API.startNs")
    global_tid = [int(t) if isinstance(t, int) else None for t in tids]
    return RawFramework(
        index=np.arange(len(rows), dtype=np.int64),
        name=pc.fill_null(strings.texts(names), ""),
        start_ns=begin,
        dur_ns=np.maximum(_ints(end, "PYTORCH_API.endNs") - begin, 0),
        pid=[None if t is None else t >> 32 for t in global_tid],  # globalTid = pid << 32 | tid
        tid=[None if t is None else t & 0xFFFFFFFF for t in global_tid],
        input_shapes=_clean_shapes(strings.texts(shape_ids)),
    )


def _ints(values: tuple[object, ...] | list[object], where: str) -> np.ndarray:
    """A required time column (TEXT in some tables, as PYTORCH_API.startNs): int64, or _BadTime naming it."""
    out = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        try:
            out[i] = int(v)  # type: ignore[call-overload]
        except (TypeError, ValueError, OverflowError):
            raise _BadTime(f"{where}, row {i + 1}", v) from None
    return out


def _optional_ints(values: tuple[object, ...] | list[object]) -> pa.Array:
    ok = [int(v) if isinstance(v, int | float) and np.isfinite(v) and abs(v) < 2**62 else None for v in values]
    return pa.array(ok, pa.int64())


def _clean_shapes(texts: pa.Array) -> pa.Array:
    """As the text export's cells: N/A and empty cells null, then the quotes stripped (`""`, a scalar's shape,
    stays an empty string)."""
    raw = pc.utf8_trim_whitespace(texts)
    missing = pc.is_in(raw, pa.array(_MISSING_TEXT))
    return pc.if_else(missing, pa.scalar(None, pa.string()), pc.utf8_trim(raw, characters='"'))


def db_profile(db_path: Path, source: Path, meta: dict[str, object] | None = None) -> Profile:
    """The Profile of one db export; `source` is what the user passed (the db, or the profile directory)."""
    found = read_ascend_db(db_path)
    if found.ops.rows == 0 and found.framework is None:
        raise InputError(f"{db_path}: a profiler database with no device kernels and no framework ops")
    merged = {**(meta or {}), **found.meta, "db_file": str(db_path), "op_rows_from": "db (TASK, COMPUTE_TASK_INFO)"}
    return assemble(
        "ascend_db",
        str(source),
        found.ops,
        framework=found.framework,
        profiler_steps=found.steps,
        meta=merged,
    )
