"""Read a Chrome/Perfetto JSON trace (.json or .json.gz, bare array or `{"traceEvents": [...]}`) into Python objects.

One `orjson.loads` of the whole document (with the garbage collector paused: the parse allocates millions of
containers and would otherwise trigger full collections). Perfetto's tokenizer is more lenient than JSON in two
ways that real traces rely on, and both are accepted here and reported as info: a bare array whose closing `]` is
missing (the Trace Event Format allows it, for traces of crashed processes) and trailing commas before `]`.
Anything else that is not a readable trace raises `InputError` naming the file and the fix. The input is only read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from atbprof import inputs
from atbprof.errors import InputError
from atbprof.gc_pause import gc_paused

RUN_TRACE_NAMES = ("trace.json.gz", "trace.json")
"""What `atbprof run` writes; a run directory given as the trace resolves to the first that exists."""
_TRAILING_COMMA = re.compile(rb",(\s*\])")  # only before "]": Perfetto tolerates it in the event array
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class LoadedTrace:
    path: Path
    events: list[Any]
    container: Literal["array", "object"]
    top_level_keys: tuple[str, ...] = ()
    tolerated: list[str] = field(default_factory=list)
    """Leniencies Perfetto shares that this file needed: `array_not_closed`, `trailing_comma`."""
    display_time_unit: str | None = None
    has_system_trace: bool = False


def resolve_trace_path(path: Path) -> Path:
    if not path.exists():
        raise InputError(
            f"{path}: no such file; pass a Chrome/Perfetto JSON trace (.json or .json.gz) or a run directory"
        )
    if path.is_dir():
        for name in RUN_TRACE_NAMES:
            if (path / name).is_file():
                return path / name
        if (path / "trace.pftrace").is_file():
            raise InputError(
                f"{path} holds only trace.pftrace, a Perfetto protobuf trace; `validate` checks Chrome JSON traces "
                "(the protobuf needs no JSON-importer rules): write trace.json.gz too (--trace-format both)"
            )
        raise InputError(
            f"{path} is a directory without {' or '.join(RUN_TRACE_NAMES)}; pass the trace file itself, "
            "or a run directory written by `atbprof run` with its trace enabled"
        )
    return path


def read_bytes(path: Path) -> bytes:
    """The trace's bytes, inflated when gzip (regular files within the input cap only)."""
    raw = inputs.read_bytes(path)
    return inputs.gunzip(raw, path) if raw[:2] == _GZIP_MAGIC else raw


def _not_a_trace(path: Path, data: bytes) -> InputError:
    head = data.lstrip()[:1]
    if not head:
        return InputError(f"{path}: the file is empty; pass a Chrome/Perfetto JSON trace")
    if data[:1] == b"\x0a":  # protobuf field 1 (TracePacket), length-delimited: a Perfetto .pftrace
        return InputError(
            f"{path}: this looks like a Perfetto protobuf trace (.pftrace); `validate` checks Chrome JSON traces "
            "(.json / .json.gz) — open a .pftrace with `atbprof open` or in ui.perfetto.dev directly"
        )
    shown = head.decode("latin-1")
    return InputError(
        f"{path}: not a JSON trace (it starts with {shown!r}, not '[' or '{{'); pass a Chrome Trace Event Format "
        "file: a JSON array of events or an object with a traceEvents array"
    )


def _decode_error(path: Path, data: bytes, err: orjson.JSONDecodeError, container: str) -> InputError:
    if "end of data" in err.msg:
        if container == "array":
            what = "Perfetto would silently keep only the complete events before the cut and drop the rest"
        else:
            what = "Perfetto refuses it ('JSON trace file is incomplete')"
        return InputError(
            f"{path}: truncated JSON: the document ends at byte {len(data):,} in the middle of a value "
            f"(line {err.lineno}, column {err.colno}); {what}. The writer was interrupted or the copy is "
            "incomplete: regenerate or re-copy the trace"
        )
    return InputError(
        f"{path}: invalid JSON at line {err.lineno}, column {err.colno} (byte {err.pos:,}): {err.msg}; "
        "fix the writer (Perfetto rejects the trace at this point too)"
    )


def _loads_lenient(path: Path, data: bytes, container: str) -> tuple[Any, list[str]]:
    try:
        return orjson.loads(data), []
    except orjson.JSONDecodeError as first:
        error = first
    tolerated: list[str] = []
    body = data
    if _TRAILING_COMMA.search(body):
        body = _TRAILING_COMMA.sub(rb"\1", body)
        tolerated.append("trailing_comma")
    attempts = [body]
    if container == "array":
        attempts.append(body.rstrip().rstrip(b",").rstrip() + b"]")
    for i, attempt in enumerate(attempts):
        try:
            doc = orjson.loads(attempt)
        except orjson.JSONDecodeError:
            continue
        return doc, tolerated + (["array_not_closed"] if i == 1 else [])
    raise _decode_error(path, data, error, container)


def load_trace(path: Path) -> LoadedTrace:
    """Parse the trace at `path` (a run directory resolves to its trace). Raises `InputError` if unreadable."""
    path = resolve_trace_path(Path(path))
    data = read_bytes(path)
    head = data.lstrip()[:1]
    if head not in (b"[", b"{"):
        raise _not_a_trace(path, data)
    container: Literal["array", "object"] = "array" if head == b"[" else "object"
    with gc_paused():
        doc, tolerated = _loads_lenient(path, data, container)
    del data
    if isinstance(doc, list):
        return LoadedTrace(path, doc, "array", tolerated=tolerated)
    assert isinstance(doc, dict)
    events = doc.get("traceEvents")
    system = isinstance(doc.get("systemTraceEvents"), str)
    if events is None and not system:
        keys = ", ".join(list(doc)[:8]) or "none"
        raise InputError(
            f"{path}: a JSON object without a traceEvents array (top-level keys: {keys}); this is not a Chrome "
            "trace: pass the profiler's trace file (torch/Kineto `*.pt.trace.json`, Ascend `trace_view.json`, "
            "or an atbprof `trace.json.gz`)"
        )
    if events is not None and not isinstance(events, list):
        raise InputError(
            f"{path}: traceEvents is a {type(events).__name__}, not an array; Perfetto refuses it "
            "('traceEvents is not an array'): write the events as a JSON array"
        )
    unit = doc.get("displayTimeUnit")
    return LoadedTrace(
        path,
        events or [],
        "object",
        top_level_keys=tuple(doc),
        tolerated=tolerated,
        display_time_unit=unit if isinstance(unit, str) else None,
        has_system_trace=system,
    )
