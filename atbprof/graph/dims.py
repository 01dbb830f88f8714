"""Model dimensions from a preset or a Hugging Face config.json."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from atbprof.data.models import PRESETS, preset_config
from atbprof.errors import ConfigError, InputError
from atbprof.graph.expr import active_experts

if TYPE_CHECKING:  # the run config models load only with a config (analyze of other profiles needs none)
    from atbprof.config.models import ModelSection

_HF_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "num_hidden_layers",
    "rms_norm_eps",
    "vocab_size",
)


@dataclass(frozen=True)
class ModelDims:
    name: str
    architecture: str  # llama | gpt
    hidden: int
    inter: int
    heads: int
    kv_heads: int
    layers: int
    vocab: int
    eps: float
    dtype: str  # fp16 | bf16
    tp: int = 1  # tensor-parallel ranks: the graph is one rank's share (parallel/sharding.py)
    sp: bool = False  # sequence parallelism: norms and residual adds on T / tp tokens, ReduceScatter / AllGather
    max_positions: int = 0  # max_position_embeddings (0: not given)
    context: int = 0  # the longest sequence the model is run at: max_positions, stretched by RoPE scaling (0: any)
    quant: str = "none"  # none | w8a8 (int8 weights, per-token dynamic int8 activations in the decoder's linears)
    kv_int8: bool = False  # the KV cache holds int8 (one byte per element)
    qk_norm: bool = False  # RMSNorm over each query and key head before RoPE (Qwen3)
    experts: int = 0  # a MoE model's routed experts per layer (0: a dense FFN)
    experts_per_token: int = 0  # experts each token is routed to (top-k)
    expert_inter: int = 0  # one expert's FFN width
    sampling: str = "greedy"  # greedy (argmax) | top_k_top_p (vLLM's top-k / top-p filter, then a random draw)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def heads_local(self) -> int:
        return self.heads // self.tp

    @property
    def kv_local(self) -> int:
        """KV heads per rank: split while there are enough, else each rank keeps its query group's one (replicated)."""
        return self.kv_heads // self.tp if self.kv_heads >= self.tp else 1

    @property
    def inter_local(self) -> int:
        return -(-self.inter // self.tp)

    @property
    def expert_inter_local(self) -> int:
        return -(-self.expert_inter // self.tp)  # each expert's FFN split over the tp ranks (vLLM's TP MoE)

    @property
    def moe(self) -> tuple[int, int]:
        """(experts, experts per token): the `experts` argument of basis_values; (0, 0) for a dense model."""
        return (self.experts, self.experts_per_token)

    @property
    def vocab_local(self) -> int:
        return -(-self.vocab // self.tp)  # Megatron pads the vocabulary to a multiple of tp

    def local(self, by: str) -> tuple[int, int]:
        """(full, per-rank) size of a sharded dimension: heads, kv_heads, inter or vocab."""
        return {
            "heads": (self.heads, self.heads_local),
            "kv_heads": (self.kv_heads, self.kv_local),
            "inter": (self.inter, self.inter_local),
            "expert_inter": (self.expert_inter, self.expert_inter_local),
            "vocab": (self.vocab, self.vocab_local),
        }[by]

    @property
    def dsize(self) -> int:
        return 2

    @property
    def msprof_dtype(self) -> str:
        return "DT_FLOAT16" if self.dtype == "fp16" else "DT_BF16"

    def layer_weight_bytes(self) -> int:
        """Bytes of one rank's weights of one decoder layer."""
        h, i, d = self.hidden, self.inter_local, self.head_dim
        attn = h * (self.heads_local * d) * 2 + h * (self.kv_local * d) * 2
        mlp = 3 * h * i if self.architecture == "llama" else 2 * h * i
        if self.experts:  # the router and every expert's gate, up and down projections
            mlp = h * self.experts + self.experts * self.expert_weights()
        return (attn + mlp + 2 * h) * self.dsize

    def expert_weights(self) -> int:
        """Weights (elements) of one expert's gate, up and down projections on one rank."""
        return 3 * self.hidden * self.expert_inter_local

    def weight_bytes(self, tokens: int = 0) -> int:
        """Bytes of one rank's weights read once per decode token (embedding counted as one row); a MoE layer reads
        the experts `tokens` tokens are expected to reach (all of them when `tokens` is 0)."""
        per_layer = self.layer_weight_bytes()
        if self.experts and tokens:
            idle = self.experts - float(active_experts(self.experts, self.experts_per_token, np.array(tokens)))
            per_layer -= int(idle * self.expert_weights() * self.dsize)
        return self.layers * per_layer + (self.hidden + self.vocab_local * self.hidden) * self.dsize

    def table_bytes(self) -> int:
        """One rank's share of the embedding table beyond the row weight_bytes counts."""
        return (self.vocab_local - 1) * self.hidden * self.dsize

    def sharded(self, tp: int, sequence_parallel: bool = False) -> ModelDims:
        """These dims split over `tp` ranks (and their tokens outside the linears too, with sequence parallelism);
        ConfigError if the heads can not be split that way."""
        problems = []
        if self.heads % tp:
            problems.append(
                f"parallel.tp = {tp}: {self.name} has {self.heads} attention heads, not divisible by {tp} (each "
                "rank takes whole heads)"
            )
        if self.kv_heads % tp and tp % self.kv_heads:
            problems.append(
                f"parallel.tp = {tp}: {self.name} has {self.kv_heads} KV heads; tp must divide them or be a "
                "multiple of them (then each rank keeps its group's KV head, replicated)"
            )
        if problems:
            raise ConfigError(problems)
        return replace(self, tp=tp, sp=sequence_parallel and tp > 1)


_QK_NORM_MODELS = ("qwen3", "qwen3_moe")
"""Hugging Face model types whose attention normalises each query and key head (Qwen3Attention's q_norm, k_norm)."""
HF_CONFIG_MAX_BYTES = 1 << 24  # a config.json is a few KB


def _load_hf(path: str) -> dict[str, Any]:
    from atbprof.inputs import read_text

    try:
        data = json.loads(read_text(Path(path), HF_CONFIG_MAX_BYTES))
    except InputError as err:
        raise ConfigError(f"model.hf_config: {err}") from None
    except (json.JSONDecodeError, RecursionError) as err:
        raise ConfigError(f"model.hf_config: {path}: not a readable JSON file ({err})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"model.hf_config: {path}: expected a JSON object like a Hugging Face config.json")
    return data


def resolve_model(section: ModelSection) -> ModelDims:
    if section.preset:
        if section.preset not in PRESETS:
            raise ConfigError(
                f"model.preset = {section.preset!r}: unknown preset (allowed: {', '.join(PRESETS)}; "
                "or give model.hf_config: path/to/config.json)"
            )
        hf: dict[str, Any] = preset_config(section.preset)
        name = section.preset
        source = f"preset {section.preset}"
    else:
        assert section.hf_config is not None
        hf = _load_hf(section.hf_config)
        name = Path(section.hf_config).parent.name or Path(section.hf_config).stem
        source = section.hf_config
    values: dict[str, Any] = {k: hf.get(k) for k in _HF_KEYS}
    if values["num_key_value_heads"] is None:
        values["num_key_value_heads"] = values["num_attention_heads"]
    if values["rms_norm_eps"] is None:
        values["rms_norm_eps"] = hf.get("layer_norm_eps", 1e-5)
    for key in _HF_KEYS:
        override = getattr(section, key)
        if override is not None:
            values[key] = override
    missing = [k for k in _HF_KEYS if values[k] is None]
    if missing:
        raise ConfigError(
            f"model ({source}): missing {', '.join(missing)}; add them to the config.json or model section"
        )
    from atbprof.config.models import MODEL_LIMITS

    problems = []
    for key in _HF_KEYS:
        value = values[key]
        lo, hi = MODEL_LIMITS[key]
        number = isinstance(value, int | float) and not isinstance(value, bool)
        ok = number and lo <= value <= hi and (key == "rms_norm_eps" or isinstance(value, int))
        if not ok:
            kind = "number" if key == "rms_norm_eps" else "whole number"
            problems.append(f"model.{key} = {value!r} ({source}): must be a {kind} from {lo:g} to {hi:g}")
    if problems:
        raise ConfigError(problems)
    h, heads, kvh = int(values["hidden_size"]), int(values["num_attention_heads"]), int(values["num_key_value_heads"])
    if h % heads:
        problems.append(f"model.hidden_size = {h} is not divisible by num_attention_heads = {heads}")
    if heads % kvh:
        problems.append(
            f"model.num_attention_heads = {heads} is not divisible by num_key_value_heads = {kvh} (GQA groups)"
        )
    head_dim = _whole(hf.get("head_dim"), 1, 1 << 20)
    if head_dim and h % heads == 0 and head_dim != h // heads:
        problems.append(
            f"model ({source}): head_dim = {head_dim} differs from hidden_size / num_attention_heads = "
            f"{h // heads}; atbprof models heads of hidden_size / num_attention_heads only"
        )
    if problems:
        raise ConfigError(problems)
    qk_norm = section.qk_norm if section.qk_norm is not None else hf.get("model_type") in _QK_NORM_MODELS
    experts, per_token, expert_inter = _moe(hf, source, int(values["intermediate_size"]))
    if experts and section.quant != "none":
        problems.append(f"model ({source}): quant {section.quant} of a MoE model's experts is not modelled")
    if experts and section.architecture != "llama":
        problems.append(f"model ({source}): a MoE model needs architecture: llama (RMSNorm, RoPE, SwiGLU experts)")
    if problems:
        raise ConfigError(problems)
    positions = _whole(hf.get("max_position_embeddings"), 1, 1 << 31)  # 0: the config does not say
    return ModelDims(
        name=name,
        architecture=section.architecture,
        hidden=h,
        inter=int(values["intermediate_size"]),
        heads=heads,
        kv_heads=kvh,
        layers=int(values["num_hidden_layers"]),
        vocab=int(values["vocab_size"]),
        eps=float(values["rms_norm_eps"]),
        dtype=section.dtype,
        max_positions=positions,
        context=_context(positions, hf.get("rope_scaling"), section),
        quant=section.quant,
        kv_int8=section.kv_cache_dtype == "int8",
        qk_norm=qk_norm,
        experts=experts,
        experts_per_token=per_token,
        expert_inter=expert_inter,
        sampling=section.sampling,
    )


MAX_EXPERTS = 1024
"""More routed experts than any released MoE (DeepSeek-V3: 256, Qwen3-MoE: 128)."""


def _moe(hf: dict[str, Any], source: str, inter: int) -> tuple[int, int, int]:
    """(experts, experts per token, one expert's FFN width) of a Hugging Face MoE config (Mixtral's
    num_local_experts, Qwen-MoE's num_experts and moe_intermediate_size); (0, 0, 0) for a dense model."""
    experts = hf.get("num_local_experts", hf.get("num_experts"))
    if experts is None:
        return 0, 0, 0
    per_token = hf.get("num_experts_per_tok")
    width = hf.get("moe_intermediate_size", inter)

    n_experts = _whole(experts, 1, MAX_EXPERTS)
    k = _whole(per_token, 1, n_experts or 1)
    if not n_experts or not k:
        raise ConfigError(
            f"model ({source}): a MoE config needs num_local_experts (or num_experts) from 1 to {MAX_EXPERTS} and "
            f"num_experts_per_tok from 1 to that; got {experts!r} and {per_token!r}"
        )
    expert_width = _whole(width, 1, 1_048_576)
    if not expert_width:
        raise ConfigError(f"model ({source}): moe_intermediate_size = {width!r}: must be a whole number from 1")
    if hf.get("shared_expert_intermediate_size") or hf.get("n_shared_experts"):
        raise ConfigError(f"model ({source}): shared experts are not modelled (routed experts only)")
    return n_experts, k, expert_width


def _context(positions: int, scaling: object, section: ModelSection) -> int:
    """The longest sequence the model runs at: max_position_embeddings times the RoPE scaling factor (the model
    section's, else the config.json's rope_scaling; a config that also gives original_max_position_embeddings,
    as LLaMA-3.1's does, already states the stretched length); 0 when the config gives no length."""
    if not positions:
        return 0
    if section.rope_scaling_factor is not None:
        return int(positions * section.rope_scaling_factor)
    if isinstance(scaling, dict) and "original_max_position_embeddings" not in scaling:
        factor = scaling.get("factor")
        if isinstance(factor, int | float) and not isinstance(factor, bool) and 1 <= factor <= 1024:
            return int(positions * factor)
    return positions


def _whole(value: object, lo: int, hi: int) -> int:
    """`value` when it is a whole number (not a bool) from lo to hi, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi else 0
