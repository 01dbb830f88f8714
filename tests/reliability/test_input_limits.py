"""Issue 11, items 3, 4, 6 and 10: bounded inputs, one clear message (exit 2), never a traceback or exit 70."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from atbprof.yamlio import MAX_ALIASES, MAX_DEPTH, MAX_EXPANDED_NODES
from tests.reliability.conftest import TINY, TINY_HF, cli, one_error, process

ALIAS_BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10)
)


def test_a_gzip_that_inflates_past_the_cap_is_refused(tmp_path: Path) -> None:
    bomb = tmp_path / "trace.json.gz"
    bomb.write_bytes(gzip.compress(b"[" + b" " * 30_000_000 + b"]", 9))  # 30 MB from ~30 KB
    assert bomb.stat().st_size < 100_000
    err = one_error(cli("--max-input-mb", 10, "analyze", bomb))
    assert "inflates to more than" in err and "over the 10 MB input limit" in err and "--max-input-mb 20" in err
    err = one_error(cli("--max-input-mb", 10, "validate", bomb))
    assert "input limit" in err


def test_a_file_over_the_cap_is_refused_before_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "trace_view.json"
    with open(big, "wb") as fh:  # sparse: 3 GB on paper, nothing on disk
        fh.truncate(3_000_000_000)
    monkeypatch.setenv("ATBPROF_MAX_INPUT_MB", "1000")
    err = one_error(cli("analyze", big))
    assert "is 3,000 MB, over the 1,000 MB input limit" in err and "ATBPROF_MAX_INPUT_MB" in err


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_devices_are_refused(device: str) -> None:
    assert "is a character device; atbprof reads regular files" in one_error(cli("analyze", device))


def test_a_fifo_is_refused_at_once_not_read_forever(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    proc = process("analyze", fifo)
    try:
        _, err = proc.communicate(timeout=60)  # a hang guard, not a speed test
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 2 and b"is a FIFO (named pipe)" in err


def test_an_export_keeps_the_trace_cap(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert cli("run", "--config", TINY, "--out", run, "--set", "workload.decode_tokens=6").exit_code == 0
    full = cli("export", run, "--to", "ascend-pt", "--out", tmp_path / "full", "--format", "json")
    capped = cli("export", run, "--to", "ascend-pt", "--out", tmp_path / "cap", "--trace-steps", "0-1")
    assert full.exit_code == 0 and capped.exit_code == 0, capped.output
    assert "the timeline JSON covers steps 0-1 of 7" in capped.stdout
    sizes = [next(d.rglob("trace_view.json")).stat().st_size for d in (tmp_path / "full", tmp_path / "cap")]
    assert sizes[1] < sizes[0] / 2
    tables = [next(d.rglob("kernel_details.csv")).read_bytes() for d in (tmp_path / "full", tmp_path / "cap")]
    assert tables[0] == tables[1], "the tables keep every op"


def _config(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_an_alias_bomb_is_refused_before_any_work(tmp_path: Path) -> None:
    cfg = _config(tmp_path, f"model: {{preset: llama2-7b}}\n{ALIAS_BOMB}")
    start = time.monotonic()
    err = one_error(cli("run", "--config", cfg))
    assert f"expands to more than {MAX_EXPANDED_NODES:,} values" in err and "line " in err
    assert time.monotonic() - start < 30, "a hang guard: the bomb is refused from its events, not expanded"


def test_too_many_aliases_and_too_deep_nesting_are_refused(tmp_path: Path) -> None:
    many = "model: {preset: llama2-7b}\nx: &x 1\ny: [" + ", ".join(["*x"] * (MAX_ALIASES + 1)) + "]\n"
    assert f"more than {MAX_ALIASES} aliases" in one_error(cli("run", "--config", _config(tmp_path, many)))
    deep = "model: {preset: llama2-7b}\nx: " + "[" * 5000 + "]" * 5000 + "\n"
    assert f"nested more than {MAX_DEPTH} levels deep" in one_error(cli("run", "--config", _config(tmp_path, deep)))
    deep_set = "[" * 5000 + "]" * 5000
    assert "nested more than" in one_error(cli("run", "--config", TINY, "--set", f"seed={deep_set}"))


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "model: {preset: llama2-7b}\nworkload: {decode_tokens: 2}\nmodel: {preset: llama2-70b}\n")
    err = one_error(cli("run", "--config", cfg))
    assert f"{cfg} line 3: key 'model' is given twice (first on line 1)" in err


@pytest.mark.parametrize("which", ["config", "device.spec", "fusion.rules_file", "hf_config", "patterns"])
def test_files_that_are_not_utf8_are_named(tmp_path: Path, which: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"name: caf\xe9\n")
    if which == "config":
        err = one_error(cli("run", "--config", bad))
    elif which == "patterns":
        assert cli("run", "--config", TINY, "--out", tmp_path / "r").exit_code == 0
        err = one_error(cli("analyze", tmp_path / "r", "--patterns", bad))
    else:
        key = {"hf_config": "model.hf_config"}.get(which, which)
        err = one_error(cli("run", "--config", TINY, "--set", f"{key}={bad}", "--out", tmp_path / "r"))
    assert "line 1: not UTF-8 text (byte 0xe9 at offset 9); save the file as UTF-8" in err and str(bad) in err


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("workload.batch_size=true", "expected a whole number"),
        ("fusion.shape_buckets=[-1]", "greater than or equal to 1"),
        ("seed=-1", "greater than or equal to 0"),
        ("seed=1208925819614629174706176", "less than or equal to 9223372036854775807"),
        ("execution.host_dispatch_us=.inf", "expected a finite number"),
        ("execution.sync_us=.nan", "expected a finite number"),
        ("model.hidden_size=1099511627776", "less than or equal to 131072"),
        ("model.vocab_size=4611686018427387904", "less than or equal to 4194304"),
        ("model.num_hidden_layers=100000", "less than or equal to 1024"),
        ("workload.batch_size=4096", "tokens in one prefill step"),  # with prompt_len 1,048,576 below
        ("workload.decode_tokens=1000000", "more than output.max_ops"),
    ],
)
def test_values_out_of_what_a_real_model_or_run_has(tmp_path: Path, override: str, message: str) -> None:
    extra = ["--set", "workload.prompt_len=1048576"] if override.startswith("workload.batch_size=4096") else []
    if override.startswith(
        "workload.decode_tokens="
    ):  # past LLaMA-2's context: stretched, so the op count is the limit
        extra = ["--set", "model.rope_scaling_factor=1024"]
    cfg = TINY.parent / "seed000-baseline.yaml"  # LLaMA-2-7B: 266 ops a decode step
    err = one_error(cli("run", "--config", cfg, "--set", override, *extra, "--out", tmp_path / "r"))
    assert message in err, err
    assert not (tmp_path / "r").exists()


def test_work_beyond_int64_is_refused_not_wrapped(tmp_path: Path) -> None:
    """batch 1024 x prompt 1,048,576 fits the token count but not the FLOPs column (it used to wrap to INT64_MIN)."""
    cfg = TINY.parent / "seed000-baseline.yaml"
    args = ["--set", "workload.batch_size=1024", "--set", "workload.prompt_len=1048576", "--out", tmp_path / "r"]
    args += ["--set", "device.ignore_capacity=true"]  # it does not fit either (refused first without this)
    args += ["--set", "model.rope_scaling_factor=1024"]  # nor is it within LLaMA-2's context
    err = one_error(cli("run", "--config", cfg, *args))
    assert "beyond what the op table can hold (int64)" in err


def test_a_device_spec_out_of_physical_range(tmp_path: Path) -> None:
    from importlib import resources

    spec = resources.files("atbprof.data.devices").joinpath("910A.yaml").read_text()
    bad = tmp_path / "dev.yaml"
    bad.write_text(spec.replace("  bandwidth_gbps: 1200", "  bandwidth_gbps: 1.0e-300", 1))
    assert "1.0e-300" in bad.read_text()
    err = one_error(cli("run", "--config", TINY, "--set", f"device.spec={bad}", "--out", tmp_path / "r"))
    assert "hbm.bandwidth_gbps" in err and "greater than or equal to 1" in err


def test_hf_config_values_are_bounded_too(tmp_path: Path) -> None:
    hf = tmp_path / "config.json"
    hf.write_text(TINY_HF.read_text().replace('"num_hidden_layers": 2', '"num_hidden_layers": true'))
    assert '"num_hidden_layers": true' in hf.read_text()
    err = one_error(cli("run", "--config", TINY, "--set", f"model.hf_config={hf}", "--out", tmp_path / "r"))
    assert "model.num_hidden_layers = True" in err and "whole number from 1 to 1024" in err


def test_long_names_and_full_disks_are_user_errors(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 300) / "r"
    err = one_error(cli("run", "--config", TINY, "--out", deep))
    assert "File name too long" in err and "use a shorter name or path" in err
    cmd = [sys.executable, "-c", "from atbprof.commands import main; main()", "run", "--config", str(TINY)]
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            [*cmd, "--out", str(tmp_path / "j"), "--format", "json"], stdout=full, stderr=subprocess.PIPE, timeout=120
        )
    assert proc.returncode == 2 and b"cannot write to standard output: No space left on device" in proc.stderr


def _disk_full(*a: object, **kw: object) -> bytes:
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")  # as write() raises it: no file name


def test_a_full_disk_names_the_output_it_could_not_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write() on a full disk knows no file name: the message names the output being written (not standard
    output), and what was there before is untouched."""
    import atbprof.outputs.staging as staging
    from tests.reliability.conftest import snapshot

    run = tmp_path / "r"
    assert cli("run", "--config", TINY, "--out", run).exit_code == 0
    before = snapshot(run)
    monkeypatch.setattr(staging, "marker_bytes", _disk_full)
    err = one_error(cli("run", "--config", TINY, "--out", run, "--force"))
    assert f"error: {run}: No space left on device; free some space" in err and "standard output" not in err
    assert snapshot(run) == before
    monkeypatch.undo()
    page = tmp_path / "page.html"
    monkeypatch.setattr(Path, "write_bytes", _disk_full)
    err = one_error(cli("report", run, "--out", page))
    assert f"error: {page}: No space left on device" in err and not page.exists()


