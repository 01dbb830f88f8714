"""load_config: each bad config is one ConfigError, one line per problem (file, line, key, value, fix)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from atbprof.config import load_config, parse_overrides
from atbprof.config.loader import ATB_FLAG_RULES
from atbprof.errors import ConfigError
from atbprof.sim.simulate import Simulation

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
TINY_HF = FIXTURES / "hf" / "tiny-llama" / "config.json"
ATB_FILE = FIXTURES / "atb_fusion_config.yaml"
TINY_MODEL = f"model: {{hf_config: {TINY_HF}}}\n"

ATB_FLAGS = "qkv_fusion, ffn_fusion, rmsnorm_fusion, attention_softmax_fusion, residual_fusion"
MODEL_PRESETS = (
    "llama2-7b, llama2-13b, llama2-70b, llama3-8b, llama3-70b, qwen3-8b, mixtral-8x7b, qwen2.5-7b, llama3.1-8b"
)
DEVICE_PRESETS = "910A, 910B1, 910B2, 910B3, 910B4"
PAGED = (
    "memory.enable_kv_cache_reuse together with paged attention is refused: ATB's KV-cache reuse and "
    "vLLM's PagedAttention manage the same cache and conflict (seed 002, pitfall 2). "
    "Keep paged attention and set enable_kv_cache_reuse: false"
)
BF16_ON_910A = "model.dtype = 'bf16': device 910A (Ascend910) has no bf16 cube support; use dtype fp16 or a 910B device"
SEED002_RULES = (
    "norm_kernel",
    "qkv_merge",
    "rope",
    "flash_attention",
    "gate_up_merge",
    "swiglu",
    "ffn",
    "norm_matmul",
    "add_norm",
)


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def problems(path: Path, overrides: list[str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    err = info.value
    assert all("\n" not in p for p in err.problems), "one line per problem"
    if len(err.problems) == 1:
        assert str(err) == f"invalid config: {err.problems[0]}"
    return err.problems


def sim_problems(path: Path, overrides: list[str] | None = None) -> list[str]:
    cfg = load_config(path, overrides)
    with pytest.raises(ConfigError) as info:
        Simulation(cfg)
    return info.value.problems


# -- valid configs -------------------------------------------------------------------------------------------


def test_minimal_config_gets_defaults_and_name_from_file(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "model: {preset: llama2-7b}\n", "my-run.yaml"))
    assert cfg.name == "my-run"
    assert cfg.model.preset == "llama2-7b"
    assert cfg.device.preset == "910A"
    assert (cfg.workload.batch_size, cfg.workload.prompt_len, cfg.workload.decode_tokens) == (1, 512, 128)
    assert cfg.execution.mode == "eager"
    assert cfg.fusion.strategy == "default"


def test_default_name_from_a_file_name_with_spaces_is_valid(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "model: {preset: llama2-7b}\n", "my run (v2).yaml"))
    assert cfg.name == "my-run-v2-"


def test_shorthand_sections(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "model: llama3-8b\ndevice: 910B2\nfusion: aggressive\n"))
    assert cfg.model.preset == "llama3-8b"
    assert cfg.device.preset == "910B2"
    assert cfg.fusion.strategy == "aggressive"


def test_hf_config_is_resolved_relative_to_the_config_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load_config(FIXTURES / "tiny-llama.yaml")
    assert Path(cfg.model.hf_config or "") == TINY_HF
    Simulation(cfg)


@pytest.mark.parametrize("path", sorted(set(FIXTURES.glob("*.yaml")) - {ATB_FILE}), ids=lambda p: p.name)
def test_every_fixture_run_config_loads(path: Path) -> None:
    load_config(path)


# -- one problem each ----------------------------------------------------------------------------------------


def test_unknown_top_level_key(tmp_path: Path) -> None:
    path = write(tmp_path, "model: {preset: llama2-7b}\nworkloads:\n  batch_size: 2\n")
    assert problems(path) == [
        f"{path} line 2: workloads: unknown key (did you mean 'workload'?); remove it or check the spelling"
    ]


def test_unknown_nested_key(tmp_path: Path) -> None:
    path = write(tmp_path, "model: {preset: llama2-7b}\nworkload:\n  batch_size: 1\n  batchsize: 2\n")
    assert problems(path) == [
        f"{path} line 4: workload.batchsize: unknown key (did you mean 'batch_size'?); remove it or check the spelling"
    ]


def test_wrong_type(tmp_path: Path) -> None:
    path = write(tmp_path, "model: {preset: llama2-7b}\nworkload:\n  prompt_len: lots\n")
    assert problems(path) == [f"{path} line 3: workload.prompt_len = 'lots': expected a whole number (e.g. 32)"]


def test_batch_size_zero_is_out_of_range(tmp_path: Path) -> None:
    path = write(tmp_path, "model: {preset: llama2-7b}\nworkload:\n  batch_size: 0\n")
    assert problems(path) == [f"{path} line 3: workload.batch_size = 0: Input should be greater than or equal to 1"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "model:\n  preset: llama2-7b\n  dtype: fp8\n",
            "line 3: model.dtype = 'fp8': Input should be 'fp16' or 'bf16'",
        ),
        (
            "model: {preset: llama2-7b}\nexecution:\n  mode: turbo\n",
            "line 3: execution.mode = 'turbo': Input should be 'eager' or 'graph'",
        ),
    ],
    ids=["dtype-fp8", "mode-turbo"],
)
def test_bad_enum_value(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    assert problems(path) == [f"{path} {expected}"]


@pytest.mark.parametrize(
    ("text", "line"),
    [("model:\n  preset: llama9\n", 2), ("model: llama9\n", 1)],
    ids=["section", "shorthand"],
)
def test_unknown_model_preset(tmp_path: Path, text: str, line: int) -> None:
    path = write(tmp_path, text)
    assert problems(path) == [
        f"{path} line {line}: model.preset = 'llama9': unknown preset "
        f"(allowed: {MODEL_PRESETS}; or give model.hf_config: path/to/config.json)"
    ]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("model: {preset: llama2-7b}\ndevice:\n  preset: 910C\n", 3),
        ("model: {preset: llama2-7b}\ndevice: 910C\n", 2),
    ],
    ids=["section", "shorthand"],
)
def test_unknown_device_preset(tmp_path: Path, text: str, line: int) -> None:
    path = write(tmp_path, text)
    assert problems(path) == [
        f"{path} line {line}: device.preset = '910C': unknown device "
        f"(allowed: {DEVICE_PRESETS}; or device.spec: path/to/spec.yaml)"
    ]


@pytest.mark.parametrize("text", ["device: {preset: 910A}\n", ""], ids=["no-model", "empty-file"])
def test_missing_model_section(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    assert problems(path) == [
        f"{path}: model: required section is missing; add e.g. `model: {{preset: llama2-7b}}` "
        "or `model: {hf_config: path/to/config.json}`"
    ]


def test_model_with_both_preset_and_hf_config(tmp_path: Path) -> None:
    path = write(tmp_path, f"name: x\nmodel:\n  preset: llama2-7b\n  hf_config: {TINY_HF}\n")
    assert problems(path) == [f"{path} line 2: model: give either model.preset or model.hf_config, not both"]


def test_model_with_neither_preset_nor_hf_config(tmp_path: Path) -> None:
    path = write(tmp_path, "model:\n  dtype: fp16\n")
    assert problems(path) == [f"{path} line 1: model: model needs a preset ({MODEL_PRESETS}) or an hf_config path"]


def test_section_that_is_not_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "model: {preset: llama2-7b}\nworkload: 3\n")
    assert problems(path) == [f"{path} line 2: workload = 3: expected a section (a mapping of keys to values)"]


def test_bad_name(tmp_path: Path) -> None:
    path = write(tmp_path, "name: my run\nmodel: {preset: llama2-7b}\n")
    assert problems(path) == [
        f"{path} line 1: name = 'my run': use 1-200 letters, digits, '.', '_' or '-', not starting with '.' (the "
        "name becomes the output directory traces/<name>)"
    ]


@pytest.mark.parametrize("text", ["- model\n- device\n", "just a string\n", "42\n"], ids=["list", "str", "int"])
def test_top_level_not_a_mapping(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    assert problems(path) == [f"{path}: the top level must be a mapping with sections model, device, workload, ..."]


def test_invalid_yaml_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "model:\n  preset: [llama2-7b\nworkload: {batch_size: 1}\n")
    assert problems(path) == [f"{path} line 3, column 9: not valid YAML (expected ',' or ']', but got ':')"]


def test_invalid_yaml_bad_indent(tmp_path: Path) -> None:
    path = write(tmp_path, "model: {preset: llama2-7b}\n  dtype: fp16\n")
    (msg,) = problems(path)
    assert msg.startswith(f"{path} line 2, column 3: not valid YAML (")


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    assert problems(path) == [f"{path}: no such file; pass an existing YAML file to --config"]


# -- several problems at once --------------------------------------------------------------------------------


def test_several_problems_are_reported_together(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "model:\n  preset: llama2-7b\n  dtype: fp8\n"
        "workload:\n  batch_size: 0\n  batchsize: 2\n"
        "execution: {mode: turbo}\n"
        "extra: 1\n",
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    expected = [
        f"{path} line 3: model.dtype = 'fp8': Input should be 'fp16' or 'bf16'",
        f"{path} line 5: workload.batch_size = 0: Input should be greater than or equal to 1",
        f"{path} line 6: workload.batchsize: unknown key (did you mean 'batch_size'?); remove it or check the spelling",
        f"{path} line 7: execution.mode = 'turbo': Input should be 'eager' or 'graph'",
        f"{path} line 8: extra: unknown key; remove it or check the spelling",
    ]
    assert info.value.problems == expected
    assert str(info.value).splitlines() == ["invalid config: 5 problem(s)", *(f"  - {p}" for p in expected)]


# -- seed 002's ATB fusion-strategy file ---------------------------------------------------------------------


def test_seed002_atb_file_is_translated(tmp_path: Path) -> None:
    path = write(tmp_path, f"{TINY_MODEL}fusion: {ATB_FILE}\n")
    fusion = load_config(path).fusion
    assert fusion.enable == SEED002_RULES
    assert "attention_softmax" not in fusion.enable  # attention_softmax_fusion: false in the file
    assert fusion.strategy == "none"
    assert fusion.source_format == "atb_fusion_config"
    rules = [r.name for r in Simulation(load_config(path)).rules]
    assert sorted(rules) == sorted(SEED002_RULES)


def test_seed002_fixture_resolves_the_atb_file_next_to_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # relative to the config file, not the CWD
    cfg = load_config(FIXTURES / "llama2-7b-atb-graph.yaml")
    assert cfg.fusion.enable == SEED002_RULES
    assert cfg.execution.mode == "graph"


def test_atb_flag_names_match_the_allowed_list() -> None:
    assert ", ".join(ATB_FLAG_RULES) == ATB_FLAGS


def test_atb_fusion_section_inline(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"{TINY_MODEL}fusion:\n  fusion_strategy: {{qkv_fusion: true, ffn_fusion: false}}\n"
        "  performance: {softmax_fusion_max_seq: 256}\n",
    )
    fusion = load_config(path).fusion
    assert fusion.enable == ("norm_kernel", "qkv_merge", "rope", "flash_attention")
    assert fusion.softmax_fusion_max_seq == 256


def test_atb_file_with_unknown_flag(tmp_path: Path) -> None:
    atb = write(
        tmp_path,
        "model_type: llama\nfusion_strategy:\n  qkv_fusion: true\n  magic_fusion: true\n",
        "atb.yaml",
    )
    path = write(tmp_path, f"{TINY_MODEL}fusion: atb.yaml\n")
    assert problems(path) == [f"{atb} line 4: fusion_strategy.magic_fusion: unknown flag (allowed: {ATB_FLAGS})"]


def test_atb_file_several_problems(tmp_path: Path) -> None:
    atb = write(
        tmp_path,
        "model_type: llama\ntuning: {}\nfusion_strategy:\n  qkv_fusion: yes please\n  magic_fusion: true\nmemory: 3\n",
        "atb.yaml",
    )
    path = write(tmp_path, f"{TINY_MODEL}fusion: atb.yaml\n")
    assert problems(path) == [
        f"{atb} line 2: tuning: unknown key in an ATB fusion config "
        "(allowed: fusion_strategy, memory, model_type, performance)",
        f"{atb} line 6: memory = 3: expected a mapping of keys to values",
        f"{atb} line 4: fusion_strategy.qkv_fusion = 'yes please': expected true or false",
        f"{atb} line 5: fusion_strategy.magic_fusion: unknown flag (allowed: {ATB_FLAGS})",
    ]


def test_inline_atb_section_with_unknown_flag(tmp_path: Path) -> None:
    path = write(tmp_path, f"{TINY_MODEL}fusion:\n  fusion_strategy:\n    magic_fusion: true\n")
    assert problems(path) == [
        f"{path} line 4: fusion.fusion_strategy.magic_fusion: unknown flag (allowed: {ATB_FLAGS})"
    ]


def test_missing_atb_file(tmp_path: Path) -> None:
    path = write(tmp_path, f"{TINY_MODEL}fusion: missing.yaml\n")
    assert problems(path) == [
        f"missing.yaml: no such file; `fusion: missing.yaml` in {path} names an ATB fusion config that is not there"
    ]


def test_missing_atb_file_from_an_override(tmp_path: Path) -> None:
    path = write(tmp_path, TINY_MODEL)
    assert problems(path, ["fusion=missing.yaml"]) == [
        "missing.yaml: no such file; --set fusion=missing.yaml names an ATB fusion config that is not there"
    ]


def test_atb_file_that_is_not_a_mapping(tmp_path: Path) -> None:
    atb = write(tmp_path, "- qkv_fusion\n", "atb.yaml")
    path = write(tmp_path, f"{TINY_MODEL}fusion: atb.yaml\n")
    assert problems(path) == [f"{atb}: expected an ATB fusion config (fusion_strategy, memory)"]


def test_atb_file_passed_as_the_run_config() -> None:
    assert problems(ATB_FILE) == [
        f"{ATB_FILE} is an ATB fusion-strategy file (seed 002's atb_fusion_config.yaml), not a run config: "
        "reference it from a run config as `fusion: atb_fusion_config.yaml` "
        "(see fixtures/llama2-7b-atb-graph.yaml)"
    ]


def test_seed002_pitfall_kv_reuse_with_paged_attention_in_atb_file(tmp_path: Path) -> None:
    text = ATB_FILE.read_text(encoding="utf-8") + "  paged_attention: true\n"
    atb = write(tmp_path, text, "atb_fusion_config.yaml")
    path = write(tmp_path, f"{TINY_MODEL}fusion: atb_fusion_config.yaml\n")
    (msg,) = problems(path)
    line = text.splitlines().index("  enable_kv_cache_reuse: true   # KV Cache 复用（多轮对话场景）") + 1
    assert msg == f"{atb} line {line}: memory.enable_kv_cache_reuse = true: {PAGED}"
    assert "PagedAttention" in msg


def test_seed002_pitfall_inline(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"{TINY_MODEL}fusion:\n  fusion_strategy: {{qkv_fusion: true}}\n"
        "  memory:\n    enable_kv_cache_reuse: true\n    paged_attention: true\n",
    )
    assert problems(path) == [f"{path} line 5: fusion.memory.enable_kv_cache_reuse = true: {PAGED}"]


def test_keys_with_no_effect_are_refused_saying_so(tmp_path: Path) -> None:
    """ATB's memory switches change no kernel the simulator prices: an atbprof config that sets them is told so
    (they are read from an ATB fusion config, for seed 002's pitfall, and nowhere else)."""
    path = write(tmp_path, f"{TINY_MODEL}fusion:\n  kv_cache_reuse: true\n  paged_attention: true\n")
    assert problems(path) == [
        f"{path} line 3: fusion.kv_cache_reuse: not a setting of the simulator (it changes no kernel it prices); "
        "remove it. In an ATB fusion config memory.enable_kv_cache_reuse is read for seed 002's paged-attention "
        "pitfall",
        f"{path} line 4: fusion.paged_attention: not a setting of the simulator (paged attention changes no kernel "
        "it prices); remove it. In an ATB fusion config (`fusion: atb_fusion_config.yaml`) "
        "memory.paged_attention is read for seed 002's KV-cache-reuse pitfall",
    ]


def test_rules_both_enabled_and_disabled(tmp_path: Path) -> None:
    path = write(tmp_path, f"{TINY_MODEL}fusion: {{enable: [rope, ffn], disable: [ffn, rope]}}\n")
    assert problems(path) == [f"{path} line 2: fusion: rules both enabled and disabled: ffn, rope"]


# -- --set overrides -----------------------------------------------------------------------------------------


def test_parse_overrides_values_are_yaml_scalars() -> None:
    assert parse_overrides(["workload.batch_size=32", "fusion=none", "model.dtype=bf16", "output.trace=false"]) == [
        (("workload", "batch_size"), 32),
        (("fusion",), "none"),
        (("model", "dtype"), "bf16"),
        (("output", "trace"), False),
    ]


def test_parse_overrides_keeps_unparsable_yaml_as_text() -> None:
    assert parse_overrides(["name=a: b: c"]) == [(("name",), "a: b: c")]


@pytest.mark.parametrize("item", ["foo", "=3", " =3"])
def test_malformed_set(item: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_overrides([item])
    assert info.value.problems == [f"--set {item!r}: expected KEY.PATH=VALUE, e.g. --set workload.batch_size=32"]


def test_malformed_set_in_load_config() -> None:
    assert problems(FIXTURES / "tiny-llama.yaml", ["foo"]) == [
        "--set 'foo': expected KEY.PATH=VALUE, e.g. --set workload.batch_size=32"
    ]


def test_overrides_apply(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"{TINY_MODEL}fusion: {{strategy: aggressive, enable: [rope], softmax_fusion_max_seq: 64}}\n",
    )
    cfg = load_config(path, ["workload.batch_size=32", "fusion=none", "model.dtype=bf16", "device=910B2"])
    assert cfg.workload.batch_size == 32
    assert isinstance(cfg.workload.batch_size, int)
    assert cfg.model.dtype == "bf16"
    assert cfg.model.hf_config == str(TINY_HF)  # the rest of the model section is kept
    assert cfg.device.preset == "910B2"
    # `fusion=none` replaces the whole section
    assert cfg.fusion.strategy == "none"
    assert cfg.fusion.enable == ()
    assert cfg.fusion.softmax_fusion_max_seq == 1024


def test_override_into_a_shorthand_section(tmp_path: Path) -> None:
    path = write(tmp_path, "model: llama2-7b\nfusion: aggressive\n")
    cfg = load_config(path, ["model.dtype=bf16", "fusion.disable=[rope]"])
    assert (cfg.model.preset, cfg.model.dtype) == ("llama2-7b", "bf16")
    assert (cfg.fusion.strategy, cfg.fusion.disable) == ("aggressive", ("rope",))


def test_bad_override_names_the_set_not_a_file_line(tmp_path: Path) -> None:
    path = write(tmp_path, "model: {preset: llama2-7b}\nworkload:\n  batch_size: 4\n")
    assert problems(path, ["workload.batch_size=0", "workload.batchsize=2"]) == [
        f"{path}, --set workload.batch_size=0: workload.batch_size = 0: Input should be greater than or equal to 1",
        f"{path}, --set workload.batchsize=2: workload.batchsize: unknown key (did you mean 'batch_size'?); remove "
        "it or check the spelling",
    ]


def test_override_replacing_a_section_is_blamed_for_its_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "model:\n  preset: llama2-7b\n")
    assert problems(path, ["model=llama9"]) == [
        f"{path}, --set model=llama9: model.preset = 'llama9': unknown preset "
        f"(allowed: {MODEL_PRESETS}; or give model.hf_config: path/to/config.json)"
    ]


def test_override_with_an_atb_file(tmp_path: Path) -> None:
    shutil.copy(ATB_FILE, tmp_path / "atb.yaml")
    path = write(tmp_path, f"{TINY_MODEL}fusion: {{strategy: aggressive}}\n")
    assert load_config(path, ["fusion=atb.yaml"]).fusion.enable == SEED002_RULES


# -- checks made when the run is resolved (Simulation) -------------------------------------------------------


def test_bf16_on_910a_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, f"model: {{hf_config: {TINY_HF}, dtype: bf16}}\ndevice: 910A\n")
    assert sim_problems(path) == [BF16_ON_910A]


def test_bf16_on_910b_is_fine(tmp_path: Path) -> None:
    path = write(tmp_path, f"model: {{hf_config: {TINY_HF}, dtype: bf16}}\ndevice: 910B2\n")
    assert Simulation(load_config(path)).dims.dtype == "bf16"


def test_bf16_override_on_tiny_llama_is_refused() -> None:
    assert sim_problems(FIXTURES / "tiny-llama.yaml", ["model.dtype=bf16"]) == [BF16_ON_910A]


def test_unknown_fusion_strategy(tmp_path: Path) -> None:
    path = write(tmp_path, f"{TINY_MODEL}fusion: {{strategy: turbo}}\n")
    (msg,) = sim_problems(path)
    assert msg.startswith("fusion.strategy = 'turbo': unknown strategy (allowed: none, default, aggressive, ")
    assert msg.endswith(")")


def test_unknown_rule_names(tmp_path: Path) -> None:
    path = write(tmp_path, f"{TINY_MODEL}fusion: {{enable: [nope, rope], disable: [zzz]}}\n")
    (msg,) = sim_problems(path)
    assert msg.startswith("fusion.enable/disable: unknown rule(s) nope, zzz (allowed: norm_kernel, rope, ")
