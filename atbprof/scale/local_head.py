"""A local Ray head on loopback for the tests and benchmarks, stopped without touching any other Ray cluster on the
machine: `ray stop` stops them all (a second test suite's, a user's own), and their drivers then exit. The head is
told its own temp dir, and stopping it signals only the processes whose command line names that dir (Linux /proc).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains `text` (Linux /proc), this process excluded."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmdline:
                found.append(int(entry.name))
    return found


def _stop(temp_dir: str, timeout: float) -> None:
    for pid in processes_mentioning(temp_dir):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and processes_mentioning(temp_dir):
        time.sleep(0.2)
    for pid in processes_mentioning(temp_dir):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def local_head(ray_bin: str | Path, cpus: int = 2, timeout: float = 180.0) -> Iterator[str]:
    """A head started with `ray_bin start --head` on 127.0.0.1; yields its address; stops only it afterwards."""
    port = _free_port()
    temp_dir = tempfile.mkdtemp(prefix="atbray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    cmd = [str(ray_bin), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", f"--num-cpus={cpus}"]
    cmd += ["--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp_dir}"]
    try:
        started = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if started.returncode != 0:
            raise RuntimeError(f"ray start failed: {started.stdout}{started.stderr}")
        yield f"127.0.0.1:{port}"
    finally:
        _stop(temp_dir, 30.0)
        shutil.rmtree(temp_dir, ignore_errors=True)
