"""The safetensors reader: round trip of a tiny HF-named checkpoint, agreement with the `safetensors` package,
and one clear InputError per broken file (naming the file and the tensor)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from atbprof.errors import InputError
from atbprof.numerics.safetensors_io import SafetensorsFile, save_safetensors
from atbprof.numerics.weights import HF_NAMES, checkpoint_layer, random_layer
from tests.numerics.helpers import tiny_dims


def hf_checkpoint(path: Path, layers: int = 1, dtype: str = "F16", kv_heads: int = 2) -> dict[str, np.ndarray]:
    """A tiny LLaMA checkpoint with Hugging Face tensor names, from our seeded random layers."""
    d = tiny_dims(kv_heads)
    tensors: dict[str, np.ndarray] = {}
    for i in range(layers):
        w = random_layer(d, i, seed=9, logit_std=2.0)
        for key, name in HF_NAMES.items():
            arr = w.mats[key].T if key in w.mats else w.norms[key]
            tensors[f"model.layers.{i}.{name}"] = np.ascontiguousarray(arr)
    tensors["model.embed_tokens.weight"] = np.random.default_rng(1).standard_normal((d.vocab, d.hidden)) * 0.02
    save_safetensors(path, tensors, dtype)
    return tensors


@pytest.mark.parametrize("dtype", ["F16", "BF16", "F32"])
def test_round_trip(tmp_path: Path, dtype: str) -> None:
    path = tmp_path / "model.safetensors"
    tensors = hf_checkpoint(path, layers=2, dtype=dtype)
    f = SafetensorsFile(path)
    assert set(f.tensors) == set(tensors)
    d = tiny_dims(2)
    w = checkpoint_layer(f, d, 1, dtype="fp32")
    original = random_layer(d, 1, seed=9, logit_std=2.0)  # fp16 values: exact in F16 and F32
    tol = 0 if dtype != "BF16" else 2**-8
    for key in ("q", "k", "down"):
        assert np.allclose(w.mats[key], original.mats[key], rtol=tol, atol=0)
    rows = f.read("model.embed_tokens.weight", rows=np.array([3, 0]))
    assert rows.shape == (2, d.hidden)


def test_agrees_with_the_safetensors_package(tmp_path: Path) -> None:
    st = pytest.importorskip("safetensors.numpy")
    arrays = {"a": np.arange(12, dtype=np.float16).reshape(3, 4), "b": np.float32([[1.5, -2.0]])}
    st.save_file(arrays, str(tmp_path / "theirs.safetensors"))
    ours = SafetensorsFile(tmp_path / "theirs.safetensors")
    assert np.array_equal(ours.read("a"), arrays["a"].astype(np.float32))
    assert np.array_equal(ours.read("b"), arrays["b"])
    save_safetensors(tmp_path / "ours.safetensors", {k: v.astype(np.float32) for k, v in arrays.items()}, "F32")
    back = st.load_file(str(tmp_path / "ours.safetensors"))
    assert np.array_equal(back["a"], arrays["a"].astype(np.float32))


def _raw(path: Path, header: object, data: bytes = b"") -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def test_bad_files_name_the_file_and_tensor(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope\.safetensors: no such file"):
        SafetensorsFile(tmp_path / "nope.safetensors")
    (tmp_path / "short").write_bytes(b"abc")
    with pytest.raises(InputError, match="short: not a safetensors file"):
        SafetensorsFile(tmp_path / "short")
    (tmp_path / "huge").write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(InputError, match="header length"):
        SafetensorsFile(tmp_path / "huge")
    bad_json = tmp_path / "json"
    bad_json.write_bytes(struct.pack("<Q", 3) + b"{x}")
    with pytest.raises(InputError, match="header is not JSON"):
        SafetensorsFile(bad_json)
    trunc = _raw(tmp_path / "trunc", {"w": {"dtype": "F16", "shape": [4, 4], "data_offsets": [0, 32]}}, b"\0" * 8)
    with pytest.raises(InputError, match=r"tensor 'w'.*truncated"):
        SafetensorsFile(trunc)
    i8 = _raw(tmp_path / "i8", {"w": {"dtype": "I8", "shape": [1], "data_offsets": [0, 1]}}, b"\0")
    with pytest.raises(InputError, match="tensor 'w': dtype I8 not supported"):
        SafetensorsFile(i8)


def test_missing_tensor_and_wrong_shape(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    hf_checkpoint(path, layers=1)
    f = SafetensorsFile(path)
    with pytest.raises(
        InputError, match=r"m\.safetensors: tensor 'model\.layers\.1\.self_attn\.q_proj\.weight' is missing"
    ):
        checkpoint_layer(f, tiny_dims(2), 1)
    with pytest.raises(
        InputError,
        match=r"'model\.layers\.0\.self_attn\.k_proj\.weight' has shape \[32, 64\], the model config needs \[64, 64\]",
    ):
        checkpoint_layer(f, tiny_dims(4), 0)
