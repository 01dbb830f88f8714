"""`load_profile(path)`: tell what an input is from its content and hand it to its importer.

Directories by layout (ops.parquet; ASCEND_PROFILER_OUTPUT; mindstudio_profiler_output / device_<n>/summary);
files by their bytes, never by their name: gzip and Parquet by magic bytes, JSON by its first character (then
Ascend vs Kineto by the process_name metadata inside), CSV by its header line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from atbprof.errors import InputError
from atbprof.importers.ascend_dirs import is_ascend_pt, is_msprof_dir, load_ascend_pt, load_msprof_dir
from atbprof.importers.ascend_json import is_ascend_trace, read_ascend_trace
from atbprof.importers.assemble import assemble
from atbprof.importers.base import Profile
from atbprof.importers.csv_tables import classify, header_of, read_op_table
from atbprof.importers.guard import importer
from atbprof.importers.ours import is_run_dir, load_run
from atbprof.importers.trace_events import TraceEvents, load_trace
from atbprof.inputs import gunzip, read_bytes, read_head
from atbprof.optable.schema import read_ops

ACCEPTED = """atbprof reads:
  - a run directory of `atbprof run` (ops.parquet, steps.parquet, run.json)
  - a torch_npu profile directory (*_ascend_pt: ASCEND_PROFILER_OUTPUT/kernel_details.csv, trace_view.json,
    or the export_type=db ascend_pytorch_profiler_<rank>.db)
  - a native msprof directory (PROF_*: mindstudio_profiler_output/op_summary_*.csv, msprof_*.json, msprof_*.db)
  - a profiler database: ascend_pytorch_profiler_<rank>.db (torch_npu) or msprof_<timestamp>.db (msprof)
  - an op table: kernel_details.csv (torch_npu) or op_summary_*.csv (msprof), any CANN version / profiler level
  - an Ascend timeline: trace_view.json (torch_npu) or msprof_*.json (msprof)
  - a Kineto / torch.profiler trace (*.pt.trace.json, .json.gz)"""
_GZIP = b"\x1f\x8b"
_SQLITE = b"SQLite format 3\x00"  # ascend_db.SQLITE_MAGIC: the importers of formats not met load when met
_PARQUET = b"PAR1"
_HEAD = 1 << 16


@importer
def load_profile(path: Path, *, framework: bool = True, columns: Sequence[str] | None = None) -> Profile:
    """The profile at `path` (a file or a directory). Raises InputError naming the file and the problem.
    `framework=False` skips the framework-op table of a trace file when it has device kernels (diff needs none).
    `columns`: of an op table of ours, hold only these (a reader that needs a few; an import builds its table whole)."""
    if not path.exists():
        raise InputError(f"{path}: no such file or directory\n{ACCEPTED}")
    return _load_dir(path, columns) if path.is_dir() else _load_file(path, framework, columns)


@importer
def load_op_table(path: Path) -> Profile:
    """A kernel_details.csv / op_summary_*.csv (gzip allowed)."""
    head, data = _read_head(path)
    return _load_csv(path, head, data)


@importer
def load_timeline(path: Path) -> Profile:
    """An Ascend trace_view.json / msprof_*.json (gzip allowed)."""
    trace = load_trace(path, _read_all(path))
    if not is_ascend_trace(trace):
        raise InputError(f"{path}: a trace without the Ascend Hardware / CANN layers: not an Ascend timeline")
    return _ascend_profile(path, trace)


@importer
def load_kineto(path: Path) -> Profile:
    """A Kineto / torch.profiler trace (gzip allowed)."""
    data = _read_all(path)
    return _fast_kineto(path, data) or _kineto_profile(path, load_trace(path, data))


def _load_dir(path: Path, columns: Sequence[str] | None = None) -> Profile:
    if is_run_dir(path):
        return load_run(path, columns=columns)
    if is_ascend_pt(path):
        return load_ascend_pt(path)
    if is_msprof_dir(path):
        return load_msprof_dir(path)
    inside = sorted(
        p.name for p in path.iterdir() if p.is_dir() and (is_run_dir(p) or is_ascend_pt(p) or is_msprof_dir(p))
    )
    if inside:
        shown = ", ".join(inside[:8]) + (", ..." if len(inside) > 8 else "")
        raise InputError(f"{path}: holds {len(inside)} profiles ({shown}); pass one of them")
    if (path / "requests.parquet").is_file() and (path / "iterations.parquet").is_file():
        raise InputError(
            f"{path}: a serving run (requests and iterations, no kernels): its summary is in run.json; compare two "
            "with `atbprof diff BASE NEW`; for the kernels of one iteration run its batch (workload.kind: batch)"
        )
    raise InputError(f"{path}: a directory with no profile in it\n{ACCEPTED}")


def _read_head(path: Path, raw: bytes | None = None) -> tuple[bytes, bytes | None]:
    """The first bytes (decompressed if gzip) and, for gzip, all of the content (`raw`: the file's bytes, if read)."""
    head = read_head(path, _HEAD) if raw is None else raw[:_HEAD]
    if not head:
        raise InputError(f"{path}: empty file\n{ACCEPTED}")
    if not head.startswith(_GZIP):
        return head, None
    data = gunzip(read_bytes(path) if raw is None else raw, path)
    if not data:
        raise InputError(f"{path}: an empty gzip file")
    return data[:_HEAD], data


def _read_all(path: Path) -> bytes:
    _, data = _read_head(path)
    return data if data is not None else read_bytes(path)


def _load_file(path: Path, framework: bool = True, columns: Sequence[str] | None = None) -> Profile:
    raw = None
    if read_head(path, len(_GZIP)) == _GZIP:
        from atbprof.importers.kineto_scan import inflate_and_scan

        raw = read_bytes(path)
        streamed = inflate_and_scan(path, raw, _is_json, _HEAD)
        if streamed is not None:
            return _json_profile(path, streamed.document, framework, streamed.events)
    head, data = _read_head(path, raw)
    if head.startswith(_PARQUET):
        ops = read_ops(path, columns=columns)
        return Profile("atbprof-run", str(path), ops, meta={"origin_ns": 0})
    if head.startswith(_SQLITE):
        if data is not None:
            raise InputError(f"{path}: a gzip-compressed SQLite database; decompress it (gunzip) and pass the .db")
        from atbprof.importers.ascend_db import db_profile

        return db_profile(path, path)
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(f"{path}: UTF-16 text; Ascend and PyTorch tools write UTF-8 - convert the file to UTF-8")
    if b"\x00" in head:
        raise InputError(f"{path}: binary data, not a profile (no CSV or JSON text)\n{ACCEPTED}")
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"[", b"{"):
        data = data if data is not None else read_bytes(path)
        fast = _fast_kineto(path, data, framework)
        if fast is not None:
            return fast
        return _json_profile(path, lambda: data, framework)
    return _load_csv(path, head, data)


