"""Memory: every run counts weights, KV cache, activations and workspace against HBM; what cannot exist is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from atbprof.commands import app
from atbprof.errors import ConfigError
from atbprof.sim.simulate import Simulation
from tests.conftest import FIXTURES, fixture_config

runner = CliRunner()


def test_a_70b_model_on_one_card_is_refused_with_the_numbers() -> None:
    with pytest.raises(ConfigError) as err:
        Simulation(fixture_config("llama2-13b-910b2.yaml", "model.preset=llama2-70b"))
    text = str(err.value)
    assert "does not fit on one 910B2" in text and "weights 138.0" in text and "64 GB" in text
    assert "it fits with parallel.tp: 4" in text and "device.ignore_capacity: true" in text


def test_long_context_large_batch_on_a_small_card_needs_terabytes() -> None:
    # issue 12: 7B at batch 128 / prompt 32768 on a 32 GB 910B4 ran silently with a TTFT of 668 s (needs ~2.2 TB)
    cfg = fixture_config(
        "llama2-7b-910b2.yaml",
        "device.preset=910B4",
        "workload.batch_size=128",
        "workload.prompt_len=32768",
        "model.rope_scaling_factor=9",
    )
    with pytest.raises(ConfigError, match=r"needs 2\d{3}\.\d GB .*KV cache 2207\.6"):
        Simulation(cfg)


def test_a_fitting_run_reports_its_memory() -> None:
    sim = Simulation(fixture_config("llama2-7b-910b2.yaml", "workload.decode_tokens=4"))
    m = sim.memory
    assert m.fits and m.capacity_gb == 64 and m.devices_needed == 1
    assert m.total_gb == pytest.approx(m.weights_gb + m.kv_cache_gb + m.activations_gb + m.workspace_gb, abs=1e-3)
    assert 13 < m.weights_gb < 14  # 6.74 B parameters in fp16
    assert m.max_batch_that_fits >= 1 and m.max_context_that_fits >= 512 + 4


def test_the_largest_batch_and_context_that_fit_are_the_edges() -> None:
    # prompts past LLaMA-2's 4,096 positions: RoPE stretched, so that memory, not the context, is the limit
    base = [
        "device.preset=910B4",
        "workload.prompt_len=4096",
        "workload.decode_tokens=4",
        "model.rope_scaling_factor=32",
    ]
    m = Simulation(fixture_config("llama2-7b-910b2.yaml", *base)).memory
    edge = Simulation(fixture_config("llama2-7b-910b2.yaml", *base, f"workload.batch_size={m.max_batch_that_fits}"))
    assert edge.memory.fits
    with pytest.raises(ConfigError):
        Simulation(fixture_config("llama2-7b-910b2.yaml", *base, f"workload.batch_size={m.max_batch_that_fits + 1}"))
    prompt = m.max_context_that_fits - 4

    def at(p: int) -> Simulation:
        return Simulation(fixture_config("llama2-7b-910b2.yaml", base[0], f"workload.prompt_len={p}", *base[2:]))

    assert at(prompt).memory.fits
    with pytest.raises(ConfigError):
        at(prompt + 1)


def test_ignore_capacity_simulates_and_every_output_says_so(tmp_path: Path) -> None:
    out = tmp_path / "r"
    args = ["run", "--config", str(FIXTURES / "llama2-13b-910b2.yaml"), "--set", "model.preset=llama2-70b"]
    args += ["--set", "device.ignore_capacity=true", "--set", "workload.decode_tokens=2", "--out", str(out)]
    args += ["--set", "output.trace=false", "--format", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "run.json").read_text())
    memory = doc["summary"]["memory"]
    assert memory["fits"] is False and memory["capacity_ignored"] is True and memory["devices_needed"] == 3
    assert any(n.startswith("DOES NOT FIT") for n in doc["notes"])
    fields = {"weights_gb", "kv_cache_gb", "activations_gb", "workspace_gb", "total_gb", "capacity_gb", "fits",
              "max_batch_that_fits", "max_context_that_fits", "devices_needed"}  # fmt: skip
    assert fields <= set(memory)


def test_the_refusal_is_one_clear_error() -> None:
    result = runner.invoke(
        app, ["run", "--config", str(FIXTURES / "llama2-13b-910b2.yaml"), "--set", "model.preset=llama2-70b"]
    )
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.count("error:") == 1 and "does not fit" in result.output


def test_a_sequence_beyond_the_models_context_is_refused_unless_rope_is_stretched() -> None:
    cfg = fixture_config("llama2-7b-910b2.yaml", "workload.prompt_len=4096", "workload.decode_tokens=4")
    with pytest.raises(ConfigError, match=r"prompt_len \+ decode_tokens = 4,100 tokens is beyond llama2-7b's context "
                       r"of 4,096 \(max_position_embeddings\): shorten the prompt, or set model.rope_scaling_factor "
                       r"\(e.g. 2 for linear or dynamic RoPE scaling\)"):  # fmt: skip
        Simulation(cfg)
    assert Simulation(fixture_config("llama2-7b-910b2.yaml", "workload.prompt_len=4092", "workload.decode_tokens=4"))
    stretched = fixture_config(
        "llama2-7b-910b2.yaml", "workload.prompt_len=4096", "workload.decode_tokens=4", "model.rope_scaling_factor=2"
    )
    assert Simulation(stretched).dims.context == 8192


def test_a_config_json_with_rope_scaling_states_its_own_context(tmp_path: Path) -> None:
    from atbprof.config.models import ModelSection
    from atbprof.graph.dims import resolve_model

    cfg = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 8,
           "num_key_value_heads": 4, "num_hidden_layers": 2, "rms_norm_eps": 1e-6, "vocab_size": 1024,
           "max_position_embeddings": 4096}  # fmt: skip
    path = tmp_path / "config.json"
    for scaling, context in (
        (None, 4096),
        ({"type": "linear", "factor": 4.0}, 16384),
        # LLaMA-3.1's: max_position_embeddings is already the stretched length
        ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 512}, 4096),
    ):
        path.write_text(json.dumps(cfg | ({"rope_scaling": scaling} if scaling else {})))
        assert resolve_model(ModelSection(hf_config=str(path))).context == context
