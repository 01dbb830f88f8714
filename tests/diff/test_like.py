"""Unlike inputs are refused (exit 2, naming what differs) unless --force: an inference run against a training step,
or two runs of different models, has no diff that says anything about fusion."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from atbprof.commands import app
from tests.conftest import FIXTURES
from tests.importers.conftest import QWEN, shared

runner = CliRunner()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("like")
    for name, config in (("llama", "tiny-llama.yaml"), ("gpt", "tiny-gpt.yaml")):
        args = [
            "run",
            "--config",
            str(FIXTURES / config),
            "--set",
            "workload.decode_tokens=2",
            "--out",
            str(root / name),
        ]
        assert runner.invoke(app, args).exit_code == 0
    return root


def test_inference_against_a_training_step_is_refused(runs: Path) -> None:
    result = runner.invoke(app, ["diff", str(runs / "llama"), str(shared(QWEN))])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "is inference and" in result.stderr and "is a training step" in result.stderr
    assert "Grad is a backward kernel" in result.stderr and "--force" in result.stderr


def test_two_models_are_refused(runs: Path) -> None:
    result = runner.invoke(app, ["diff", str(runs / "llama"), str(runs / "gpt")])
    assert result.exit_code == 2 and "runs of different models" in result.stderr and "--force" in result.stderr


def test_force_compares_them_and_says_so(runs: Path) -> None:
    forced = runner.invoke(app, ["diff", str(runs / "llama"), str(shared(QWEN)), "--force", "--format", "json"])
    assert "compared unlike inputs at --force" in forced.stdout or "no common steps" in forced.stderr
    result = runner.invoke(app, ["diff", str(runs / "llama"), str(runs / "gpt"), "--force", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "compared runs of different models at --force" in result.stdout


def test_like_inputs_are_compared_without_a_note(runs: Path) -> None:
    result = runner.invoke(app, ["diff", str(runs / "llama"), str(runs / "llama"), "--format", "json"])
    assert result.exit_code == 0 and "unlike" not in result.stdout
