"""`atbprof open`: serve one run's trace on 127.0.0.1 so https://ui.perfetto.dev can open it by deep link.

The same protocol as Perfetto's own `tools/open_trace_in_ui`: an HTTP server on 127.0.0.1:9001 answering only
`GET /<trace file>` with `Access-Control-Allow-Origin: https://ui.perfetto.dev`, opened through
`https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/<file>`, stopping once the trace was fetched.

Choices, and why:
- Port 9001: ui.perfetto.dev's Content-Security-Policy (`connect-src`) allows http://127.0.0.1:9001 and no other
  local port. If 9001 is taken the next free port is used, and the link gains `rpc_port=<port>`: the UI then
  asks the user to enable its "Relax Content Security Policy for 127.0.0.1:*" flag (`cspAllowAnyWebsocketPort`),
  without which the fetch would be blocked silently. `notice` says so.
- CORS: only the Perfetto UI origin is allowed (not `*`): any web page open in the user's browser could
  otherwise read the trace while the server runs. Preflights (OPTIONS) are answered, including Chrome's Private
  Network Access header. The UI's `POST /status` probe (looking for trace_processor_shell on 9001) gets a 404.
- Only the one trace file is served, by exact path: no listing, no other files, so no traversal (`..`, `%2e%2e`,
  absolute paths) can reach anything; a trace that is a symlink leaving its run directory is refused; requests
  whose Host is not 127.0.0.1/localhost are refused (DNS rebinding). The file is opened once, without following
  a symlink, and every request reads that descriptor: replacing the path while serving changes nothing.
- Only a complete GET whose Origin is the UI's counts as "the fetch" that stops the server; a GET without an
  Origin (curl) is served and counted apart; one from another Origin is refused (403).
- Connections: at most 16 at a time (more are closed at once), each with a 10 s socket timeout, so half-open
  connections cannot pile up threads.
- `--ui URL` serves a self-hosted or offline Perfetto UI: the CORS origin and the deep link follow it.
- The bytes are sent as stored (a .json.gz goes out as application/gzip, not re-encoded: trace_processor
  decompresses it itself), with Content-Length so the UI shows progress.
- In a run directory `trace.pftrace` is preferred to `trace.json.gz`: the native format has no JSON-importer quirks
  and loads faster. `atbprof run` writes trace.json.gz today.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
import threading
import time
import webbrowser
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Literal
from urllib.parse import quote, urlsplit

from atbprof.errors import InputError
from atbprof.trace_files import find_trace

DEFAULT_PORT = 9001
PERFETTO_UI = "https://ui.perfetto.dev"
HOST = "127.0.0.1"
PORT_TRIES = 20
MAX_CONNECTIONS = 16
SOCKET_TIMEOUT_S = 10.0
_CHUNK = 1 << 20
_CONTENT_TYPES = {".gz": "application/gzip", ".json": "application/json"}

Reason = Literal["fetched", "timeout", "interrupted"]


@dataclass(frozen=True)
class ServeResult:
    trace: Path
    port: int
    url: str
    """The ui.perfetto.dev deep link."""
    trace_url: str
    fetches: int
    """Complete GETs of the trace from the UI's origin."""
    reason: Reason
    notice: str | None = None
    other_fetches: int = 0
    """Complete GETs without an Origin (curl, wget): served, but they do not stop the server."""


def ui_origin(ui: str) -> str:
    """The origin (scheme://host[:port]) of a Perfetto UI address; InputError for anything else."""
    parts = urlsplit(ui)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.username or parts.password:
        raise InputError(
            f"--ui {ui!r}: expected the address of a Perfetto UI, e.g. https://ui.perfetto.dev or "
            "http://127.0.0.1:10000 (a self-hosted or offline UI)"
        )
    return f"{parts.scheme}://{parts.netloc}"


def deep_link(port: int, name: str, ui: str = PERFETTO_UI) -> str:
    link = f"{ui.rstrip('/')}/#!/?url=http://{HOST}:{port}/{quote(name)}"
    return link if port == DEFAULT_PORT else f"{link}&rpc_port={port}"


def ssh_hint(port: int, environ: dict[str, str] | None = None) -> str | None:
    """Over SSH the browser runs elsewhere: how to forward the port (None on a local session)."""
    env = os.environ if environ is None else environ
    if not env.get("SSH_CONNECTION") and not env.get("SSH_CLIENT"):
        return None
    host = socket.gethostname()
    return (
        f"this is an SSH session: the browser's 127.0.0.1 is your own machine, so forward the port first, "
        f"from your machine: ssh -N -L {port}:127.0.0.1:{port} {host}"
    )


