"""The Python API: each function returns the typed result its command renders, `.to_dict()` is exactly the command's
`--format json`, `.to_arrow()` is a real table, and `import atbprof` stays cheap (nothing heavy until used)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import atbprof
from atbprof.commands import app
from atbprof.errors import InputError
from tests.conftest import FIXTURES
from tests.importers.conftest import QWEN, shared

TINY = FIXTURES / "tiny-llama.yaml"


def cli_json(*args: object) -> Any:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("api")
    atbprof.simulate(TINY, overrides=["fusion=none", "workload.decode_tokens=3"], out=root / "none")
    atbprof.simulate(TINY, overrides=["workload.decode_tokens=3"], out=root / "fused")
    return root


def test_simulate_is_run(runs: Path, tmp_path: Path) -> None:
    result = atbprof.simulate(TINY, overrides=["workload.decode_tokens=3"], out=tmp_path / "r")
    doc = cli_json(
        "run", "--config", TINY, "--set", "workload.decode_tokens=3", "--out", tmp_path / "c", "--format", "json"
    )
    mine = result.to_dict()
    for key in ("out_dir", "next_commands"):  # where each was written
        mine.pop(key), doc.pop(key)
    assert mine == doc
    ops = result.to_arrow()
    assert isinstance(ops, pa.Table) and ops.num_rows == result.summary.ops_total


def test_analyze_is_analyze(runs: Path) -> None:
    report = atbprof.analyze(runs / "none")
    assert report.to_dict() == cli_json("analyze", runs / "none", "--format", "json")
    table = report.to_arrow()
    assert table.num_rows >= sum(f.count for f in report.findings if f.opportunity)  # type: ignore[union-attr]
    again = atbprof.analyze(atbprof.load(runs / "none"))  # a Profile works as well as a path
    assert again.to_dict() == report.to_dict()


def test_diff_is_diff(runs: Path) -> None:
    change = atbprof.diff(runs / "none", runs / "fused")
    assert change.to_dict() == cli_json("diff", runs / "none", runs / "fused", "--format", "json")
    rows = change.to_arrow()  # type: ignore[union-attr]
    assert {"name", "classification", "delta_us"} <= set(rows.column_names)
    assert rows.num_rows == len(change.to_dict()["rows"])


def test_predict_is_predict() -> None:
    report = atbprof.predict(shared(QWEN))
    assert report.to_dict() == cli_json("predict", shared(QWEN), "--format", "json")
    assert report.to_arrow().num_rows == len(report.op_types)


def test_sweep_is_sweep(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        f"name: api\nbase: {TINY}\nset: {{workload.decode_tokens: 2}}\ngrid: {{fusion: [none, default]}}\n",
        encoding="utf-8",
    )
    result = atbprof.sweep(spec, out=tmp_path / "out", workers=0)
    assert result.to_dict()["points"] == 2 and result.to_dict() == result.report.dump()
    # a batch sweep's contract has no capacity (only a serving sweep over the rate has one)
    assert result.to_dict().keys() == result.report.model_dump(mode="json").keys() - {"capacity"}
    import pyarrow.parquet as pq

    assert result.to_arrow().equals(pq.read_table(tmp_path / "out" / "sweep.parquet"))


def test_load_target_tells_what_a_path_holds(runs: Path) -> None:
    assert atbprof.load_target(runs / "none").kind == "run"
    both = atbprof.load_target(runs / "none", runs / "fused")
    assert both.kind == "diff" and " " not in both.name


def test_errors_are_the_commands_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file or directory"):
        atbprof.analyze(tmp_path / "nope")


def test_import_atbprof_loads_nothing_heavy() -> None:
    code = (
        "import sys, atbprof\n"
        "heavy = [m for m in ('pyarrow', 'numpy', 'pydantic', 'rich', 'typer') if m in sys.modules]\n"
        "print(heavy, callable(atbprof.analyze), sorted(atbprof.__all__))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("[] True")
    for name in ("analyze", "diff", "load", "predict", "simulate", "sweep"):
        assert f"'{name}'" in out


def test_the_version_is_said_once() -> None:
    import re

    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^version = "([^"]+)"$', text, re.M)[1] == atbprof.__version__  # type: ignore[index]
