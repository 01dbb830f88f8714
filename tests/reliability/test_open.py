"""Issue 11, item 8: `atbprof open` serves one file, once opened, to the UI that asked, and bounds its clients."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from pathlib import Path

import pytest

from atbprof.errors import InputError
from atbprof.serve import PERFETTO_UI, TraceServer, find_trace, serve_trace, ssh_hint
from tests.reliability.conftest import TINY, cli, one_error


@pytest.fixture
def run(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    assert cli("run", "--config", TINY, "--out", out).exit_code == 0
    return out


def _get(server: TraceServer, origin: str | None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", "/trace.json.gz", headers={"Origin": origin} if origin else {})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response.status, body


def test_replacing_the_file_while_serving_changes_nothing(run: Path, tmp_path: Path) -> None:
    trace = run / "trace.json.gz"
    original = trace.read_bytes()
    secret = tmp_path / "secret"
    secret.write_text("root:x:0:0")
    with TraceServer(find_trace(run), 0) as server:
        trace.unlink()
        trace.symlink_to(secret)  # the swap the issue found: the path now points elsewhere
        status, body = _get(server, PERFETTO_UI)
    assert status == 200 and body == original


def test_a_symlinked_trace_is_not_followed_when_opened(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("[]")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    with pytest.raises(InputError, match="cannot open it"):
        TraceServer(link, 0)


def test_only_the_ui_origin_ends_the_serving(run: Path) -> None:
    with TraceServer(find_trace(run), 0) as server:
        assert _get(server, "https://evil.example")[0] == 403
        assert _get(server, None)[0] == 200  # curl: served, does not stop it
        assert server.wait_answered(2)  # the server counts a fetch after the client has the last byte
        assert not server.fetched.is_set() and server.other_fetches == 1
        assert _get(server, PERFETTO_UI)[0] == 200
        assert server.fetched.wait(5) and server.fetches == 1


def test_half_open_connections_are_bounded(run: Path) -> None:
    with TraceServer(find_trace(run), 0) as server:
        before = threading.active_count()
        socks = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(300)]  # send nothing
        time.sleep(0.5)
        during = threading.active_count()
        for s in socks:
            s.close()  # the handlers see EOF and free their slots
        time.sleep(0.5)
        status, _ = _get(server, PERFETTO_UI)
    assert during - before <= 16, f"{during - before} threads for 300 idle connections"
    assert status == 200, "the UI's fetch is served once the idle clients are gone"


def test_a_self_hosted_ui(run: Path) -> None:
    with TraceServer(find_trace(run), 0, ui="http://127.0.0.1:10000") as server:
        assert server.url.startswith("http://127.0.0.1:10000/#!/?url=http://127.0.0.1:")
        assert _get(server, PERFETTO_UI)[0] == 403  # the CORS origin follows --ui
        assert _get(server, "http://127.0.0.1:10000")[0] == 200
    assert "expected the address of a Perfetto UI" in one_error(cli("open", run, "--ui", "ftp://x", "--timeout", 1))


def test_timeout_without_a_fetch_exits_1(run: Path) -> None:
    result = cli("open", run, "--port", 0, "--timeout", 0.2)
    assert result.exit_code == 1
    assert "stopped: timeout (0 fetch(es)" in result.stdout
    assert result.stderr == "error: the Perfetto UI never fetched the trace\n"
    assert serve_trace(run, port=0, timeout=0.2).reason == "timeout"


def test_the_ssh_hint() -> None:
    assert ssh_hint(9001, {}) is None
    hint = ssh_hint(9001, {"SSH_CONNECTION": "10.0.0.1 5 10.0.0.2 22"})
    assert hint is not None and "ssh -N -L 9001:127.0.0.1:9001 " in hint


@pytest.mark.parametrize(
    ("name", "content", "what"),
    [
        ("README.md", b"# my notes\nnot a trace\n", "text starting '# my notes'"),
        ("ops.parquet", b"PAR1\x00\x00fake", "a Parquet table"),
        ("analysis.db", b"SQLite format 3\x00rest", "an SQLite database"),
        ("blob.bin", bytes(range(128, 256)) * 4, "binary data"),
    ],
)
def test_open_refuses_what_is_not_a_trace_naming_what_it_is(
    tmp_path: Path, name: str, content: bytes, what: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    result = cli("open", path, "--timeout", "0.1")
    message = one_error(result, 2)
    assert "is not a trace" in message and what in message


def test_open_finds_the_timeline_inside_a_torch_npu_profile(tmp_path: Path) -> None:
    from tests.importers.conftest import ASCEND, shared

    profile = shared(ASCEND / "msinsight_imagenet_cnn_level0_rank0")
    assert find_trace(profile) == (profile / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").resolve()
    # the directory above one profile, and the output directory itself
    assert find_trace(profile / "ASCEND_PROFILER_OUTPUT").name == "trace_view.json"
    import shutil

    shutil.copytree(profile, tmp_path / "host_1_20260101_ascend_pt")
    assert find_trace(tmp_path).name == "trace_view.json"


def test_open_of_a_profile_without_a_timeline_says_what_to_do() -> None:
    from tests.importers.conftest import QWEN, shared

    message = one_error(cli("open", shared(QWEN), "--timeout", "0.1"), 2)
    assert "torch_npu profile without its timeline" in message and "atbprof analyze" in message


def test_open_of_several_traces_names_them(tmp_path: Path) -> None:
    for i in (1, 2):
        (tmp_path / f"host_{i}.pt.trace.json").write_text("[]")
    message = one_error(cli("open", tmp_path, "--timeout", "0.1"), 2)
    assert "holds 2 traces" in message and "host_1.pt.trace.json" in message
