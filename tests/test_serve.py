"""`atbprof open`'s server: what it sends, what it refuses, when it stops, which port it takes."""

from __future__ import annotations

import gzip
import http.client
import socket
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from atbprof import serve
from atbprof.errors import InputError
from atbprof.serve import DEFAULT_PORT, PERFETTO_UI, TraceServer, find_trace, serve_trace, serving
from tests.conftest import ROOT

EXAMPLE_RUN = ROOT / "traces" / "examples" / "seed000-baseline"


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}' * 1000))
    (run / "run.json").write_text('{"secret": true}')
    (run / "ops.parquet").write_bytes(b"PAR1")
    return run


@pytest.fixture
def server(run_dir: Path) -> Iterator[TraceServer]:
    with serving(run_dir) as s:
        yield s


def request(
    server: TraceServer, method: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """Send `path` exactly as given (no client-side normalisation)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def test_get_sends_the_gzip_bytes_as_stored_with_cors(server: TraceServer, run_dir: Path) -> None:
    status, headers, body = request(server, "GET", "/trace.json.gz", {"Origin": PERFETTO_UI})
    data = (run_dir / "trace.json.gz").read_bytes()
    assert status == 200
    assert body == data
    assert headers["Access-Control-Allow-Origin"] == "https://ui.perfetto.dev"
    assert headers["Content-Type"] == "application/gzip"
    assert headers["Content-Length"] == str(len(data))
    assert "Content-Encoding" not in headers  # not re-encoded: trace_processor gunzips it itself
    assert server.fetched.wait(5)  # counted by the server thread after the last byte went out
    assert server.fetches == 1


def test_preflight(server: TraceServer) -> None:
    asked = {
        "Origin": PERFETTO_UI,
        "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "range",
        "Access-Control-Request-Private-Network": "true",
    }
    status, headers, body = request(server, "OPTIONS", "/trace.json.gz", asked)
    assert (status, body) == (204, b"")
    assert headers["Access-Control-Allow-Origin"] == PERFETTO_UI
    assert "GET" in headers["Access-Control-Allow-Methods"]
    assert headers["Access-Control-Allow-Headers"] == "range"
    assert headers["Access-Control-Allow-Private-Network"] == "true"
    assert server.fetches == 0


def test_head_is_not_a_fetch(server: TraceServer, run_dir: Path) -> None:
    status, headers, body = request(server, "HEAD", "/trace.json.gz")
    assert (status, body) == (200, b"")
    assert headers["Content-Length"] == str((run_dir / "trace.json.gz").stat().st_size)
    assert server.fetches == 0 and not server.fetched.is_set()


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/run.json",
        "/ops.parquet",
        "/..",
        "/../run/run.json",
        "/%2e%2e/run/run.json",
        "/%2E%2E%2Frun%2Frun.json",
        "/..%2frun.json",
        "//etc/passwd",
        "/etc/passwd",
        "/trace.json.gz/..",
        "/./trace.json.gz",
        "/trace.json.gz/",
        "/TRACE.JSON.GZ",
        "/trace.json.gz%00",
        "/trace.json",
    ],
)
def test_only_the_trace_is_served(server: TraceServer, path: str) -> None:
    status, headers, body = request(server, "GET", path)
    assert status == 404
    assert b"secret" not in body and b"PAR1" not in body
    assert headers["Access-Control-Allow-Origin"] == PERFETTO_UI
    assert server.fetches == 0


def test_foreign_host_is_refused(server: TraceServer) -> None:
    status, _, _ = request(server, "GET", "/trace.json.gz", {"Host": "attacker.example:9001"})
    assert status == 403  # a DNS-rebound page cannot read the trace same-origin
    assert request(server, "GET", "/trace.json.gz", {"Host": f"localhost:{server.port}"})[0] == 200


def test_the_ui_status_probe_gets_a_404(server: TraceServer) -> None:
    # ui.perfetto.dev POSTs /status on 127.0.0.1:9001 to look for trace_processor_shell; a 404 means "none"
    status, headers, _ = request(server, "POST", "/status")
    assert status == 404
    assert headers["Access-Control-Allow-Origin"] == PERFETTO_UI


def test_binds_loopback_only(server: TraceServer) -> None:
    assert server._httpd.server_address[0] == "127.0.0.1"


def test_serve_trace_stops_after_one_fetch(run_dir: Path) -> None:
    seen: dict[str, object] = {}
    readers: list[threading.Thread] = []

    def fetch(url: str) -> None:
        trace_url = url.split("url=", 1)[1].split("&", 1)[0]

        def get() -> None:
            request = urllib.request.Request(trace_url, headers={"Origin": PERFETTO_UI})  # as the UI fetches
            with urllib.request.urlopen(request, timeout=5) as response:
                seen["body"] = response.read()

        reader = threading.Thread(target=get, daemon=True)
        reader.start()
        readers.append(reader)
        seen["url"] = url

    result = serve_trace(run_dir, port=0, on_ready=fetch, timeout=20)
    assert result.reason == "fetched" and result.fetches == 1
    # the server counts a fetch once the last byte is flushed; the reader may still be storing it
    readers[0].join(timeout=10)
    assert seen["body"] == (run_dir / "trace.json.gz").read_bytes()
    assert seen["url"] == result.url
    with pytest.raises(OSError):  # the server is gone
        urllib.request.urlopen(result.trace_url, timeout=2)


def test_real_example_trace_is_byte_equal(tmp_path: Path) -> None:
    before = (EXAMPLE_RUN / "trace.json.gz").read_bytes()
    with serving(EXAMPLE_RUN) as s:
        request = urllib.request.Request(s.trace_url, headers={"Origin": PERFETTO_UI})
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.read() == before
        assert s.wait(timeout=5) == "fetched"
    assert (EXAMPLE_RUN / "trace.json.gz").read_bytes() == before


def test_timeout_without_fetch(run_dir: Path) -> None:
    result = serve_trace(run_dir, port=0, timeout=0.3)
    assert (result.reason, result.fetches) == ("timeout", 0)


def test_deep_link(server: TraceServer) -> None:
    link = f"https://ui.perfetto.dev/#!/?url=http://127.0.0.1:{server.port}/trace.json.gz"
    assert server.trace_url == f"http://127.0.0.1:{server.port}/trace.json.gz"
    # off 9001 the link also asks the UI to relax its CSP for this port (rpc_port)
    assert server.url == link + f"&rpc_port={server.port}"
    assert serve.deep_link(DEFAULT_PORT, "trace.json.gz") == (
        "https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/trace.json.gz"
    )


def _occupy(port: int) -> socket.socket | None:
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        return None  # already busy: just as good for the test
    sock.listen()
    return sock


def test_falls_back_to_the_next_port_when_9001_is_busy(run_dir: Path) -> None:
    holder = _occupy(DEFAULT_PORT)
    try:
        with TraceServer(find_trace(run_dir), DEFAULT_PORT) as s:
            assert DEFAULT_PORT < s.port < DEFAULT_PORT + serve.PORT_TRIES
            assert s.notice is not None and "port 9001 is busy" in s.notice and "cspAllowAnyWebsocketPort" in s.notice
            assert f"rpc_port={s.port}" in s.url
            assert request(s, "GET", "/trace.json.gz")[0] == 200
    finally:
        if holder is not None:
            holder.close()


def test_all_ports_busy_is_an_input_error(run_dir: Path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        with pytest.raises(InputError, match="in use"):
            TraceServer(find_trace(run_dir), port, port_tries=1)
    finally:
        holder.close()


def test_open_browser(monkeypatch: pytest.MonkeyPatch, run_dir: Path) -> None:
    opened: list[str] = []
    monkeypatch.setattr(serve.webbrowser, "open_new_tab", opened.append)
    result = serve_trace(run_dir, port=0, open_browser=True, timeout=0.1)
    assert opened == [result.url]


def test_pftrace_is_preferred(run_dir: Path) -> None:
    (run_dir / "trace.pftrace").write_bytes(b"\x0a\x02\x08\x01")
    with serving(run_dir) as s:
        assert s.name == "trace.pftrace"
        status, headers, body = request(s, "GET", "/trace.pftrace")
        assert (status, headers["Content-Type"], body) == (200, "application/octet-stream", b"\x0a\x02\x08\x01")


def test_a_trace_file_can_be_given_directly(run_dir: Path) -> None:
    with serving(run_dir / "trace.json.gz") as s:
        assert urlsplit(s.trace_url).path == "/trace.json.gz"


@pytest.mark.parametrize("problem", ["missing", "no_trace", "empty_file", "symlink_out"])
def test_bad_input(tmp_path: Path, problem: str) -> None:
    run = tmp_path / "run"
    if problem == "no_trace":
        run.mkdir()
        (run / "run.json").write_text("{}")
    elif problem == "empty_file":
        run.mkdir()
        run = run / "trace.json.gz"
        run.write_bytes(b"")
    elif problem == "symlink_out":
        run.mkdir()
        outside = tmp_path / "elsewhere.json.gz"
        outside.write_bytes(b"x")
        (run / "trace.json.gz").symlink_to(outside)
    with pytest.raises(InputError) as info:
        serve_trace(run, port=0, timeout=0.1)
    assert info.value.exit_code == 2
    assert str(run) in str(info.value)