def port_notice(port: int, requested: int) -> str | None:
    """Why a port other than 9001 needs a UI flag (None on 9001)."""
    if port == DEFAULT_PORT:
        return None
    why = (
        f"port {requested} is busy (another `atbprof open`, or trace_processor_shell --httpd?)"
        if (requested not in (0, port))
        else f"serving on port {port}"
    )
    return (
        f"{why}; ui.perfetto.dev only connects to 127.0.0.1:{DEFAULT_PORT} unless its flag 'Relax Content "
        f"Security Policy for 127.0.0.1:*' is on: the link asks for it (or enable it at "
        f"{PERFETTO_UI}/#!/flags/cspAllowAnyWebsocketPort), or free port {DEFAULT_PORT} and run again"
    )


class _TraceHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # rebinding right after a previous run (TIME_WAIT); a live listener still fails
    request_queue_size = 64  # connections beyond the 16 handled are accepted and closed at once, not left queued

    def __init__(self, port: int, owner: TraceServer) -> None:
        self.owner = owner
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__((HOST, port), _Handler)

    def process_request(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        if not self.slots.acquire(blocking=False):  # bounded: the next connection waits for none of them
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class _Handler(BaseHTTPRequestHandler):
    server: _TraceHTTPServer
    server_version = "atbprof"
    timeout = SOCKET_TIMEOUT_S  # a silent or half-open client frees its thread after this

    def log_message(self, format: str, *args: object) -> None:
        pass  # requests are recorded in TraceServer.requests instead of printed

    def _cors(self) -> None:
        self.send_header("Access-Control-Allow-Origin", self.server.owner.allow_origin)
        self.send_header("Vary", "Origin")
        self.send_header("Cache-Control", "no-cache")

    def _host_ok(self) -> bool:
        host = self.headers.get("Host")
        return host is None or host.rsplit(":", 1)[0].strip("[]") in ("127.0.0.1", "localhost")

    def _is_trace(self) -> bool:
        return urlsplit(self.path).path == "/" + quote(self.server.owner.name)

    def _refuse(self, code: int) -> None:
        self.server.owner.record(self.command, self.path, code)
        self.send_response(code)
        self._cors()
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        body = b"not found\n" if code == 404 else b"forbidden\n"
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _allowed(self) -> bool:
        """Refuse (and answer) a request from a foreign Host or Origin, or for anything but the trace."""
        origin = self.headers.get("Origin")
        if not self._host_ok() or (origin is not None and origin != self.server.owner.allow_origin):
            self._refuse(403)
            return False
        if not self._is_trace():
            self._refuse(404)
            return False
        return True

    def do_OPTIONS(self) -> None:
        if not self._allowed():
            return
        self.server.owner.record(self.command, self.path, 204)
        self.send_response(204)
        self._cors()
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        asked = self.headers.get("Access-Control-Request-Headers")
        if asked:
            self.send_header("Access-Control-Allow-Headers", asked)
        if self.headers.get("Access-Control-Request-Private-Network") == "true":
            self.send_header("Access-Control-Allow-Private-Network", "true")
        self.send_header("Access-Control-Max-Age", "600")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self) -> None:
        self._send_trace(body=False)

    def do_GET(self) -> None:
        self._send_trace(body=True)

    def do_POST(self) -> None:  # the UI probes POST /status (trace_processor_shell)
        self._refuse(404)

    def _send_trace(self, body: bool) -> None:
        if not self._allowed():
            return
        owner = self.server.owner
        self.send_response(200)
        self._cors()
        self.send_header("Content-Type", _CONTENT_TYPES.get(owner.trace.suffix, "application/octet-stream"))
        self.send_header("Content-Length", str(owner.size))
        self.send_header("Content-Disposition", f'inline; filename="{owner.name}"')
        self.end_headers()
        if not body:
            owner.record(self.command, self.path, 200)
            return
        try:
            for offset in range(0, owner.size, _CHUNK):  # the descriptor opened at start, never the path again
                self.wfile.write(os.pread(owner.fd, min(_CHUNK, owner.size - offset), offset))
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            owner.record(self.command, self.path, 499)  # the client went away: not a fetch
            return
        # counted before it is recorded as answered: whoever waits for the answer (wait_answered) sees the count
        owner.mark_fetched(from_ui=self.headers.get("Origin") == owner.allow_origin)
        owner.record(self.command, self.path, 200)


