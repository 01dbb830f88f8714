"""`atbprof diff` end to end: exact Markdown output (golden), the JSON contract, exit codes and bad input."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from atbprof.commands import app
from atbprof.config import load_config
from atbprof.run import run_simulation
from tests.conftest import FIXTURES

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "diff-tiny-none-vs-default.md"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny-llama runs in one directory, named as the tests refer to them (relative paths keep output exact)."""
    root = tmp_path_factory.mktemp("diff-cli")
    for name, overrides in {
        "none": ["fusion=none"],
        "default": ["fusion=default"],
        "base": [],
        "slower": ["execution.host_dispatch_us=60"],
        "other-model": ["model.num_hidden_layers=3"],
    }.items():
        cfg = load_config(
            FIXTURES / "tiny-llama.yaml",
            [*overrides, "output.trace=false", "workload.decode_tokens=4", "name=tiny-llama"],
        )
        run_simulation(cfg, root / name)
    return root


def invoke(root: Path, *args: str) -> tuple[int, str]:
    cwd = os.getcwd()
    os.chdir(root)
    try:
        result = CliRunner().invoke(app, ["diff", *args])
    finally:
        os.chdir(cwd)
    return result.exit_code, result.output


def test_markdown_report_is_exact(runs: Path) -> None:
    code, out = invoke(runs, "none", "default", "--format", "md", "--top", "8")
    assert code == 0, out
    if os.environ.get("ATBPROF_REGEN_GOLDEN") == "1":
        GOLDEN.write_text(out, encoding="utf-8")
    assert out == GOLDEN.read_text(encoding="utf-8"), f"regenerate {GOLDEN} with ATBPROF_REGEN_GOLDEN=1 if intended"


def test_json_twin_is_the_documented_contract(runs: Path) -> None:
    code, out = invoke(runs, "none", "default", "--format", "json")
    assert code == 0
    doc = orjson.loads(out)
    for key in ("decode_ms_per_token", "ttft_ms", "tokens_per_s"):
        entry = doc["headline"][key]
        assert {"base", "new", "delta", "delta_pct", "ci_low", "ci_high", "significant"} <= set(entry)
        assert entry["delta"] == pytest.approx(entry["new"] - entry["base"], abs=1e-3)
    assert doc["headline"]["decode_ms_per_token"]["delta"] < 0  # fusion is faster: negative
    for cat in doc["categories"]:
        assert {"name", "base_ms", "new_ms", "saved_ms"} <= set(cat)
        assert cat["saved_ms"] == pytest.approx(cat["base_ms"] - cat["new_ms"], abs=1e-3)
    assert [c["name"] for c in doc["categories"]] == ["attention", "ffn", "other", "per-token total"]
    classes = {r["classification"] for r in doc["rows"]}
    assert "fused" in classes and classes <= {"added", "removed", "fused", "split", "faster", "slower", "unchanged"}
    code, md = invoke(runs, "none", "default", "--format", "md")
    assert code == 0 and f"**{doc['summary']}**" in md
    code, text = invoke(runs, "none", "default")
    assert code == 0 and text.splitlines()[0] == doc["summary"]


def test_fail_if_slower(runs: Path) -> None:
    code, out = invoke(runs, "base", "slower", "--fail-if-slower", "2%")
    assert code == 1 and "significant regression beyond --fail-if-slower 2%" in out
    assert invoke(runs, "slower", "base", "--fail-if-slower", "2%")[0] == 0  # faster is fine
    assert invoke(runs, "base", "base", "--fail-if-slower", "0")[0] == 0  # no change, nothing significant
    assert invoke(runs, "base", "slower", "--fail-if-slower", "500%")[0] == 0  # slower, but not by that much


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("base", "missing-run"), "missing-run: no such file or directory"),
        (("base", "other-model"), "are runs of different models"),
        (("base", "slower", "--fail-if-slower", "fast"), "--fail-if-slower 'fast': expected a percentage"),
        (("base", "slower", "--map", "nonsense"), "--map 'nonsense': expected OLD=NEW"),
        (("base", "slower", "--threshold", "-1"), "--threshold '-1': must not be negative"),
    ],
)
def test_bad_input_is_one_clear_message_and_exit_2(runs: Path, args: tuple[str, ...], message: str) -> None:
    code, out = invoke(runs, *args)
    assert code == 2 and message in out and "Traceback" not in out


def test_inputs_without_common_steps_are_explained(runs: Path, tmp_path: Path) -> None:
    # a foreign op table whose steps share nothing with the run: the error says what each has
    csv = tmp_path / "kernel_details.csv"
    csv.write_text(
        "Step Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim,Input Shapes\n"
        '7,MatMul_1,MatMulV2,AI_CORE,1000.000\t,5.0,0,8,"1,4096;4096,4096"\n',
        encoding="utf-8",
    )
    code, out = invoke(runs, "base", str(csv))
    assert code == 2 and "no common steps" in out and "prefill" in out and "Traceback" not in out


def test_trace_writes_both_runs_side_by_side_and_refuses_to_overwrite(runs: Path) -> None:
    code, out = invoke(runs, "none", "default", "--trace", "both.json", "--format", "json")
    assert code == 0, out
    doc = orjson.loads(out)
    assert any(n.startswith("trace: both.json (5 step pairs") for n in doc["notes"])
    events = orjson.loads((runs / "both.json").read_bytes())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert names == {"diff", "base: tiny-llama", "new: tiny-llama"}
    before = (runs / "both.json").read_bytes()
    code, out = invoke(runs, "none", "slower", "--trace", "both.json")
    assert code == 3 and "--force" in out and (runs / "both.json").read_bytes() == before
    assert invoke(runs, "none", "slower", "--trace", "both.json", "--force")[0] == 0
    assert (runs / "both.json").read_bytes() != before
