"""Protocol-buffer wire format, vectorised: one message layout encoded for many rows at once with numpy.

A message is a list of `Part`s, each a column of byte strings (row i: `data[i, :size[i]]`; constant parts have
one data row). `encode` lays the parts side by side in an (rows, width) byte matrix and keeps the used bytes in
row-major order, so the result is the concatenation of every row's message. Lengths of nested messages are the
per-row sums of their parts' sizes. Fields are emitted in the order given (any order is valid protobuf).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VARINT, I64, LEN = 0, 1, 2
_U8 = np.uint8
_BITS = np.arange(10, dtype=np.uint64) * np.uint64(7)


def varint(value: int) -> bytes:
    """One varint (a negative value as int64 two's complement, 10 bytes)."""
    v = value & 0xFFFF_FFFF_FFFF_FFFF
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def key(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


@dataclass(frozen=True)
class Part:
    """Left-aligned bytes per row: `data` (rows or 1, width) uint8, `size` bytes used (int: every row)."""

    data: np.ndarray
    size: np.ndarray | int

    @property
    def const(self) -> bool:
        return self.data.shape[0] == 1 and isinstance(self.size, int)


Msg = list[Part]


def const(raw: bytes, present: np.ndarray | None = None) -> Part:
    data = np.frombuffer(raw, _U8).reshape(1, -1)
    return Part(data, len(raw) if present is None else present * len(raw))


def varints(values: np.ndarray) -> Part:
    """Varints of an integer array (int64 negatives as 10 bytes, like protobuf's int64)."""
    u = values.astype(np.uint64)
    if len(u) == 0:
        return Part(np.zeros((0, 1), _U8), np.zeros(0, np.int64))
    width = (int(u.max()).bit_length() + 6) // 7 or 1
    size = np.ones(len(u), np.int64)
    for k in range(1, width):
        size += u >= np.uint64(1 << (7 * k))
    data = np.empty((len(u), width), _U8)
    for k in range(width):
        low = (u >> _BITS[k]).astype(_U8) & _U8(0x7F)
        data[:, k] = low | ((size > k + 1).view(_U8) << _U8(7)) if k + 1 < width else low
    return Part(data, size)


def masked(msg: Msg, present: np.ndarray | None) -> Msg:
    """`msg` on rows where `present`, nothing elsewhere."""
    if present is None:
        return msg
    return [Part(p.data, p.size * present) for p in msg]


def size(msg: Msg) -> np.ndarray | int:
    total: np.ndarray | int = 0
    for p in msg:
        total = total + p.size
    return total


def field_varint(field: int, value: np.ndarray | int, present: np.ndarray | None = None) -> Msg:
    if isinstance(value, int):
        return [const(key(field, VARINT) + varint(value), present)]
    return masked([const(key(field, VARINT)), varints(value)], present)


def field_fixed64(field: int, value: np.ndarray, present: np.ndarray | None = None) -> Msg:
    """fixed64 / double: the array's 8-byte little-endian items (int64 or float64)."""
    raw = np.ascontiguousarray(value, "<f8" if value.dtype.kind == "f" else "<u8").view(_U8).reshape(-1, 8)
    return masked([const(key(field, I64)), Part(raw, 8)], present)


def field_msg(field: int, body: Msg, present: np.ndarray | None = None) -> Msg:
    """A length-delimited sub-message on rows where `present`."""
    body = masked(body, present)
    n = size(body)
    head = const(key(field, LEN) + varint(n)) if isinstance(n, int) else Part(*_cat(key(field, LEN), varints(n)))
    return [*masked([head], present), *body]


def _cat(prefix: bytes, p: Part) -> tuple[np.ndarray, np.ndarray | int]:
    """`prefix` + the bytes of `p` as one part."""
    pre = np.broadcast_to(np.frombuffer(prefix, _U8), (p.data.shape[0], len(prefix)))
    return np.hstack((pre, p.data)), p.size + len(prefix)


def _merge(msg: Msg) -> Msg:
    """Adjacent constant parts as one (fewer column copies)."""
    out: Msg = []
    for p in msg:
        if isinstance(p.size, int) and p.size == 0:
            continue
        if out and out[-1].const and p.const:
            out[-1] = Part(np.hstack((out[-1].data, p.data)), int(out[-1].size) + int(p.size))
        else:
            out.append(p)
    return out


def encode(msg: Msg, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The concatenated bytes of `rows` messages (uint8 array) and each row's byte count."""
    parts = _merge(msg)
    widths = [p.data.shape[1] for p in parts]
    ends = np.cumsum([0, *widths]).tolist()
    template = np.zeros((1, ends[-1]), _U8)  # constant parts, copied to every row at once
    for p, o, w in zip(parts, ends, widths, strict=False):
        if p.data.shape[0] == 1:
            template[:, o : o + w] = p.data
    mat = np.repeat(template, rows, axis=0)
    keep = np.ones((rows, ends[-1]), bool)
    sizes = np.zeros(rows, np.int64)
    for p, o, w in zip(parts, ends, widths, strict=False):
        if p.data.shape[0] != 1:
            mat[:, o : o + w] = p.data
        if not isinstance(p.size, int):
            keep[:, o : o + w] = np.arange(w) < p.size[:, None]
        elif p.size != w:
            keep[:, o : o + w] = np.arange(w) < p.size
        sizes += p.size
    return mat[keep], sizes
