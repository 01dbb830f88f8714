"""Decoder-layer weights: seeded random ones, or a layer read from a Hugging Face LLaMA safetensors checkpoint.

Weights are kept in the model's storage dtype (compact) and widened per use: (in, out) for MatMuls.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from atbprof.errors import InputError
from atbprof.graph.dims import ModelDims
from atbprof.numerics.arith import Arith
from atbprof.numerics.dtypes import Dtype, store
from atbprof.numerics.safetensors_io import SafetensorsFile

MATRICES = ("q", "k", "v", "o", "gate", "up", "down")
HF_NAMES = {
    "q": "self_attn.q_proj.weight",
    "k": "self_attn.k_proj.weight",
    "v": "self_attn.v_proj.weight",
    "o": "self_attn.o_proj.weight",
    "gate": "mlp.gate_proj.weight",
    "up": "mlp.up_proj.weight",
    "down": "mlp.down_proj.weight",
    "attn_norm": "input_layernorm.weight",
    "ffn_norm": "post_attention_layernorm.weight",
}
"""Our name -> the tensor under `model.layers.{i}.` in a Hugging Face LLaMA checkpoint ((out, in) matrices)."""


def _shapes(d: ModelDims) -> dict[str, tuple[int, ...]]:
    """HF (out, in) shapes of one layer's tensors."""
    hd = d.head_dim
    return {
        "q": (d.heads * hd, d.hidden),
        "k": (d.kv_heads * hd, d.hidden),
        "v": (d.kv_heads * hd, d.hidden),
        "o": (d.hidden, d.heads * hd),
        "gate": (d.inter, d.hidden),
        "up": (d.inter, d.hidden),
        "down": (d.hidden, d.inter),
        "attn_norm": (d.hidden,),
        "ffn_norm": (d.hidden,),
    }


@dataclass
class LayerWeights:
    """One decoder layer. `mats` hold (in, out) float32 arrays of storage-dtype values; norms (and GPT biases) are
    vectors. Concatenated (merged) weights are built once per layer."""

    layer: int
    dtype: Dtype
    mats: dict[str, np.ndarray]
    norms: dict[str, np.ndarray]
    _merged: dict[tuple[str, ...], np.ndarray] = field(default_factory=dict, repr=False)

    def w(self, name: str, a: Arith) -> np.ndarray:
        return a.c(self.mats[name])

    def cat(self, names: tuple[str, ...], a: Arith) -> np.ndarray:
        """Weights of merged sibling MatMuls (QKV, gate/up) concatenated along N, as ATB loads them."""
        if names not in self._merged:
            self._merged[names] = np.concatenate([self.mats[n] for n in names], axis=1)
        return a.c(self._merged[names])


def uniform_weights(rng: np.random.Generator, shape: tuple[int, ...], std: float, dt: Dtype) -> np.ndarray:
    """Uniform weights of standard deviation `std` (torch.nn.Linear's default init is uniform too), drawn as
    integers r in [-m, m] (m in [1024, 2047]) times 2^-e: exactly representable in fp16, so no rounding pass."""
    e = int(np.floor(np.log2(2047 / (std * np.sqrt(3.0)))))
    m = round(std * np.sqrt(3.0) * 2.0**e)
    r = rng.integers(-m, m + 1, size=shape, dtype=np.int16).astype(np.float32)
    r *= np.float32(2.0**-e)
    return r if dt in ("fp16", "fp32") else store(r, dt)


def random_layer(d: ModelDims, layer: int, seed: int, logit_std: float, dtype: Dtype | None = None) -> LayerWeights:
    """Seeded per (seed, layer), so a subset of layers gets the same weights as the whole model would.

    Q and K are scaled so the attention logits q.k/sqrt(d) of unit-RMS normalised inputs have standard deviation
    `logit_std` (std = hidden * s^2 for entries of std s); the others keep activations at unit scale."""
    rng = np.random.default_rng([seed, layer, 0x6E756D])
    dt: Dtype = dtype or ("fp16" if d.dtype == "fp16" else "bf16")
    s_qk = float(np.sqrt(logit_std / d.hidden))
    scales = {"q": s_qk, "k": s_qk, "v": d.hidden**-0.5, "o": (d.heads * d.head_dim) ** -0.5}
    scales |= {"gate": d.hidden**-0.5, "up": d.hidden**-0.5, "down": d.inter**-0.5}
    mats = {}
    for name, shape in _shapes(d).items():
        if name in scales:
            mats[name] = uniform_weights(rng, (shape[1], shape[0]), scales[name], dt)
    norms = {k: store(1.0 + 0.1 * rng.standard_normal(d.hidden, dtype=np.float32), dt) for k in HF_NAMES if "norm" in k}
    if d.architecture == "gpt":
        norms |= {f"{k}_bias": store(0.05 * rng.standard_normal(d.hidden, dtype=np.float32), dt) for k in list(norms)}
    return LayerWeights(layer, dt, mats, norms)


def checkpoint_layer(ckpt: SafetensorsFile, d: ModelDims, layer: int, dtype: Dtype | None = None) -> LayerWeights:
    """Layer `layer` of a Hugging Face LLaMA checkpoint, checked against the model's dimensions; values rounded to
    `dtype` (default: the model's dtype; fp32 keeps them as stored)."""
    if d.architecture != "llama":
        raise InputError(f"{ckpt.path}: --weights reads Hugging Face LLaMA checkpoints; model.architecture is gpt")
    dt: Dtype = dtype or ("fp16" if d.dtype == "fp16" else "bf16")
    mats, norms = {}, {}
    for key, shape in _shapes(d).items():
        name = f"model.layers.{layer}.{HF_NAMES[key]}"
        if name not in ckpt:
            raise InputError(
                f"{ckpt.path}: tensor {name!r} is missing (Hugging Face LLaMA names expected; "
                f"numerics.layers selects layer {layer})"
            )
        have = ckpt.shape(name)
        if have != shape:
            raise InputError(
                f"{ckpt.path}: tensor {name!r} has shape {list(have)}, the model config needs {list(shape)} "
                "(is --weights the checkpoint of this model config?)"
            )
        arr = store(ckpt.read(name), dt)
        if key in MATRICES:
            mats[key] = np.ascontiguousarray(arr.T)
        else:
            norms[key] = arr
    return LayerWeights(layer, dt, mats, norms)


def embedding_rows(ckpt: SafetensorsFile, d: ModelDims, ids: np.ndarray) -> np.ndarray | None:
    """Rows of model.embed_tokens.weight for the token ids (the real input of layer 0), if the checkpoint has it."""
    name = "model.embed_tokens.weight"
    if name not in ckpt:
        return None
    if ckpt.shape(name) != (d.vocab, d.hidden):
        raise InputError(
            f"{ckpt.path}: tensor {name!r} has shape {list(ckpt.shape(name))}, the model config needs "
            f"{[d.vocab, d.hidden]}"
        )
    return store(ckpt.read(name, rows=ids), "fp16" if d.dtype == "fp16" else "bf16")
