"""What atbprof wrote: a marker file in every output directory, a signature at the head of every output file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import orjson

from atbprof.version import __version__

OutputKind = Literal[
    "run",
    "export",
    "diff-trace",
    "device-spec",
    "cluster-tables",
    "cluster-trace",
    "sweep",
    "plots",
    "report",
    "kernels",
]
MARKER = ".atbprof-output.json"
"""In every directory atbprof writes: its kind and every file in it (a file it does not list is the user's)."""
FILE_SIGNATURE = b'"generator":"atbprof"'
"""Within the first bytes of every single-file output (the trace's leading otherData)."""
_LEGACY_RUN_FILES = frozenset({"ops.parquet", "steps.parquet", "run.json", "trace.json.gz", "trace.pftrace"})
_SIGNATURE_BYTES = 256


def marker_bytes(kind: OutputKind, root: Path) -> bytes:
    """The marker for the finished directory `root` (deterministic: sorted relative paths, no time)."""
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.name != MARKER)
    doc = {"generator": "atbprof", "atbprof_version": __version__, "kind": kind, "files": files}
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def read_marker(root: Path) -> dict[str, object] | None:
    """The marker of an atbprof output directory, or None (no marker, or not one of ours)."""
    try:
        with open(root / MARKER, "rb") as fh:
            doc = orjson.loads(fh.read(1 << 20))
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(doc, dict) or doc.get("generator") != "atbprof" or not isinstance(doc.get("files"), list):
        return None
    return doc


def foreign_entries(root: Path, kind: OutputKind) -> list[str] | None:
    """Entries of `root` atbprof did not write ([] = all ours), or None if `root` is not an atbprof `kind` output."""
    marker = read_marker(root)
    entries = sorted(os.listdir(root))
    if marker is None:
        return _legacy_run(root, entries) if kind == "run" else None
    if marker.get("kind") != kind:
        return None
    files = marker["files"]
    listed = {str(f) for f in files} if isinstance(files, list) else set()
    tops = {f.split("/", 1)[0] for f in listed} | {MARKER}
    foreign = [e for e in entries if e not in tops]
    for path in root.rglob("*"):  # deeper files the user added
        rel = path.relative_to(root).as_posix()
        if path.is_file() and "/" in rel and rel not in listed and rel.split("/", 1)[0] in tops:
            foreign.append(rel)
    return sorted(foreign)


def _legacy_run(root: Path, entries: list[str]) -> list[str] | None:
    """A run directory of an atbprof before markers: run.json says so, and every file is a run file."""
    try:
        with open(root / "run.json", "rb") as fh:
            doc = orjson.loads(fh.read(64 << 20))
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(doc, dict) or "atbprof_version" not in doc:
        return None
    return [e for e in entries if e not in _LEGACY_RUN_FILES]


def file_is_ours(path: Path) -> bool:
    """A single-file output of atbprof: its first bytes (inflated when gzip) carry the signature."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_SIGNATURE_BYTES * 4)
    except OSError:
        return False
    if head.startswith(b"PAR1"):  # a Parquet file says so in its footer's key-value metadata
        return _parquet_is_ours(path)
    if head.startswith(b"\x1f\x8b"):
        import zlib

        try:
            head = zlib.decompressobj(wbits=31).decompress(head, _SIGNATURE_BYTES)
        except zlib.error:
            return False
    return FILE_SIGNATURE in head[:_SIGNATURE_BYTES]


def _parquet_is_ours(path: Path) -> bool:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowException):
        return False
    return meta.get(b"generator") == b"atbprof"
