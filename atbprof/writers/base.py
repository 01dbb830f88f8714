"""The writer interface: a writer receives the op table in batches (memory stays flat) and the step table."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import wraps
from pathlib import Path
from typing import IO, Concatenate, ParamSpec, Protocol, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

P = ParamSpec("P")


@dataclass(frozen=True)
class TraceMeta:
    """What a writer needs to know about the run beside its tables."""

    run_name: str
    device_name: str
    soc_version: str
    execution_mode: str  # eager | graph
    streams: tuple[int, ...] = (2,)
    host_tid: int = 1
    extra: dict[str, str] = field(default_factory=dict)
    # numerics (`atbprof run --numerics`): args per "phase|op_type|role" of fused kernels, and the report's JSON
    op_args: dict[str, dict[str, str | float | int]] = field(default_factory=dict)
    numerics_json: bytes = b""
    # the ranks the trace shows (several: a process group per rank, flows between their HCCL tasks), and the
    # deployment's tp x pp (which ranks meet in a collective, which stage sends to which)
    ranks: tuple[int, ...] = (0,)
    tp: int = 1
    pp: int = 1


class RunWriter(Protocol):
    """Streams one output file. `open` -> `write_batch`* -> `close(steps)`; all files are written atomically."""

    filename: str

    def open(self, directory: Path, meta: TraceMeta) -> None: ...

    def write_batch(self, batch: pa.RecordBatch) -> None: ...

    def close(self, steps: pa.Table) -> None: ...


class _Failable(Protocol):
    def _fail(self, err: BaseException) -> None: ...


W = TypeVar("W", bound=_Failable)


def guarded(method: Callable[Concatenate[W, P], None]) -> Callable[Concatenate[W, P], None]:
    """On any exception, let the writer close and delete its partial file (`_fail`) before re-raising."""

    @wraps(method)
    def run(self: W, *args: P.args, **kwargs: P.kwargs) -> None:
        try:
            method(self, *args, **kwargs)
        except BaseException as err:
            self._fail(err)
            raise

    return run


class StagedFile:
    """Mixin for writers whose output lives in an ExitStack (`_stack`) that deletes the temp file on error."""

    _stack: ExitStack | None = None

    def abort(self) -> None:
        """Discard the partial file (for a caller that fails between `open` and `close`)."""
        self._fail(RuntimeError("trace write aborted"))

    def _fail(self, err: BaseException) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:  # closes the streams and removes the temp file
            stack.__exit__(type(err), err, err.__traceback__)


@contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """Yield a temp path beside `final`; rename it into place only if the block succeeds."""
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the final file is an ordinary file
        os.replace(tmp, final)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError) and err.filename is None:  # a write() of a full disk: name the file
            err.filename = str(final)
        raise


@contextmanager
def atomic_open(final: Path) -> Iterator[IO[bytes]]:
    with atomic_path(final) as tmp, open(tmp, "wb") as fh:
        yield fh


def op_arg_keys(batch: pa.RecordBatch) -> pa.Array:
    """The "phase|op_type|role" of each op (how TraceMeta.op_args are looked up), dictionary-encoded."""
    cols = [batch.column(k).cast(pa.string()) for k in ("phase", "op_type", "role")]
    return pc.dictionary_encode(pc.binary_join_element_wise(*cols, "|"))
