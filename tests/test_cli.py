"""`atbprof` CLI: exit codes, files written, the summary, one `error:` block per bad config, a golden run."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from atbprof import __version__
from atbprof.commands import app

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
TINY = FIXTURES / "tiny-llama.yaml"
TINY_HF = FIXTURES / "hf" / "tiny-llama" / "config.json"
ATB_FILE = FIXTURES / "atb_fusion_config.yaml"
GOLDEN = ROOT / "tests" / "golden" / "tiny-llama-run.json"
RUN_FILES = ["ops.parquet", "run.json", "steps.parquet", "trace.json.gz"]
RUN_LISTING = [".atbprof-output.json", *RUN_FILES]  # with the marker that tells --force the directory is ours
SUMMARY_KEYS = {
    "ttft_ms",
    "decode_ms_per_token",
    "tokens_per_s",
    "norm_ms_per_token",
    "device_busy_fraction",
    "ops_total",
    "breakdown_ms_per_token",
}

runner = CliRunner()


def atbprof(*args: object) -> Result:
    # a wide console so rich does not wrap the paths and commands the summary prints
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "1000"})


def run_tiny(out: Path, *args: object) -> Result:
    return atbprof("run", "--config", TINY, "--out", out, *args)


def run_json(out: Path, *args: object) -> dict[str, Any]:
    result = run_tiny(out, "--format", "json", *args)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(directory.iterdir())}


def check_golden(actual: dict[str, Any], path: Path) -> None:
    """Compare with a golden JSON file; ATBPROF_REGEN_GOLDEN=1 rewrites it from `actual` first."""
    if os.environ.get("ATBPROF_REGEN_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(actual, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    assert path.exists(), f"{path} is missing; create it with ATBPROF_REGEN_GOLDEN=1 pytest {__file__}"
    expected = json.loads(path.read_text(encoding="utf-8"))
    assert actual == expected, (
        f"output differs from {path}; if the change is intended, regenerate it with ATBPROF_REGEN_GOLDEN=1"
    )


# -- basics --------------------------------------------------------------------------------------------------


def test_version() -> None:
    result = atbprof("--version")
    assert result.exit_code == 0
    assert result.stdout == f"atbprof {__version__}\n"


def test_no_arguments_shows_help() -> None:
    result = atbprof()
    assert "run" in result.output
    assert "Traceback" not in result.output


def test_run_writes_the_run_directory_and_prints_the_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # fixtures are found relative to the config file, not the CWD
    out = tmp_path / "r"
    result = run_tiny(out)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert sorted(p.name for p in out.iterdir()) == RUN_LISTING
    assert all((out / name).stat().st_size > 0 for name in RUN_FILES)
    text = result.stdout
    assert text.startswith("tiny-llama: ")
    for needle in (
        "TTFT",
        "decode latency",
        "ms/token",
        "Attention (with its norm)",
        "FFN (with its norm)",
        "other (embedding, LM head, sampling, host loop)",
        "per token",
        # paths relative to the working directory (tmp_path), as a user would type them
        f"wrote r/ ({', '.join(RUN_FILES)})",
        "next: atbprof analyze r   # unfused norms, latency breakdown, what fusing saves",
        "      atbprof open r   # loads trace.json.gz in the Perfetto UI",
        "      atbprof run --config r --fusion none --out r-unfused   # the other side",
        "      atbprof diff r-unfused r   # what fusion changed, with statistics",
    ):
        assert needle in text, needle
    assert not list(tmp_path.glob(".r.*")), "no temporary directory is left behind"
    assert not (tmp_path / "traces").exists(), "--out was honoured"


def test_run_json_summary(tmp_path: Path) -> None:
    doc = run_json(tmp_path / "r")
    assert doc["name"] == "tiny-llama"
    assert doc["out_dir"] == str(tmp_path / "r")
    assert doc["files"] == RUN_FILES
    assert doc["device"] == "910A"
    summary = doc["summary"]
    assert set(summary) >= SUMMARY_KEYS
    assert set(summary["breakdown_ms_per_token"]) == {"attention", "ffn", "other"}
    assert summary["ttft_ms"] > 0
    assert summary["decode_ms_per_token"] > 0
    assert summary["tokens_per_s"] > 0
    assert 0 < summary["device_busy_fraction"] <= 1
    assert isinstance(summary["ops_total"], int)
    assert sum(summary["breakdown_ms_per_token"].values()) == pytest.approx(summary["decode_ms_per_token"], abs=1e-3)


def test_run_json_matches_golden(tmp_path: Path) -> None:
    out = tmp_path / "r"
    doc = run_json(out)
    doc.pop("out_dir")
    assert doc.pop("next_commands") == [
        f"atbprof analyze {out}",
        f"atbprof report {out} --out {out}.html",
        f"atbprof open {out}",
        f"atbprof run --config {out} --fusion none --out {out}-unfused",
        f"atbprof diff {out}-unfused {out}",
    ]
    check_golden(doc, GOLDEN)


def test_run_json_matches_run_json_file(tmp_path: Path) -> None:
    doc = run_json(tmp_path / "r")
    written = json.loads((tmp_path / "r" / "run.json").read_text(encoding="utf-8"))
    assert written["summary"] == doc["summary"]
    assert written["name"] == "tiny-llama"


# -- existing output -----------------------------------------------------------------------------------------


def test_existing_output_is_refused_and_left_untouched(tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert run_tiny(out).exit_code == 0
    before = snapshot(out)
    result = run_tiny(out)
    assert result.exit_code == 3
    assert result.stdout == ""
    assert result.stderr == (f"error: {out} already exists; pass --force to replace it or --out to write elsewhere\n")
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"], "no temporary directory is left behind"


def test_existing_output_is_refused_in_json_mode_too(tmp_path: Path) -> None:
    out = tmp_path / "r"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    result = run_tiny(out, "--format", "json")
    assert result.exit_code == 3
    assert result.stdout == ""
    assert "--force" in result.stderr
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


def test_force_replaces_the_output(tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert run_tiny(out).exit_code == 0
    before = snapshot(out)
    result = run_tiny(out, "--force", "--set", "workload.decode_tokens=2")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == RUN_LISTING
    assert snapshot(out)["ops.parquet"] != before["ops.parquet"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"], "nothing set aside or staged is left behind"


def test_force_keeps_a_file_the_user_added(tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert run_tiny(out).exit_code == 0
    (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    result = run_tiny(out, "--force")
    assert result.exit_code == 3
    assert result.stderr == (
        f"error: {out} holds files atbprof did not write (notes.txt); --force would delete them: move them out or "
        "choose another --out\n"
    )
    assert snapshot(out) == before


# -- options that change the run -----------------------------------------------------------------------------


def test_set_decode_tokens_changes_ops_total(tmp_path: Path) -> None:
    default = run_json(tmp_path / "a")["summary"]
    shorter = run_json(tmp_path / "b", "--set", "workload.decode_tokens=2")["summary"]
    assert default["decode_steps"] == 4
    assert shorter["decode_steps"] == 2
    assert shorter["ops_total"] < default["ops_total"]
    per_step = default["ops_per_decode_step"]
    assert shorter["ops_per_decode_step"] == per_step
    assert default["ops_total"] - shorter["ops_total"] == 2 * per_step


def test_fusion_none_runs_more_ops_per_decode_step(tmp_path: Path) -> None:
    fused = run_json(tmp_path / "fused")["summary"]
    unfused = run_json(tmp_path / "unfused", "--fusion", "none")["summary"]
    assert unfused["ops_per_decode_step"] > fused["ops_per_decode_step"]
    assert not any(unfused["fusion_fired"].values())
    assert any(fused["fusion_fired"].values())


def test_seed002_atb_file_via_fusion_option(tmp_path: Path) -> None:
    doc = run_json(tmp_path / "r", "--fusion", str(ATB_FILE))
    fired = set(doc["summary"]["fusion_fired"]["decode"])
    assert "attention_softmax" not in fired
    assert {"norm_kernel", "qkv_merge", "flash_attention", "add_norm"} <= fired


# -- bad configs: exit 2, one `error:` block, no traceback ---------------------------------------------------

TINY_MODEL = f"model: {{hf_config: {TINY_HF}}}\n"
BAD_CONFIGS: dict[str, tuple[str | None, list[str], str]] = {
    # name: (config text or None for the tiny fixture, extra args, text the error must contain)
    "unknown-key": (f"{TINY_MODEL}workloads: {{batch_size: 2}}\n", [], "line 2: workloads: unknown key"),
    "unknown-nested-key": (
        f"{TINY_MODEL}workload: {{batchsize: 2}}\n",
        [],
        "line 2: workload.batchsize: unknown key",
    ),
    "wrong-type": (f"{TINY_MODEL}workload: {{prompt_len: lots}}\n", [], "workload.prompt_len = 'lots'"),
    "batch-size-0": (f"{TINY_MODEL}workload: {{batch_size: 0}}\n", [], "workload.batch_size = 0"),
    "dtype-fp8": (f"model: {{hf_config: {TINY_HF}, dtype: fp8}}\n", [], "model.dtype = 'fp8'"),
    "mode-turbo": (f"{TINY_MODEL}execution: {{mode: turbo}}\n", [], "execution.mode = 'turbo'"),
    "model-preset": ("model: {preset: llama9}\n", [], "model.preset = 'llama9': unknown preset"),
    "device-preset": (f"{TINY_MODEL}device: 910C\n", [], "device.preset = '910C': unknown device"),
    "no-model": ("device: 910A\n", [], "model: required section is missing"),
    "preset-and-hf": (f"model: {{preset: llama2-7b, hf_config: {TINY_HF}}}\n", [], "not both"),
    "not-a-mapping": ("- model\n", [], "the top level must be a mapping"),
    "invalid-yaml": ("model: [llama\nfoo: 1\n", [], "line 2, column 4: not valid YAML"),
    "kv-reuse-paged": (
        f"{TINY_MODEL}fusion:\n  fusion_strategy: {{qkv_fusion: true}}\n"
        "  memory: {enable_kv_cache_reuse: true, paged_attention: true}\n",
        [],
        "PagedAttention",
    ),
    "atb-unknown-flag": (f"{TINY_MODEL}fusion: {{fusion_strategy: {{magic: true}}}}\n", [], "unknown flag"),
    "unknown-strategy": (f"{TINY_MODEL}fusion: {{strategy: turbo}}\n", [], "unknown strategy"),
    "unknown-rule": (f"{TINY_MODEL}fusion: {{enable: [nope]}}\n", [], "unknown rule(s) nope"),
    "bf16-on-910a": (None, ["--set", "model.dtype=bf16"], "has no bf16 cube support"),
    "malformed-set": (None, ["--set", "foo"], "--set 'foo': expected KEY.PATH=VALUE"),
    "bad-set-value": (None, ["--set", "workload.batch_size=0"], "--set workload.batch_size=0: "),
    "unknown-fusion-option": (None, ["--fusion", "turbo"], "fusion.strategy = 'turbo': unknown strategy"),
}


def bad_config_args(tmp_path: Path, name: str) -> tuple[list[object], str, Path]:
    text, extra, needle = BAD_CONFIGS[name]
    config = TINY
    if text is not None:
        config = tmp_path / f"{name}.yaml"
        config.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    return ["run", "--config", config, "--out", out, *extra], needle, out


@pytest.mark.parametrize("name", list(BAD_CONFIGS))
def test_bad_config_exits_2_with_one_error_block(tmp_path: Path, name: str) -> None:
    args, needle, out = bad_config_args(tmp_path, name)
    result = atbprof(*args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stdout == ""
    err = result.stderr
    assert err.startswith("error: invalid config"), err
    assert err.count("error:") == 1, err
    assert needle in err
    # continuation lines of the one block are indented problem lines
    assert all(line.startswith("  - ") for line in err.splitlines()[1:]), err
    assert not out.exists(), "nothing is written for a bad config"


@pytest.mark.parametrize(
    "name",
    ["unknown-key", "model-preset", "unknown-strategy", "bf16-on-910a", "kv-reuse-paged", "atb-unknown-flag"],
)
def test_bad_config_error_names_the_config_file(tmp_path: Path, name: str) -> None:
    args, _, _ = bad_config_args(tmp_path, name)
    result = atbprof(*args)
    assert result.exit_code == 2
    assert str(args[2]) in result.stderr


def test_several_problems_in_one_error_block(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(f"{TINY_MODEL}workload: {{batch_size: 0}}\nexecution: {{mode: turbo}}\nextra: 1\n")
    result = atbprof("run", "--config", config, "--out", tmp_path / "out")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: invalid config: 3 problem(s)",
        f"  - {config} line 2: workload.batch_size = 0: Input should be greater than or equal to 1",
        f"  - {config} line 3: execution.mode = 'turbo': Input should be 'eager' or 'graph'",
        f"  - {config} line 4: extra: unknown key; remove it or check the spelling",
    ]


def test_missing_config_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = atbprof("run", "--config", missing, "--out", tmp_path / "out")
    assert result.exit_code == 2
    assert result.stderr == f"error: invalid config: {missing}: no such file; pass an existing YAML file to --config\n"


def test_atb_file_as_run_config() -> None:
    result = atbprof("run", "--config", ATB_FILE)
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert result.stderr == (
        f"error: invalid config: {ATB_FILE} is an ATB fusion-strategy file "
        "(seed 002's atb_fusion_config.yaml), not a run config: "
        "reference it from a run config as `fusion: atb_fusion_config.yaml` "
        "(see fixtures/llama2-7b-atb-graph.yaml)\n"
    )


def test_bf16_on_910a_message(tmp_path: Path) -> None:
    result = run_tiny(tmp_path / "out", "--set", "model.dtype=bf16")
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: invalid config {TINY}: model.dtype = 'bf16': "
        "device 910A (Ascend910) has no bf16 cube support; use dtype fp16 or a 910B device\n"
    )


def test_verbose_shows_the_traceback(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(f"{TINY_MODEL}workload: {{batch_size: 0}}\n")
    result = atbprof("run", "--config", config, "--out", tmp_path / "out", "--verbose")
    assert result.exit_code == 2
    assert "Traceback" in result.stderr
    assert "ConfigError" in result.stderr
    assert result.stderr.count("\nerror: invalid config: ") == 1
    assert result.stderr.rstrip().endswith("Input should be greater than or equal to 1")


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["validate", str(ROOT / "traces/examples/seed000-baseline/trace.json.gz")], "checking"),
        (["plot", str(ROOT / "traces/examples/seed000-baseline"), "--out", "{tmp}/p"], "drawing"),
        (["run", "--config", str(TINY), "--out", "{tmp}/r"], "simulating"),
    ],
)
def test_progress_shows_on_a_terminal_and_nowhere_else(tmp_path: Path, args: list[str], what: str) -> None:
    """On a terminal (a pty) the command shows its progress on stderr; piped, stderr stays empty."""
    import os
    import pty
    import subprocess
    import sys

    def argv(where: str) -> list[str]:  # each run writes into a directory of its own
        cli = [sys.executable, "-c", "from atbprof.commands import main; main()"]
        return [*cli, *(a.format(tmp=tmp_path / where) for a in args)]

    piped = subprocess.run(argv("piped"), capture_output=True, text=True, timeout=120)
    assert piped.returncode in (0, 1) and piped.stderr == "", piped.stderr
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "100"}
    proc = subprocess.Popen(argv("tty"), stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        seen += chunk
    proc.wait(timeout=120)
    os.close(master)
    assert what.encode() in seen, seen[-500:]
