"""Model presets (Hugging Face config.json files): their one home, read by the config checks and the graph."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

PRESETS = (
    "llama2-7b",
    "llama2-13b",
    "llama2-70b",
    "llama3-8b",
    "llama3-70b",
    "qwen3-8b",
    "mixtral-8x7b",
    "qwen2.5-7b",
    "llama3.1-8b",
)
"""Each the config.json of its Hugging Face repository (meta-llama/Llama-2-*-hf, Meta-Llama-3-*, Qwen/Qwen3-8B,
mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen2.5-7B-Instruct, meta-llama/Llama-3.1-8B-Instruct: the last two are the models
vllm-ascend's published serving benchmarks use), the fields the graph reads."""


def preset_config(name: str) -> dict[str, Any]:
    """The config.json of preset `name` (one of PRESETS)."""
    data: dict[str, Any] = json.loads(resources.files(__name__).joinpath(f"{name}.json").read_text(encoding="utf-8"))
    return data
