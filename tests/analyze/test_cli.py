"""`atbprof analyze` end to end."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
from typer.testing import CliRunner

from atbprof.commands import app
from atbprof.importers.base import Profile

Runs = Callable[..., Profile]


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["analyze", *args])
    return result.exit_code, result.output


def test_json_md_and_rich_carry_the_same_summary(runs: Runs) -> None:
    path = runs("seed000-baseline.yaml", "workload.decode_tokens=2").source
    code, out = invoke(path, "--format", "json", "--top", "3")
    assert code == 0
    doc = orjson.loads(out)
    summary = doc["summary"]
    assert {f["kind"] for f in doc["findings"]} == {"add_norm", "norm_matmul", "unfused_op"}
    code, md = invoke(path, "--format", "md")
    assert code == 0 and f"**{summary}**" in md
    code, text = invoke(path)
    assert code == 0 and text.splitlines()[0] == summary[: len(text.splitlines()[0])]


def test_fail_on_unfused_exit_codes(runs: Runs) -> None:
    assert invoke(runs("seed000-baseline.yaml", "workload.decode_tokens=2").source, "--fail-on-unfused")[0] == 1
    assert invoke(runs("seed000-lnfused.yaml").source, "--fail-on-unfused")[0] == 1  # its RoPE is not fused
    assert invoke(runs("tiny-llama.yaml", "fusion=all").source, "--fail-on-unfused")[0] == 0


def test_a_bad_patterns_file_is_a_config_error(runs: Runs, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text('kernel: {patterns: [{name: x, kind: fused_norm, regex: "<Nope>"}]}\n', encoding="utf-8")
    code, out = invoke(runs("seed000-lnfused.yaml").source, "--patterns", str(bad))
    assert code == 2 and "unknown class <Nope>" in out