def _bomb(path: Path, gigabytes: int) -> Path:
    import zlib

    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b" " * (64 << 20)
    with open(path, "wb") as fh:
        fh.write(c.compress(b"["))
        for _ in range(gigabytes * 16):
            fh.write(c.compress(block))
        fh.write(c.compress(b"]") + c.flush())
    return path


def test_a_gzip_bomb_is_refused_within_memory_bounded_by_its_size(tmp_path: Path) -> None:
    """A 1 MB gzip that inflates to 1 GB (1,000x; real profiles compress 7-30x) stops at 100x its size, under an
    address-space limit a full inflate could never fit in, exit 2: memory follows the input's size, not what the
    gzip stream claims to hold."""
    import resource

    bomb = _bomb(tmp_path / "trace.json.gz", 1)
    assert bomb.stat().st_size < 1_200_000

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2_500_000_000, 2_500_000_000))  # the full inflate: 1 GB more

    cmd = [sys.executable, "-c", "from atbprof.commands import main; main()", "analyze", str(bomb)]
    proc = subprocess.run(cmd, capture_output=True, timeout=120, preexec_fn=limit)
    assert proc.returncode == 2, proc.stderr.decode()
    assert b"inflates to more than 100x its 1.0 MB" in proc.stderr and b"gzip bomb" in proc.stderr


