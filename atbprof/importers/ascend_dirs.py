"""Profile directories: torch_npu `*_ascend_pt` and native msprof `PROF_*` (docs/ascend_profiling_formats.md §1.1/2.1).

  <x>_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv   op rows (Step Id, shapes, PMU)
                                      /trace_view.json      framework ops, ProfilerStep#N, host launches
               /profiler_info_<rank>.json                   profiler level, aic metrics
               /PROF_*/mindstudio_profiler_output/...       the embedded msprof output (used if kernel_details lacks)
  PROF_*/mindstudio_profiler_output/op_summary_*.csv        op rows (sliced: op_summary_slice_<n>_<ts>.csv)
                                   /msprof_*.json           timeline (sliced likewise)
  PROF_*/device_<n>/summary/op_summary_*.csv, device_<n>/timeline/msprof_*.json   (before CANN 8.0)
The files are found by the layout; what each one is, is still checked from its header / keys. Without an op table
the op rows come from the timeline's Ascend Hardware tasks. Host launches of CSV rows are joined from the timeline on
(stream, start time).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.errors import InputError
from atbprof.importers.ascend_json import AscendTrace, is_ascend_trace, read_ascend_trace
from atbprof.importers.assemble import RawFramework, RawOps, RawSteps, assemble
from atbprof.importers.base import Profile
from atbprof.importers.csv_tables import classify, concat_ops, header_of, read_op_table, slice_key
from atbprof.importers.guard import importer
from atbprof.importers.trace_events import load_trace
from atbprof.inputs import read_bytes, read_head

PT_OUTPUT = "ASCEND_PROFILER_OUTPUT"
PT_DB = "ascend_pytorch_profiler*.db"  # export_type=db (analysis.db beside it holds only communication summaries)
MSPROF_DB = "msprof_*.db"
MSPROF_OUTPUT = "mindstudio_profiler_output"
_STAMP = re.compile(r"(\d{14,17})(?=\.(csv|json|db)$)")


def is_ascend_pt(path: Path) -> bool:
    """A torch_npu profile, or its ASCEND_PROFILER_OUTPUT directory itself."""
    if not path.is_dir():
        return False
    return (
        (path / PT_OUTPUT).is_dir()
        or any((path / name).is_file() for name in ("kernel_details.csv", "trace_view.json"))
        or bool(_files(path, PT_DB))
    )


def is_msprof_dir(path: Path) -> bool:
    return path.is_dir() and bool(_msprof_outputs(path))


def _msprof_outputs(path: Path) -> list[Path]:
    """The directories holding op_summary / msprof json: mindstudio_profiler_output, or device_<n>/summary|timeline
    (old layout), or `path` itself when it is such a directory."""
    if (path / MSPROF_OUTPUT).is_dir():
        return [path / MSPROF_OUTPUT]
    old = sorted(p for p in path.glob("device_*/summary") if p.is_dir())
    old += sorted(p for p in path.glob("device_*/timeline") if p.is_dir())
    if old:
        return old
    if any(path.glob("op_summary*.csv")) or any(path.glob("msprof*.json")) or any(path.glob(MSPROF_DB)):
        return [path]
    return []


@importer
def load_ascend_pt(path: Path) -> Profile:
    out = path / PT_OUTPUT if (path / PT_OUTPUT).is_dir() else path
    kernels = out / "kernel_details.csv"
    trace_file = out / "trace_view.json"
    # the msprof output torch_npu parses its own files from (used for what ASCEND_PROFILER_OUTPUT lacks)
    embedded = [d for p in sorted(path.glob("PROF_*")) if p.is_dir() for d in _msprof_outputs(p)]
    meta: dict[str, object] = _profiler_info(path)
    tables = [kernels] if kernels.is_file() else _latest([f for d in embedded for f in _files(d, "op_summary*.csv")])
    ops, table_meta = _read_tables(tables)
    meta.update(table_meta)
    timelines = [f for d in embedded for f in _files(d, "msprof*.json") if _is_timeline(f)]
    trace = _read_trace([trace_file] if trace_file.is_file() else _latest(timelines))
    if ops is None and trace is None:
        dbs = _files(out, PT_DB) or _latest([f for d in embedded for f in _files(d, MSPROF_DB)])
        if dbs:  # a db export: the text files were not written (export_type=db)
            from atbprof.importers.ascend_db import db_profile  # sqlite3 loads where a database is met

            return db_profile(dbs[0], path, meta)
        raise InputError(
            f"{path}: a torch_npu profile directory without {PT_OUTPUT}/kernel_details.csv, trace_view.json "
            "or ascend_pytorch_profiler_<rank>.db "
            "(was the profile parsed? torch_npu writes them at the end of profiling, or run "
            "torch_npu.profiler.profiler.analyse on the directory)"
        )
    return _combine("ascend_pt", path, ops, trace, meta)


@importer
def load_msprof_dir(path: Path) -> Profile:
    outputs = _msprof_outputs(path)
    tables = [p for d in outputs for p in _files(d, "op_summary*.csv")]
    traces = [p for d in outputs for p in _files(d, "msprof*.json") if _is_timeline(p)]
    meta: dict[str, object] = {}
    ops, table_meta = _read_tables(_latest(tables)) if tables else (None, {})
    meta.update(table_meta)
    trace = _read_trace(_latest(traces))
    if ops is None and trace is None:
        dbs = _latest([p for d in outputs for p in _files(d, MSPROF_DB)])
        if dbs:
            from atbprof.importers.ascend_db import db_profile  # sqlite3 loads where a database is met

            return db_profile(dbs[0], path, meta)
        raise InputError(
            f"{path}: an msprof directory without op_summary_*.csv, msprof_*.json or msprof_*.db in {MSPROF_OUTPUT}/ "
            "(run `msprof --export=on --output=<dir>` / `msprof --parse=on` to produce them)"
        )
    return _combine("msprof", path, ops, trace, meta)


def _files(directory: Path, pattern: str) -> list[Path]:
    return sorted((p for p in directory.glob(pattern) if p.is_file()), key=slice_key)


def _is_timeline(path: Path) -> bool:
    """msprof_<ts>.json, msprof_slice_<n>_<ts>.json, msprof_<dev>_<model>_<iter>_<ts>.json (before CANN 8.0); not
    msprof_tx_*.json and friends."""
    return re.fullmatch(r"msprof(_slice_\d+)?(_\d+)+\.json", path.name) is not None


def _latest(files: list[Path]) -> list[Path]:
    """One export: when a directory holds outputs of several parses (different time stamps), the newest."""
    stamps = {m.group(1) for p in files if (m := _STAMP.search(p.name))}
    if len(stamps) <= 1:
        return files
    newest = max(stamps)
    return [p for p in files if newest in p.name]


def _read_tables(files: list[Path]) -> tuple[RawOps | None, dict[str, object]]:
    if not files:
        return None, {}
    parts: list[RawOps] = []
    meta: dict[str, object] = {}
    warnings: list[str] = []
    for file in files:
        head = read_head(file, 1 << 16)
        header = header_of(file, head)
        variant = classify(file, header)
        if variant is None:
            raise InputError(f"{file}: not an op table (header {', '.join(header[:6])}, ...)")
        ops, file_meta = read_op_table(file, None, variant, header)
        parts.append(ops)
        found = file_meta.pop("warnings", [])
        warnings += [str(w) for w in found] if isinstance(found, list) else []
        meta.update(file_meta)
    meta["table_files"] = [str(f) for f in files]
    if warnings:
        meta["warnings"] = warnings
    return concat_ops(parts), meta


def _read_trace(files: list[Path]) -> AscendTrace | None:
    if not files:
        return None
    traces = []
    for file in files:
        events = load_trace(file, read_bytes(file))
        if not is_ascend_trace(events):
            raise InputError(f"{file}: a trace without the Ascend Hardware / CANN layers: not an Ascend timeline")
        traces.append(read_ascend_trace(events))
    if len(traces) == 1:
        traces[0].meta["trace_files"] = [str(files[0])]
        return traces[0]
    return _merge_slices(traces, files)


def _merge_slices(traces: list[AscendTrace], files: list[Path]) -> AscendTrace:
    """Sliced timelines (msprof_slice_<n>_*.json) are one timeline cut in pieces: concatenate them."""
    ops = concat_ops([t.ops for t in traces])
    firsts = [t.first_event_ns for t in traces if t.first_event_ns is not None]
    frameworks = [t.framework for t in traces if t.framework is not None]
    steps = [t.steps for t in traces if t.steps is not None]
    framework = None
    if frameworks:
        framework = RawFramework(
            index=np.concatenate([f.index for f in frameworks]),
            name=[n for f in frameworks for n in f.name],
            start_ns=np.concatenate([f.start_ns for f in frameworks]),
            dur_ns=np.concatenate([f.dur_ns for f in frameworks]),
            pid=[p for f in frameworks for p in f.pid],
            tid=[t for f in frameworks for t in f.tid],
            input_shapes=[s for f in frameworks for s in f.input_shapes],
        )
    merged_steps = (
        RawSteps(
            np.concatenate([s.step for s in steps]),
            np.concatenate([s.start_ns for s in steps]),
            np.concatenate([s.dur_ns for s in steps]),
        )
        if steps
        else None
    )
    meta = dict(traces[0].meta)
    meta["trace_files"] = [str(f) for f in files]
    launches = pa.concat_tables([t.launches for t in traces])
    return AscendTrace(ops, framework, merged_steps, min(firsts, default=None), launches, meta)


def _profiler_info(path: Path) -> dict[str, object]:
    """torch_npu's profiler configuration (level, aic metrics) and the CANN version the capture recorded, if any;
    a damaged file is only a warning."""
    meta = _recorded_version(path)
    for info in sorted(path.glob("profiler_info*.json")):
        try:
            doc = orjson.loads(read_bytes(info, 1 << 24))
            experimental = doc["config"]["experimental_config"]
            return meta | {
                "profiler_level": experimental.get("_profiler_level"),
                "aic_metrics": experimental.get("_aic_metrics"),
            }
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError, OSError):
            return meta | {"warnings": [f"{info.name}: unreadable profiler configuration, ignored"]}
    return meta


def _recorded_version(path: Path) -> dict[str, object]:
    """{"cann_version": ...} when profiler_metadata.json records one (a capture adds it with torch_npu's
    `prof.add_metadata("cann_version", ...)`); the fusion catalogue names kernels by release."""
    meta_file = path / "profiler_metadata.json"
    if not meta_file.is_file():
        return {}
    try:
        doc = orjson.loads(read_bytes(meta_file, 1 << 24))
    except (orjson.JSONDecodeError, OSError):
        return {}
    if not isinstance(doc, dict):
        return {}
    found = next((v for k, v in doc.items() if str(k).lower() == "cann_version"), None)
    return {"cann_version": found[:64]} if isinstance(found, str) else {}


def _combine(kind: str, path: Path, ops: RawOps | None, trace: AscendTrace | None, meta: dict[str, object]) -> Profile:
    if trace is not None:
        meta.update({k: v for k, v in trace.meta.items() if k not in meta or k == "trace_files"})
    if ops is None:
        assert trace is not None
        ops = trace.ops
        meta["op_rows_from"] = "timeline (Ascend Hardware tasks)"
    else:
        meta["op_rows_from"] = "op table"
        if trace is not None:
            ops = _join_launches(ops, trace.launches)
    if "profiler_level" not in meta or meta["profiler_level"] is None:
        meta["profiler_level"] = _level_from_columns(meta)
    return assemble(
        kind,
        str(path),
        ops,
        framework=trace.framework if trace else None,
        profiler_steps=trace.steps if trace else None,
        first_event_ns=trace.first_event_ns if trace else None,
        meta=meta,
    )


def _join_launches(ops: RawOps, launches: pa.Table) -> RawOps:
    """host_launch_* of CSV rows from the timeline task with the same stream and start time (start time alone when
    the table has no stream column, as at Level0)."""
    if launches.num_rows == 0:
        return ops
    keys = ["stream_id", "task_start_ns"] if "stream_id" in ops.columns else ["task_start_ns"]
    right = launches.filter(pc.is_valid(launches.column("host_launch_start_ns")))
    right = right.group_by(keys, use_threads=False).aggregate(
        [("host_launch_start_ns", "first"), ("host_launch_dur_ns", "first")]
    )
    left = pa.table({"row": pa.array(range(ops.rows), pa.int64()), **{k: ops.columns[k] for k in keys}})
    joined = left.join(right, keys, join_type="left outer").sort_by("row")
    cols = dict(ops.columns)
    cols["host_launch_start_ns"] = joined.column("host_launch_start_ns_first").combine_chunks()
    cols["host_launch_dur_ns"] = joined.column("host_launch_dur_ns_first").combine_chunks()
    return RawOps(cols, ops.step_time_ns)


def _level_from_columns(meta: dict[str, object]) -> str | None:
    """Level0 kernel tables have no PMU columns and no Type (all derived from names)."""
    columns = meta.get("columns")
    if not isinstance(columns, list):
        return None
    return "Level0" if "Input Shapes" not in columns else None