def _is_json(head: bytes) -> bool:
    """A head that _load_file would read as a JSON object trace (the scanner reads no other)."""
    return b"\x00" not in head and head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{"


def _json_profile(
    path: Path, document: Callable[[], bytes], framework: bool, scanned: TraceEvents | None = None
) -> Profile:
    """A JSON trace: from the scanner's columns where it read them and they are a Kineto trace, else the general
    path (which reads every valid trace and explains every invalid one) on the `document`'s bytes."""
    fast = _scanned_profile(path, scanned, framework) if scanned is not None else None
    if fast is not None:
        return fast
    trace = load_trace(path, document())
    return _ascend_profile(path, trace) if is_ascend_trace(trace) else _kineto_profile(path, trace, framework)


def _ascend_profile(path: Path, trace: TraceEvents) -> Profile:
    ascend = read_ascend_trace(trace)
    if ascend.ops.rows == 0 and ascend.framework is None:
        raise InputError(f"{path}: an Ascend timeline with no device tasks and no framework ops")
    return assemble(
        "trace_view",
        str(path),
        ascend.ops,
        framework=ascend.framework,
        profiler_steps=ascend.steps,
        first_event_ns=ascend.first_event_ns,
        meta={**ascend.meta, "trace_files": [str(path)]},
    )


def _fast_kineto(path: Path, data: bytes, framework: bool = True) -> Profile | None:
    """A Kineto trace through the fast decoder; None: the general path must read it (and explain any problem)."""
    from atbprof.importers.kineto_decode import NotFast, decode_kineto
    from atbprof.importers.kineto_scan import native_scanner, scan_kineto

    try:
        # the native scanner, where built, decides alone: what it refuses (a number past double range in a field
        # no importer reads, ...) msgspec would skip without checking, and orjson refuses
        trace = scan_kineto(path, data) if native_scanner() else decode_kineto(path, data)
    except (NotFast, InputError):
        return None
    return None if trace is None else _scanned_profile(path, trace, framework)


def _scanned_profile(path: Path, trace: TraceEvents, framework: bool) -> Profile | None:
    """The Kineto profile of a fast reader's events; None: the general path must read the file."""
    from atbprof.importers.kineto_decode import NotFast

    if is_ascend_trace(trace):
        return None
    try:
        return _kineto_profile(path, trace, framework)
    except (NotFast, InputError):
        return None


def _kineto_profile(path: Path, trace: TraceEvents, with_framework: bool = True) -> Profile:
    from atbprof.importers.kineto import read_kineto

    ops, framework, steps, first, meta, calls = read_kineto(trace, with_framework)
    if ops.rows == 0 and (framework is None or len(framework.index) == 0):
        raise InputError(
            f"{path}: a Chrome trace without GPU kernels (cat kernel) or framework ops (cat cpu_op): not a "
            f"torch.profiler / Kineto trace atbprof can use\n{ACCEPTED}"
        )
    return assemble(
        "kineto",
        str(path),
        ops,
        framework=framework,
        profiler_steps=steps,
        first_event_ns=first,
        meta=meta,
        host_calls=calls,
    )


def _load_csv(path: Path, head: bytes, data: bytes | None) -> Profile:
    if b"\x00" in head:
        raise InputError(f"{path}: binary data, not a CSV table")
    header = header_of(path, head)
    variant = classify(path, header)
    if variant is None:
        shown = ", ".join(header[:6]) + (", ..." if len(header) > 6 else "")
        raise InputError(f"{path}: not a profile atbprof knows (first line: {shown})\n{ACCEPTED}")
    ops, meta = read_op_table(path, data, variant, header)
    meta["table_files"] = [str(path)]
    return assemble(variant.kind, str(path), ops, meta=meta)