def test_the_documented_100000_explicit_sweep_points_can_be_given(tmp_path: Path) -> None:
    """A sweep file with 100,000 points (~6 MB, over a run config's 4 MB) is read; one over its own bound is refused
    naming that bound, not a knob that does not apply to it."""
    from atbprof.sweep.spec import build_spec
    from atbprof.yamlio import MAX_SPEC_YAML_BYTES

    lines = ["name: big", f"base: {TINY}", "points:"]
    point = "  - {{workload.batch_size: {}, workload.prompt_len: {}}}"
    lines += [point.format(1 + i % 100, 16 + i // 100) for i in range(100_000)]
    spec_file = tmp_path / "big.yaml"
    spec_file.write_text("\n".join(lines) + "\n")
    assert spec_file.stat().st_size > 4_000_000
    assert len(build_spec(None, spec_file, [], []).points) == 100_000
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as fh:
        fh.truncate(MAX_SPEC_YAML_BYTES + 1)
    err = one_error(cli("sweep", "--spec", huge, "--out", tmp_path / "s"))
    assert f"this YAML input is at most {MAX_SPEC_YAML_BYTES:,}" in err and "--max-input-mb" not in err
    config = tmp_path / "cfg.yaml"
    with open(config, "wb") as fh:
        fh.truncate(4_000_001)
    err = one_error(cli("run", "--config", config))
    assert "this YAML input is at most 4,000,000" in err and "--max-input-mb" not in err
