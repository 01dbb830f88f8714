"""Which file `atbprof open` serves for a path: a trace file (checked to be one: a README or a Parquet table would load
nothing in the UI), the preferred trace of a run directory, or the timeline inside a profile directory (torch_npu's
ASCEND_PROFILER_OUTPUT/trace_view.json, msprof's mindstudio_profiler_output/msprof_*.json, a Kineto trace)."""

from __future__ import annotations

import zlib
from pathlib import Path

from atbprof.errors import InputError

RUN_TRACE_FILES = ("trace.pftrace", "trace.json.gz", "trace.json")
"""What a run directory may hold, in order of preference (the native format has no JSON-importer quirks)."""
PROFILE_TRACE_GLOBS = (
    "ASCEND_PROFILER_OUTPUT/trace_view.json",  # torch_npu: <name>_ascend_pt/
    "*_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json",  # the directory above one torch_npu profile
    "trace_view.json",  # ASCEND_PROFILER_OUTPUT/ itself
    "mindstudio_profiler_output/msprof_*.json",  # msprof: PROF_*/
    "*.pt.trace.json",  # torch.profiler / Kineto (tensorboard_trace_handler)
    "*.pt.trace.json.gz",
)
"""Where the timeline of a profile directory lies, in order; the first pattern with exactly one match wins."""
TRACE_SUFFIXES = (".json", ".json.gz", ".pftrace", ".perfetto-trace", ".pb")
_SNIFF_BYTES = 4096


def find_trace(path: Path) -> Path:
    """The trace file to serve for `path`: the file itself (checked to be a trace), the preferred trace of a run
    directory, or the timeline inside a profile directory (torch_npu, msprof, Kineto)."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such run directory or trace file; pass a directory written by `atbprof run`")
    if path.is_dir():
        for name in RUN_TRACE_FILES:
            candidate = path / name
            if candidate.is_file():
                return _inside(candidate, path)
        found = _profile_trace(path)
        if found is not None:
            return _check_trace(_inside(found, path))
        if (path / "ASCEND_PROFILER_OUTPUT").is_dir() or path.name == "ASCEND_PROFILER_OUTPUT":
            raise InputError(
                f"{path} is a torch_npu profile without its timeline (no ASCEND_PROFILER_OUTPUT/trace_view.json: "
                "captured with export_type db only, or not copied); `atbprof analyze` reads its tables, and a "
                "capture with export_type text writes the timeline"
            )
        raise InputError(
            f"{path} holds no trace (no {', '.join(RUN_TRACE_FILES)}, no profile timeline such as "
            "ASCEND_PROFILER_OUTPUT/trace_view.json); pass a run directory written with its trace "
            "(output.trace: true), a profile directory, or a trace file"
        )
    if not path.is_file():
        raise InputError(f"{path} is not a regular file; pass a trace file or a run directory")
    return _check_trace(path.resolve())


def _inside(candidate: Path, root: Path) -> Path:
    real = candidate.resolve()
    if not real.is_relative_to(root.resolve()):
        raise InputError(
            f"{candidate} is a symlink to {real}, outside {root}; refusing to serve it (pass the file itself if you "
            "mean it)"
        )
    return real


def _profile_trace(root: Path) -> Path | None:
    for pattern in PROFILE_TRACE_GLOBS:
        matches = sorted(p for p in root.glob(pattern) if p.is_file())
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            listed = ", ".join(str(m.relative_to(root)) for m in matches[:4])
            more = f" and {len(matches) - 4} more" if len(matches) > 4 else ""
            raise InputError(
                f"{root} holds {len(matches)} traces ({listed}{more}); pass the one to open, e.g. "
                f"`atbprof open {matches[0]}`"
            )
    return None


def _check_trace(path: Path) -> Path:
    """Refuse what is not a trace (a README, a Parquet table), naming what it is: the UI would show nothing."""
    if path.stat().st_size == 0:
        raise InputError(f"{path} is empty; regenerate the trace")
    with open(path, "rb") as f:
        head = f.read(_SNIFF_BYTES)
    what = _sniff(head)
    if what is None:
        return path
    raise InputError(
        f"{path} is not a trace ({what}); pass a Chrome/Perfetto trace ({', '.join(TRACE_SUFFIXES)}) or a run "
        "or profile directory"
    )


def _sniff(head: bytes) -> str | None:
    """None for something the Perfetto UI opens (JSON trace, gzip of one, protobuf); else what the bytes are."""
    if head.startswith(b"\x1f\x8b"):
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, _SNIFF_BYTES)
        except zlib.error:
            return "a damaged gzip file"
        if not head:
            return None  # too little to tell from the first block: the UI will say
    if head.startswith(b"PAR1"):
        return "a Parquet table: run `atbprof analyze` on it, or open its run directory"
    if head.startswith(b"SQLite format 3"):
        return "an SQLite database: `atbprof analyze` reads profiler databases"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] in (b"{", b"["):
        return None
    if head[:1] == b"\x0a":  # protobuf field 1, length-delimited: a Perfetto Trace's first TracePacket
        return None
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return "binary data that is neither JSON nor a Perfetto protobuf trace"
    first = text.split(b"\n", 1)[0][:60].decode("utf-8", "replace")
    return f"text starting {first!r}"