def _open_once(trace: Path) -> tuple[int, int]:
    """The trace opened for reading without following a symlink (a descriptor and its size)."""
    try:
        fd = os.open(trace, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise InputError(f"{trace}: cannot open it ({err.strerror}); is it a symlink or unreadable?") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InputError(f"{trace} is not a regular file; pass a trace file or a run directory")
    return fd, st.st_size


def _bind(port: int, owner: TraceServer, tries: int) -> _TraceHTTPServer:
    last: OSError | None = None
    for candidate in [port] if port == 0 else range(port, port + tries):
        try:
            return _TraceHTTPServer(candidate, owner)
        except OSError as err:
            if err.errno not in (errno.EADDRINUSE, errno.EACCES):
                raise
            last = err
    raise InputError(
        f"ports {port}–{port + tries - 1} on {HOST} are all in use ({last}); stop the other servers or pass --port"
    )


class TraceServer:
    """Serves one trace file on 127.0.0.1 (port 0 = any free port, for tests). Use as a context manager."""

    def __init__(
        self, trace: Path, port: int = DEFAULT_PORT, *, ui: str = PERFETTO_UI, port_tries: int = PORT_TRIES
    ) -> None:
        self.trace = Path(trace)
        self.name = self.trace.name
        self.requested_port = port
        self.ui = ui
        self.allow_origin = ui_origin(ui)
        self.fetched = threading.Event()
        self.fetches = 0
        self.other_fetches = 0
        self.requests: list[tuple[str, str, int]] = []
        self.answered = 0
        """Requests answered so far (every status), for `wait_answered`."""
        self._lock = threading.Lock()
        self._answer = threading.Condition(self._lock)
        self.fd, self.size = _open_once(self.trace)
        try:
            self._httpd = _bind(port, self, port_tries)
        except BaseException:
            os.close(self.fd)
            raise
        self.port: int = self._httpd.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def trace_url(self) -> str:
        return f"http://{HOST}:{self.port}/{quote(self.name)}"

    @property
    def url(self) -> str:
        return deep_link(self.port, self.name, self.ui)

    @property
    def notice(self) -> str | None:
        return port_notice(self.port, self.requested_port) if self.allow_origin == PERFETTO_UI else None

    def record(self, method: str, path: str, status: int) -> None:
        """The last thing a handler does for a request (a client may hold the whole body before this runs)."""
        with self._answer:
            self.requests.append((method, path, status))
            del self.requests[:-100]
            self.answered += 1
            self._answer.notify_all()

    def wait_answered(self, count: int, timeout: float = 10.0) -> bool:
        """Block until `count` requests were answered and counted (a client's read ends before the server's
        bookkeeping does; tests and embedders wait here rather than read the counters at once)."""
        with self._answer:
            return self._answer.wait_for(lambda: self.answered >= count, timeout)

    def mark_fetched(self, from_ui: bool = True) -> None:
        with self._lock:
            if not from_ui:
                self.other_fetches += 1
                return
            self.fetches += 1
        self.fetched.set()

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="atbprof-open", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(5)
            self._thread = None
        self._httpd.server_close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> TraceServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait(self, once: bool = True, timeout: float | None = None) -> Reason:
        """Block until the trace was fetched (`once`), `timeout` seconds passed, or Ctrl-C."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                left = 0.25 if deadline is None else min(0.25, deadline - time.monotonic())
                if left <= 0:
                    return "timeout"
                # short waits: Ctrl-C is delivered between them even where lock waits are not interruptible
                if self.fetched.wait(left) and once:
                    return "fetched"
        except KeyboardInterrupt:
            return "interrupted"


def serve_trace(
    path: Path,
    port: int = DEFAULT_PORT,
    open_browser: bool = False,
    once: bool = True,
    timeout: float | None = None,
    on_ready: Callable[[str], None] | None = None,
    *,
    on_notice: Callable[[str], None] | None = None,
    ui: str = PERFETTO_UI,
) -> ServeResult:
    """Serve the trace of a run directory (or a trace file) until Perfetto fetched it once (or timeout / Ctrl-C).

    `on_ready` gets the ui.perfetto.dev deep link once the server listens; `on_notice` any caveat (a port other
    than 9001). Raises `InputError` for a missing run directory, a directory without a trace, or busy ports.
    """
    ui_origin(ui)  # a bad --ui before anything is opened
    trace = find_trace(Path(path))
    with TraceServer(trace, port, ui=ui) as server:
        for notice in (server.notice, ssh_hint(server.port)):
            if notice and on_notice is not None:
                on_notice(notice)
        if on_ready is not None:
            on_ready(server.url)
        if open_browser:
            with contextlib.suppress(webbrowser.Error):
                webbrowser.open_new_tab(server.url)
        reason = server.wait(once=once, timeout=timeout)
    return ServeResult(
        trace, server.port, server.url, server.trace_url, server.fetches, reason, server.notice, server.other_fetches
    )


@contextlib.contextmanager
def serving(trace: Path, port: int = 0) -> Iterator[TraceServer]:
    """A running `TraceServer` for `trace` (tests and embedding): `with serving(p) as s: urlopen(s.trace_url)`."""
    with TraceServer(find_trace(trace), port) as server:
        yield server
