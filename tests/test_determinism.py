"""The same config and seed give byte-identical files."""

from pathlib import Path

from atbprof.run import run_simulation
from tests.conftest import fixture_config


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_same_config_same_bytes(tmp_path: Path) -> None:
    cfg = fixture_config("tiny-llama.yaml", "execution.jitter.kernel_cv=0.1", "seed=3")
    a = _files(run_simulation(cfg, tmp_path / "a").out_dir)
    b = _files(run_simulation(cfg, tmp_path / "b").out_dir)
    assert a.keys() == {".atbprof-output.json", "ops.parquet", "steps.parquet", "run.json", "trace.json.gz"}
    assert a == b


def test_other_seed_other_bytes(tmp_path: Path) -> None:
    base = "execution.jitter.kernel_cv=0.1"
    a = _files(run_simulation(fixture_config("tiny-llama.yaml", base, "seed=3"), tmp_path / "a").out_dir)
    b = _files(run_simulation(fixture_config("tiny-llama.yaml", base, "seed=4"), tmp_path / "b").out_dir)
    assert a["ops.parquet"] != b["ops.parquet"] and a["trace.json.gz"] != b["trace.json.gz"]


def test_hf_config_gives_the_same_run_as_the_preset(tmp_path: Path) -> None:
    preset = fixture_config("llama2-7b-910a.yaml", "workload.decode_tokens=1")
    hf = fixture_config(
        "llama2-7b-910a.yaml", "workload.decode_tokens=1", "model={hf_config: hf/llama2-7b/config.json}"
    )
    a = run_simulation(preset, tmp_path / "a").summary
    b = run_simulation(hf, tmp_path / "b").summary
    assert a == b
