"""The safetensors format in numpy: an 8-byte little-endian header length, a JSON header
{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the raw little-endian bytes.

Tensors are memory-mapped, so a 13 GB checkpoint costs only the layers read. Every problem is an InputError that
names the file (and the tensor).
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from atbprof.errors import InputError

_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "BF16": np.uint16}
_MAX_HEADER = 100 << 20


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


class SafetensorsFile:
    """Read tensors by name as float32 arrays (bf16 widened exactly)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            size = self.path.stat().st_size
            with open(self.path, "rb") as fh:
                head = fh.read(8)
                if len(head) < 8:
                    raise InputError(f"{self.path}: not a safetensors file (shorter than its 8-byte header length)")
                (n,) = struct.unpack("<Q", head)
                if n > min(_MAX_HEADER, size - 8):
                    raise InputError(f"{self.path}: not a safetensors file (header length {n} exceeds the file)")
                raw = fh.read(n)
        except FileNotFoundError:
            raise InputError(f"{path}: no such file (--weights / numerics.weights)") from None
        except IsADirectoryError:
            raise InputError(f"{path}: is a directory; give the .safetensors file") from None
        except OSError as err:
            raise InputError(f"{path}: cannot read ({err.strerror})") from None
        try:
            header = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise InputError(f"{self.path}: not a safetensors file (header is not JSON: {err})") from None
        if not isinstance(header, dict):
            raise InputError(f"{self.path}: not a safetensors file (header is not a JSON object)")
        self.data_start = 8 + n
        self.metadata = header.pop("__metadata__", {}) or {}
        self.tensors: dict[str, TensorInfo] = {}
        for name, entry in header.items():
            try:
                begin, end = (int(v) for v in entry["data_offsets"])
                info = TensorInfo(str(entry["dtype"]), tuple(int(d) for d in entry["shape"]), begin, end)
            except (KeyError, TypeError, ValueError):
                raise InputError(
                    f"{self.path}: tensor {name!r}: header entry needs dtype, shape and data_offsets"
                ) from None
            if info.dtype not in _DTYPES:
                raise InputError(
                    f"{self.path}: tensor {name!r}: dtype {info.dtype} not supported (F16, BF16, F32, F64)"
                )
            want = int(np.prod(info.shape, dtype=np.int64)) * np.dtype(_DTYPES[info.dtype]).itemsize
            if end - begin != want or begin < 0 or self.data_start + end > size:
                raise InputError(
                    f"{self.path}: tensor {name!r}: data_offsets [{begin}, {end}] do not hold shape "
                    f"{list(info.shape)} of {info.dtype} inside the file (truncated or corrupt)"
                )
            self.tensors[name] = info

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def shape(self, name: str) -> tuple[int, ...]:
        return self.tensors[name].shape

    def read(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        """The tensor as float32 (optionally only `rows` of its first axis, e.g. embedding rows)."""
        info = self.tensors.get(name)
        if info is None:
            raise InputError(f"{self.path}: tensor {name!r} is missing (Hugging Face LLaMA names expected)")
        count = int(np.prod(info.shape, dtype=np.int64))
        mm = np.memmap(self.path, dtype=_DTYPES[info.dtype], mode="r", offset=self.data_start + info.begin, shape=count)
        arr = mm.reshape(info.shape)
        if rows is not None:
            arr = arr[rows]
        if info.dtype == "BF16":
            return (np.asarray(arr).astype(np.uint32) << np.uint32(16)).view(np.float32)
        return np.asarray(arr, dtype=np.float32)


def save_safetensors(path: str | Path, tensors: dict[str, np.ndarray], dtype: str = "F16") -> None:
    """Write tensors (float arrays) as one safetensors file, atomically (tests and tools make tiny checkpoints)."""
    path = Path(path)
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name], dtype=np.float32)
        if dtype == "BF16":
            from atbprof.numerics.dtypes import to_bf16

            blob = (to_bf16(arr).view(np.uint32) >> np.uint32(16)).astype("<u2").tobytes()
        else:
            blob = arr.astype(np.dtype(_DTYPES[dtype]).newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(struct.pack("<Q", len(raw)) + raw)
            for blob in blobs:
                fh.write(blob)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
