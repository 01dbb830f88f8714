"""Reading a user's file within bounds: regular files only, a size cap before anything is read, gzip inflated in a
stream with the same cap. Every importer, the validator and the config loader read through here.

The cap (`max_input_bytes`) is 4096 MB by default, the size of a document the importers can hold in memory with
room to spare on a 24 GB machine; `atbprof --max-input-mb N` or ATBPROF_MAX_INPUT_MB raise (or lower) it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import cast

from atbprof.errors import InputError

try:  # isal (a dependency) inflates ~2x faster than zlib
    from isal import isal_zlib as zlib
except ImportError:  # pragma: no cover
    import zlib  # type: ignore[no-redef]

DEFAULT_MAX_INPUT_MB = 4096
ENV_MAX_INPUT_MB = "ATBPROF_MAX_INPUT_MB"
INFLATE_ERRORS = (cast("type[Exception]", zlib.error),)  # isal's IsalError is not an OSError
_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}
_override_mb: float | None = None


def set_max_input_mb(mb: float | None) -> None:
    """The cap for this process (the CLI's --max-input-mb); None: back to the environment / default."""
    global _override_mb
    _override_mb = mb


def max_input_bytes() -> int:
    if _override_mb is not None:
        return int(_override_mb * 1e6)
    raw = os.environ.get(ENV_MAX_INPUT_MB)
    if raw:
        try:
            mb = float(raw)
        except ValueError:
            raise InputError(f"{ENV_MAX_INPUT_MB}={raw!r}: expected a number of megabytes, e.g. 8192") from None
        if not 0 < mb < 1e9:
            raise InputError(f"{ENV_MAX_INPUT_MB}={raw!r}: expected megabytes between 0 and 1e9")
        return int(mb * 1e6)
    return DEFAULT_MAX_INPUT_MB * 1_000_000


def _raise_hint(limit: int) -> str:
    return f"raise the limit with `atbprof --max-input-mb {max(2 * limit // 1_000_000, 1)} ...` (or {ENV_MAX_INPUT_MB})"


def too_big(path: Path, size: int, limit: int, what: str = "is") -> InputError:
    return InputError(
        f"{path} {what} {size / 1e6:,.0f} MB, over the {limit / 1e6:,.0f} MB input limit; {_raise_hint(limit)}"
    )


def regular_file(path: Path, limit: int | None = None) -> int:
    """The size of `path`, a regular file (symlinks followed) of at most `limit` bytes; else an InputError."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as err:
        raise InputError(f"{path}: cannot be read ({err.strerror})") from None
    except ValueError:  # a NUL byte: no file system has such a name
        raise InputError(f"{str(path)!r}: not a file name (it holds a NUL byte)") from None
    kind = stat.S_IFMT(st.st_mode)
    if kind != stat.S_IFREG:
        what = _KINDS.get(kind, "not a regular file")
        raise InputError(f"{path} is {what}; atbprof reads regular files: save the data to a file and pass that")
    limit = max_input_bytes() if limit is None else limit
    if st.st_size > limit:
        raise too_big(path, st.st_size, limit)
    return st.st_size


def read_bytes(path: Path, limit: int | None = None) -> bytes:
    """All of `path` (a regular file within the cap)."""
    limit = max_input_bytes() if limit is None else limit
    size = regular_file(path, limit)
    with open(path, "rb") as fh:
        # read(n) reserves n bytes first: ask for what the file holds, not for the cap
        data = fh.read(size + 1)
        if len(data) > size:  # the file grew while read: on in bounded steps, stopping at the cap
            parts, total = [data], len(data)
            while total <= limit:
                chunk = fh.read(min(64 << 20, limit + 1 - total))
                if not chunk:
                    break
                parts.append(chunk)
                total += len(chunk)
            data = b"".join(parts)
    if len(data) > limit:
        raise too_big(path, len(data), limit, "grew to more than")
    return data


def read_head(path: Path, n: int) -> bytes:
    regular_file(path)
    with open(path, "rb") as fh:
        return fh.read(n)


def read_text(path: Path, limit: int | None = None) -> str:
    """`path` as UTF-8 text; a file that is not UTF-8 is an InputError naming the offset."""
    data = read_bytes(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise InputError(
            f"{path} line {line}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start}); "
            "save the file as UTF-8"
        ) from None


MAX_INFLATE_RATIO = 100
"""A gzip input inflates to at most this many times its size (real profiles and traces: 7-30x, the shared anchors'
most compressible 30x); beyond it the data is a gzip bomb or not a profile, refused before it takes the memory."""
INFLATE_FLOOR_BYTES = 64_000_000
"""Whatever the ratio, a small gzip file may inflate to this much (a tiny trace of repetitive records)."""
_INFLATE_CHUNK = 256 << 20  # one call for the usual trace (one call is ~2x faster than chunks joined)


def gzip_size(raw: bytes) -> int | None:
    """What a gzip file of one member inflates to, as its trailer says, when that is within the bounds gunzip()
    keeps (None otherwise: gunzip() reads it, and explains). The trailer is not trusted: inflate_exactly() checks it."""
    if len(raw) < 18 or not raw.startswith(b"\x1f\x8b"):
        return None
    size = int.from_bytes(raw[-4:], "little")
    bound = min(max_input_bytes(), max(INFLATE_FLOOR_BYTES, MAX_INFLATE_RATIO * len(raw)))
    return size if 0 < size <= bound else None


def inflate_exactly(raw: bytes, size: int, piece: int = 256 << 10) -> Iterator[bytes]:
    """The gzip member in `raw`, inflated `piece` compressed bytes at a time, provided it is the only one and
    inflates to exactly `size` bytes; raises ValueError (or one of INFLATE_ERRORS) as soon as it is not so. Never
    holds more than `size` bytes."""
    inflate = zlib.decompressobj(wbits=31)
    view = memoryview(raw)
    left = size
    for at in range(0, len(raw), piece):
        pending: bytes | memoryview = view[at : at + piece]
        while pending:
            out = inflate.decompress(pending, left + 1)
            if len(out) > left:
                raise ValueError("inflates to more than its trailer says")
            left -= len(out)
            if out:
                yield out
            if inflate.eof:
                if left or inflate.unused_data or at + piece < len(raw):
                    raise ValueError("not one gzip member of the size its trailer says")
                return
            pending = inflate.unconsumed_tail
    raise ValueError("truncated")


def gunzip(raw: bytes, path: Path, limit: int | None = None) -> bytes:
    """Inflate gzip data (any number of members) in bounded steps, stopping as soon as the output would pass the
    input cap or MAX_INFLATE_RATIO x the compressed size (INFLATE_FLOOR_BYTES at least): memory stays bounded by
    the input's size, not by what a gzip stream claims to hold."""
    cap = max_input_bytes() if limit is None else limit
    ratio_cap = max(INFLATE_FLOOR_BYTES, MAX_INFLATE_RATIO * len(raw))
    bound = min(cap, ratio_cap)
    parts: list[bytes] = []
    size = 0
    data = raw
    try:
        while data:
            inflate = zlib.decompressobj(wbits=31)
            pending = data
            while True:
                chunk = inflate.decompress(pending, min(_INFLATE_CHUNK, bound - size + 1))
                size += len(chunk)
                if size > bound:
                    if bound == cap:
                        raise too_big(path, size, cap, "inflates to more than")
                    raise InputError(
                        f"{path} inflates to more than {MAX_INFLATE_RATIO}x its {len(raw) / 1e6:,.1f} MB (over "
                        f"{bound / 1e6:,.0f} MB): real profiles compress 7-30x, so this is a gzip bomb or not a "
                        "profile; if it is real, `gunzip` it and pass the uncompressed file"
                    )
                parts.append(chunk)
                pending = inflate.unconsumed_tail
                if inflate.eof or (not pending and not chunk):
                    break
            if not inflate.eof:
                raise InputError(
                    f"{path}: a damaged or truncated gzip file (the gzip stream is truncated: it ends before its "
                    "end marker); the copy is incomplete: copy or export it again (`gzip -t` confirms the damage)"
                )
            data = inflate.unused_data.lstrip(b"\x00")  # members follow; trailing zero padding is allowed
    except INFLATE_ERRORS as err:
        raise InputError(
            f"{path}: a damaged or truncated gzip file (corrupt gzip data: {err}); copy or export it again "
            "(`gzip -t` confirms the damage)"
        ) from None
    return parts[0] if len(parts) == 1 else b"".join(parts)
