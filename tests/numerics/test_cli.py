"""`atbprof run --numerics / --weights` through the CLI: the summary section and its JSON twin, the figures in
run.json, ops.parquet metadata and the trace args, analyze, and one clear error (exit 2) per bad checkpoint."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from typer.testing import CliRunner, Result

from atbprof.commands import app
from atbprof.graph.dims import resolve_model
from atbprof.numerics import load_numerics
from atbprof.numerics.safetensors_io import save_safetensors
from atbprof.numerics.weights import HF_NAMES, random_layer
from tests.conftest import FIXTURES, fixture_config

TINY = FIXTURES / "tiny-llama.yaml"
runner = CliRunner()


def atbprof(*args: object) -> Result:
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "1000"})


def run_json(out: Path, *args: object) -> dict[str, Any]:
    result = atbprof("run", "--config", TINY, "--out", out, "--format", "json", *args)
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def tiny_checkpoint(path: Path, hidden: int | None = None) -> None:
    """The tiny-llama fixture's layers with Hugging Face names (k_proj of another width if `hidden` is given)."""
    d = resolve_model(fixture_config("tiny-llama.yaml").model)
    tensors = {}
    for i in range(d.layers):
        w = random_layer(d, i, seed=11, logit_std=1.8)
        for key, name in HF_NAMES.items():
            tensors[f"model.layers.{i}.{name}"] = w.mats[key].T if key in w.mats else w.norms[key]
    if hidden is not None:
        tensors["model.layers.0.self_attn.k_proj.weight"] = np.zeros((hidden, d.hidden), np.float32)
    tensors["model.embed_tokens.weight"] = 0.02 * np.random.default_rng(0).standard_normal((d.vocab, d.hidden))
    save_safetensors(path, tensors)


def test_run_numerics_json_twin_run_json_parquet_and_trace(tmp_path: Path) -> None:
    doc = run_json(tmp_path / "r", "--numerics", "--trace-format", "both")
    num = doc["numerics"]
    assert num["schema_id"] == "atbprof.numerics/1" and num["finite"] is True
    assert set(num["rules"].values()) == {"aligned"} and "norm_kernel" in num["rules"]
    assert {k["op_type"] for k in num["kernels"]} >= {"FusedRmsNormMatMul", "FFN", "IncreFlashAttention"}
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["numerics"] == num and run["config"]["numerics"]["enabled"] is True
    meta = pq.read_schema(tmp_path / "r" / "ops.parquet").metadata
    assert json.loads(meta[b"atbprof.numerics"]) == num
    assert load_numerics(tmp_path / "r") == load_numerics(tmp_path / "r")
    ffn = next(k for k in num["kernels"] if k["op_type"] == "FFN" and k["phase"] == "decode")
    events = json.loads(gzip.decompress((tmp_path / "r" / "trace.json.gz").read_bytes()))["traceEvents"]
    sliced = [e for e in events if e.get("args", {}).get("OP Type") == "FFN" and e["args"]["step"] == 1]
    assert sliced and all(e["args"]["numerics_verdict"] == "aligned" for e in sliced)
    assert sliced[0]["args"]["numerics_max_abs_err"] == ffn["fused_vs_unfused"]["max_abs_err"]
    plain = [e for e in events if e.get("args", {}).get("OP Type") == "ScatterUpdate"]
    assert plain and not any("numerics_verdict" in e["args"] for e in plain)
    assert b"numerics_verdict" in (tmp_path / "r" / "trace.pftrace").read_bytes()


def test_plain_run_has_no_numerics(tmp_path: Path) -> None:
    doc = run_json(tmp_path / "r")
    assert "numerics" not in doc
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert "numerics" not in run and "numerics" not in run["config"]
    assert b"atbprof.numerics" not in (pq.read_schema(tmp_path / "r" / "ops.parquet").metadata or {})
    assert load_numerics(tmp_path / "r") is None


def test_rich_summary_and_analyze(tmp_path: Path) -> None:
    result = atbprof("run", "--config", TINY, "--out", tmp_path / "r", "--numerics", "--fusion", "aggressive")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "numerics (fp16, weights random (seed 0, logit std 1.8)): layers 0, prompt 16" in out
    assert "FusedQKVAttention" in out and "attention_softmax aligned" in out and "whole layer output vs float64" in out
    assert "aligned = no NaN/Inf and scaled error vs float64 <= max(2 x" in out
    analyzed = atbprof("analyze", tmp_path / "r")
    assert analyzed.exit_code == 0 and "numerics (fused kernels vs the unfused ops they replaced)" in analyzed.stdout
    js = json.loads(atbprof("analyze", tmp_path / "r", "--format", "json").stdout)
    assert js["numerics"]["rules"]["attention_softmax"] == "aligned"
    assert "## numerics" in atbprof("analyze", tmp_path / "r", "--format", "md").stdout


def test_weights_from_a_checkpoint(tmp_path: Path) -> None:
    ckpt = tmp_path / "tiny.safetensors"
    tiny_checkpoint(ckpt)
    doc = run_json(tmp_path / "r", "--weights", ckpt, "--set", "numerics.layers=0-1")
    assert doc["numerics"]["subset"]["weights"] == str(ckpt)
    assert doc["numerics"]["subset"]["layers"] == [0, 1] and doc["numerics"]["finite"] is True


def _fails(tmp_path: Path, *args: object) -> str:
    result = atbprof("run", "--config", TINY, "--out", tmp_path / "r", "--numerics", *args)
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert not (tmp_path / "r").exists()  # nothing written
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    return lines[0]


def test_bad_checkpoints_exit_2_naming_file_and_tensor(tmp_path: Path) -> None:
    missing = tmp_path / "missing.safetensors"
    assert _fails(tmp_path, "--weights", missing) == f"error: {missing}: no such file (--weights / numerics.weights)"
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}......")
    assert "broken.safetensors: not a safetensors file (header is not JSON" in _fails(tmp_path, "--weights", broken)
    wrong = tmp_path / "wrong.safetensors"
    tiny_checkpoint(wrong, hidden=64)
    msg = _fails(tmp_path, "--weights", wrong)
    assert msg == (
        f"error: {wrong}: tensor 'model.layers.0.self_attn.k_proj.weight' has shape [64, 256], the model config "
        "needs [128, 256] (is --weights the checkpoint of this model config?)"
    )
    assert "numerics.layers" in _fails(tmp_path, "--set", "numerics.layers=x")
    assert "numerics.layers = '7': no such layer (the model has 2)" in _fails(tmp_path, "--set", "numerics.layers=7")


def test_same_seed_byte_identical_files(tmp_path: Path) -> None:
    for name in ("a", "b"):
        result = atbprof("run", "--config", TINY, "--out", tmp_path / name, "--numerics", "--trace-format", "both")
        assert result.exit_code == 0, result.output
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == [
        ".atbprof-output.json",
        "ops.parquet",
        "run.json",
        "steps.parquet",
        "trace.json.gz",
        "trace.pftrace",
    ]
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
