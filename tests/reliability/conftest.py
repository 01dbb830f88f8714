"""Helpers for the reliability suite: the CLI in process and as a real process, tiny configs, snapshots."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from atbprof.commands import app
from tests.conftest import FIXTURES

TINY = FIXTURES / "tiny-llama.yaml"
TINY_HF = FIXTURES / "hf" / "tiny-llama" / "config.json"


def cli(*args: object, cwd: Path | None = None) -> Result:
    """`atbprof ARGS` in process (CliRunner), optionally from another working directory."""
    old = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})
    finally:
        os.chdir(old)


def process(*args: object, cwd: Path | None = None, timeout: float = 120, **kw: object) -> subprocess.Popen[bytes]:
    """`atbprof ARGS` as a real process (signals, real stdout), started and returned. It gets Ctrl-C as a terminal's
    foreground job does, even when the tests themselves run as a background job of a script (which starts them
    with SIGINT ignored, and Python keeps an ignored SIGINT ignored)."""
    cmd = [sys.executable, "-c", "from atbprof.commands import main; main()", *map(str, args)]
    return subprocess.Popen(  # type: ignore[call-overload]
        cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_default_sigint, **kw
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` (hidden ones too) with its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def one_error(result: Result, code: int = 2) -> str:
    """The run failed with `code`, one `error:` message on stderr and no traceback; the message."""
    assert result.exit_code == code, (result.exit_code, result.output)
    err = result.stderr
    assert err.startswith("error: ") and "Traceback" not in err, err
    return err


@pytest.fixture
def tiny_cfg(tmp_path: Path) -> Path:
    """A tiny run config (2 decode steps) in its own directory."""
    path = tmp_path / "cfg.yaml"
    path.write_text(f"name: tiny\nmodel: {{hf_config: {TINY_HF}}}\nworkload: {{prompt_len: 16, decode_tokens: 2}}\n")
    return path
