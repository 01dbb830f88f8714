"""Model presets (Hugging Face config.json files): their one home, read by the config checks and the graph."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

PRESETS = ("llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "qwen3-8b", "mixtral-8x7b")


def preset_config(name: str) -> dict[str, Any]:
    """The config.json of preset `name` (one of PRESETS)."""
    data: dict[str, Any] = json.loads(resources.files(__name__).joinpath(f"{name}.json").read_text(encoding="utf-8"))
    return data
