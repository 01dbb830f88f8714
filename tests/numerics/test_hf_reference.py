"""The numpy decoder layer against Hugging Face transformers' LlamaDecoderLayer on CPU (same config and weights):
prefill and one decode step with a KV cache, MHA and GQA, in fp32 and fp16.

Tolerances (scaled error = max |a - b| / max(|b|, rms(b))): fp32 1e-5 (accumulation order only); fp16: every
layer within 4e-3 (8 half-ULPs) of float64, and ours within 4e-3 of HF's own fp16 layer (the two round at
the same points but accumulate in different orders)."""

from __future__ import annotations

import numpy as np
import pytest

from atbprof.numerics.arith import Arith
from atbprof.numerics.weights import random_layer
from tests.numerics.helpers import ref_layer, run_layer, scaled_err, tiny_dims

torch = pytest.importorskip("torch")
modeling = pytest.importorskip("transformers.models.llama.modeling_llama")
transformers = pytest.importorskip("transformers")

PROMPT = 12


def _hf_layer(d, w, dtype):  # type: ignore[no-untyped-def]
    cfg = transformers.LlamaConfig(
        hidden_size=d.hidden,
        intermediate_size=d.inter,
        num_attention_heads=d.heads,
        num_key_value_heads=d.kv_heads,
        num_hidden_layers=1,
        rms_norm_eps=d.eps,
        vocab_size=d.vocab,
        rope_theta=10000.0,
        attn_implementation="eager",
    )
    layer = modeling.LlamaDecoderLayer(cfg, layer_idx=0)
    names = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj"}
    names |= {"gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}
    state = {f"{hf}.weight": torch.from_numpy(np.ascontiguousarray(w.mats[k].T)) for k, hf in names.items()}
    state["input_layernorm.weight"] = torch.from_numpy(w.norms["attn_norm"])
    state["post_attention_layernorm.weight"] = torch.from_numpy(w.norms["ffn_norm"])
    layer.load_state_dict(state)
    return cfg, layer.to(dtype).eval()


def _hf_run(d, w, x, x_dec, dtype):  # type: ignore[no-untyped-def]
    cfg, layer = _hf_layer(d, w, dtype)
    rope = modeling.LlamaRotaryEmbedding(config=cfg)
    cache = transformers.DynamicCache(config=cfg)
    min_ = torch.finfo(dtype).min
    with torch.no_grad():
        h = torch.from_numpy(x)[None].to(dtype)
        pos = torch.arange(PROMPT)[None]
        mask = torch.triu(torch.full((PROMPT, PROMPT), min_, dtype=dtype), diagonal=1)[None, None]
        out = layer(h, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True,
                    position_embeddings=rope(h, pos))  # fmt: skip
        h1 = torch.from_numpy(x_dec)[None].to(dtype)
        pos1 = torch.tensor([[PROMPT]])
        mask1 = torch.zeros((1, 1, 1, PROMPT + 1), dtype=dtype)
        out1 = layer(h1, attention_mask=mask1, position_ids=pos1, cache=cache, use_cache=True,
                     position_embeddings=rope(h1, pos1))  # fmt: skip
    return out[0].float().numpy(), out1[0].float().numpy()


@pytest.mark.parametrize("kv_heads", [4, 2], ids=["mha", "gqa"])
def test_fp32_matches_hf(kv_heads: int) -> None:
    d = tiny_dims(kv_heads)
    w = random_layer(d, 0, seed=5, logit_std=2.0, dtype="fp32")
    rng = np.random.default_rng(1)
    x, x_dec = rng.standard_normal((PROMPT, d.hidden), np.float32), rng.standard_normal((1, d.hidden), np.float32)
    hf_pre, hf_dec = _hf_run(d, w, x, x_dec, torch.float32)
    ours = run_layer(d, w, x, x_dec, Arith("fp32"))
    ref = ref_layer(d, w, x, x_dec)
    for mine, theirs, exact in zip(ours, (hf_pre, hf_dec), ref, strict=True):
        assert scaled_err(mine, theirs) < 1e-5
        assert scaled_err(theirs, exact) < 1e-5


@pytest.mark.parametrize("kv_heads", [4, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
def test_fp16_matches_hf(kv_heads: int, fused: bool) -> None:
    d = tiny_dims(kv_heads)
    w = random_layer(d, 0, seed=6, logit_std=2.0)
    rng = np.random.default_rng(2)
    x, x_dec = rng.standard_normal((PROMPT, d.hidden), np.float32), rng.standard_normal((1, d.hidden), np.float32)
    variants = {"attn_norm": "fused", "ffn_norm": "fused", "qkv": "merged", "rope": "fused", "attn": "flash"}
    variants |= {"gate_up": "merged", "act": "fused"}
    hf = _hf_run(d, w, x, x_dec, torch.float16)
    ours = run_layer(d, w, x, x_dec, Arith("fp16"), variants if fused else {})
    ref = ref_layer(d, w, x, x_dec)
    for mine, theirs, exact in zip(ours, hf, ref, strict=True):
        assert scaled_err(theirs, exact) < 4e-3
        assert scaled_err(mine, exact) < 4e-3
        assert scaled_err(mine, theirs) < 4e-3
        if not fused:  # the same op sequence, the same roundings: nearly every element agrees exactly
            assert np.mean(mine == theirs) > 0.9
