"""The first hour of a new user: next steps that work when pasted, re-running a run, narrow terminals, typos."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from atbprof.analyze import analyze
from atbprof.diff.api import diff_paths
from atbprof.importers import load_profile
from atbprof.render.analyze import render_analysis
from atbprof.render.diff import render_diff
from tests.conftest import ROOT
from tests.reliability.conftest import TINY, cli, one_error, snapshot

EXAMPLES = ROOT / "traces" / "examples"


def test_after_an_unfused_run_the_hints_name_the_fused_side_and_the_diff(tmp_path: Path) -> None:
    out = tmp_path / "u"
    result = cli("run", "--config", TINY, "--out", out, "--fusion", "none", "--trace-format", "both")
    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.stdout.splitlines()]
    assert f"atbprof open {out}   # loads trace.pftrace in the Perfetto UI" in lines  # what `open` serves
    # the run directory is the config: the other side keeps this run's every override
    assert f"atbprof run --config {out} --fusion default --out {out}-fused   # the other side" in lines
    assert f"atbprof diff {out} {out}-fused   # what fusion changed, with statistics" in lines
    assert "<same>" not in result.stdout


def _paste(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A printed command as a user pastes it: into bash, with the installed `atbprof` on the PATH."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_every_printed_command_runs_when_pasted_even_with_spaces_in_the_paths(tmp_path: Path) -> None:
    """run, analyze and diff print their next steps shell-quoted, relative to the working directory, the reason
    as a shell comment: pasted into bash from the same directory, each one runs (paths with spaces included)."""
    work = tmp_path / "my work"
    work.mkdir()
    doc = json.loads(cli("run", "--config", TINY, "--out", "my runs/r one", "--format", "json", cwd=work).stdout)
    assert doc["out_dir"] == "my runs/r one"  # relative, as given
    commands = list(doc["next_commands"])
    analysis = json.loads(cli("analyze", "my runs/r one", "--format", "json", cwd=work).stdout)
    commands += analysis["next_commands"]
    ran = 0
    for command in commands:
        assert str(tmp_path) not in command, command  # relative paths: the same command works on any machine
        if command.startswith("atbprof open"):
            continue  # serves until fetched
        done = _paste(command, work)
        assert done.returncode == 0, (command, done.stderr[-2000:])
        ran += 1
    assert ran >= 4
    diff = cli("diff", "my runs/r one-unfused", "my runs/r one", cwd=work)
    hints = [line.removeprefix("next: ").strip() for line in diff.stdout.splitlines() if "atbprof " in line]
    for command in [h for h in hints if h.startswith("atbprof diff") and "--by" in h]:
        done = _paste(command, work)
        assert done.returncode == 0, (command, done.stderr[-2000:])


@pytest.mark.parametrize("as_config", ["dir", "run.json"])
def test_a_run_directory_or_its_run_json_is_a_config(tmp_path: Path, as_config: str) -> None:
    first = tmp_path / "a"
    assert cli("run", "--config", TINY, "--out", first, "--set", "seed=7").exit_code == 0
    config = first if as_config == "dir" else first / "run.json"
    again = tmp_path / "b"
    result = cli("run", "--config", config, "--out", again)
    assert result.exit_code == 0, result.output
    assert snapshot(first) == snapshot(again), "the same run, byte for byte"


def test_the_analyze_hint_reruns_the_run_with_the_rules(tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert cli("run", "--config", TINY, "--out", out, "--fusion", "none").exit_code == 0
    report = json.loads(cli("analyze", out, "--format", "json").stdout)
    command = next(c for c in report["next_commands"] if c.startswith("atbprof run"))
    assert command.startswith(f"atbprof run --config {out} --set 'fusion.enable=[")
    args = shlex.split(command, comments=True)[1:]
    result = cli(*args)
    assert result.exit_code == 0, result.output


def test_a_run_from_another_directory_is_the_same_run(tmp_path: Path) -> None:
    """hf_config is stored resolved (with its SHA-256), so run.json means one file from any directory."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("name: t\nmodel: {hf_config: hf/tiny-llama/config.json}\nworkload: {decode_tokens: 2}\n")
    (tmp_path / "hf").symlink_to(ROOT / "fixtures" / "hf")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert cli("run", "--config", cfg, "--out", tmp_path / "a").exit_code == 0
    assert cli("run", "--config", cfg, "--out", tmp_path / "b", cwd=elsewhere).exit_code == 0
    assert snapshot(tmp_path / "a") == snapshot(tmp_path / "b")
    doc = json.loads((tmp_path / "a" / "run.json").read_text())
    recorded = doc["input_files"]["model.hf_config"]
    assert Path(recorded["path"]).is_absolute() and len(recorded["sha256"]) == 64
    assert cli("analyze", tmp_path / "a", cwd=elsewhere).exit_code == 0


@pytest.mark.parametrize(
    ("override", "hint"),
    [
        ("workload.batchsize=4", "unknown key (did you mean 'batch_size'?)"),
        ("executon.mode=graph", "--set executon.mode=graph: executon: unknown key (did you mean 'execution'?)"),
        ("model.preset=llama2-7", "unknown preset (did you mean 'llama2-7b'?)"),
        ("device.preset=910b2", "unknown device (did you mean '910B2'?)"),
        ("fusion=defualt", "unknown strategy (did you mean 'default'?)"),
        ("fusion.enable=[ropee]", "unknown rule(s) ropee (did you mean 'rope'?)"),
    ],
)
def test_did_you_mean(tmp_path: Path, override: str, hint: str) -> None:
    assert hint in one_error(cli("run", "--config", TINY, "--set", override, "--out", tmp_path / "r"))


def test_a_bad_trace_steps_is_reported_as_the_option(tmp_path: Path) -> None:
    err = one_error(cli("run", "--config", TINY, "--trace-steps", "5-2", "--out", tmp_path / "r"))
    assert err == "error: --trace-steps '5-2': range '5-2' is empty or negative (write low-high, e.g. 2-5)\n"


def _narrow(render: object, report: object) -> list[str]:
    console = Console(force_terminal=True, width=80, highlight=False, color_system=None, record=True)
    render(report, console)  # type: ignore[operator]
    return console.export_text().splitlines()


def test_80_columns_keep_numbers_whole() -> None:
    report = analyze(load_profile(EXAMPLES / "seed000-baseline"))
    lines = _narrow(render_analysis, report)
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    for finding in report.findings:  # every figure of the findings appears unbroken
        assert f"{finding.time_us / 1e3:,.3f}" in text
    diff = diff_paths(EXAMPLES / "seed000-baseline", EXAMPLES / "seed000-lnfused").report
    lines = _narrow(render_diff, diff)
    assert max(len(line) for line in lines) <= 80
    base, new = (json.loads((EXAMPLES / n / "run.json").read_text())["summary"]["decode_ms_per_token"]
                 for n in ("seed000-baseline", "seed000-lnfused"))  # fmt: skip
    assert f"  base: {base:.3f}" in lines and f"  new: {new:.3f}" in lines  # the headline, as one block per row
