"""CLI exit codes and messages of `validate`, `export` and `open` (the libraries have their own tests)."""

import gzip
from pathlib import Path

import orjson
from typer.testing import CliRunner

from atbprof.commands import app
from tests.conftest import ROOT

EXAMPLE = ROOT / "traces" / "examples" / "seed000-lnfused"
ASCEND = ROOT.parent / "shared" / "anchors" / "traces" / "mstt_ascend_npu_trace_view.json"
runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def test_validate_clean_trace_exits_0_and_json_twin() -> None:
    r = run("validate", EXAMPLE / "trace.json.gz", "--format", "json")
    assert r.exit_code == 0, r.output
    doc = orjson.loads(r.stdout)
    assert doc["loses_data"] is False and doc["summary"]["slices"] > 0


def test_validate_reports_data_loss_with_exit_1() -> None:
    if not ASCEND.exists():  # ../shared is beside the repo in CI and for developers
        return
    r = run("validate", ASCEND)
    assert r.exit_code == 1
    assert "pid_out_of_range" in r.stdout and "Traceback" not in r.output


def test_bad_inputs_exit_2_without_traceback(tmp_path: Path) -> None:
    truncated = tmp_path / "t.json.gz"
    truncated.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X"')[:-9])
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    for args in (
        ("validate", tmp_path / "missing.json"),
        ("validate", truncated),
        ("validate", text),
        ("export", tmp_path / "nope", "--to", "msprof", "--out", tmp_path / "x"),
        ("export", text, "--to", "ascend-pt", "--out", tmp_path / "x"),
        ("open", tmp_path / "nope", "--timeout", "1"),
    ):
        r = run(*args)
        assert r.exit_code == 2, (args, r.output)
        assert r.stderr.startswith("error: ") and "Traceback" not in r.output, (args, r.output)


def test_export_writes_and_refuses_to_overwrite(tmp_path: Path) -> None:
    r = run("export", EXAMPLE, "--to", "ascend-pt", "--out", tmp_path, "--format", "json")
    assert r.exit_code == 0, r.output
    doc = orjson.loads(r.stdout)
    assert doc["op_rows"] == 3570 and doc["root"].endswith("_ascend_pt")
    again = run("export", EXAMPLE, "--to", "ascend-pt", "--out", tmp_path)
    assert again.exit_code == 3 and "--force" in again.stderr
