"""Load a run config from YAML with `--set key.path=value` overrides; every problem becomes one clear line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from atbprof.config.models import RunConfig
from atbprof.errors import ConfigError

# seed 002's atb_fusion_config.yaml flags -> atbprof fusion rules (see atbprof/data/fusion_rules.yaml)
ATB_FLAG_RULES: dict[str, tuple[str, ...]] = {
    "qkv_fusion": ("qkv_merge", "rope", "flash_attention"),
    "ffn_fusion": ("gate_up_merge", "swiglu", "ffn"),
    "rmsnorm_fusion": ("norm_matmul",),
    "attention_softmax_fusion": ("attention_softmax",),
    "residual_fusion": ("add_norm",),
}
ATB_ALWAYS = ("norm_kernel",)  # ATB never runs a decomposed norm chain


def _yaml_lines(text: str) -> dict[tuple[str, ...], int]:
    """Map each key path of a YAML mapping to its 1-based line, for messages."""
    lines: dict[tuple[str, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = (*path, str(key.value))
                lines[sub] = key.start_mark.line + 1
                walk(value, sub)

    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return lines
    if root is not None:
        walk(root, ())
    return lines


def _read_yaml(path: Path) -> tuple[Any, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file; pass an existing YAML file to --config") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read ({err.strerror})") from None
    try:
        return yaml.safe_load(text), text
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise ConfigError(f"{path}{where}: not valid YAML ({problem})") from None


def parse_overrides(items: list[str]) -> list[tuple[tuple[str, ...], Any]]:
    """`workload.batch_size=32` -> (("workload", "batch_size"), 32); values are parsed as YAML scalars."""
    parsed = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY.PATH=VALUE, e.g. --set workload.batch_size=32")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        parsed.append((tuple(key.strip().split(".")), value))
    return parsed


def _apply(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = data
    for part in path[:-1]:
        child = node.get(part)
        if isinstance(child, str) and part in ("model", "device", "fusion"):
            child = _expand_shorthand(part, child)
        if not isinstance(child, dict):
            child = {}
        node[part] = child
        node = child
    node[path[-1]] = value


def _expand_shorthand(section: str, value: str) -> dict[str, Any]:
    if section == "model":
        return {"preset": value}
    if section == "device":
        return {"preset": value} if not value.endswith((".yaml", ".yml")) else {"preset": None, "spec": value}
    return {"strategy": value}


def _resolve(base: Path, value: str | None) -> str | None:
    """Paths in a config are relative to the config file when that file exists there, else to the CWD."""
    if value is None:
        return None
    candidate = base / value
    return str(candidate) if not Path(value).is_absolute() and candidate.exists() else value


def translate_atb_fusion_config(doc: dict[str, Any], where: str) -> dict[str, Any]:
    """Seed 002's atb_fusion_config.yaml (model_type, fusion_strategy, performance, memory) -> fusion section."""
    known = {"model_type", "fusion_strategy", "performance", "memory"}
    unknown = sorted(set(doc) - known)
    problems = [f"{where}.{k}: unknown key in an ATB fusion config (allowed: {', '.join(sorted(known))})" for k in unknown]
    flags = doc.get("fusion_strategy") or {}
    if not isinstance(flags, dict):
        problems.append(f"{where}.fusion_strategy: expected a mapping of flags to true/false")
        flags = {}
    enable: list[str] = list(ATB_ALWAYS)
    for flag, value in flags.items():
        if flag not in ATB_FLAG_RULES:
            problems.append(
                f"{where}.fusion_strategy.{flag}: unknown flag (allowed: {', '.join(ATB_FLAG_RULES)})"
            )
        elif not isinstance(value, bool):
            problems.append(f"{where}.fusion_strategy.{flag}: {value!r} is not true/false")
        elif value:
            enable.extend(ATB_FLAG_RULES[flag])
    memory = doc.get("memory") or {}
    performance = doc.get("performance") or {}
    if problems:
        raise ConfigError(problems)
    out: dict[str, Any] = {
        "strategy": "none",
        "enable": enable,
        "source_format": "atb_fusion_config",
        "kv_cache_reuse": bool(memory.get("enable_kv_cache_reuse", False)),
        "paged_attention": bool(memory.get("paged_attention", False)),
    }
    if "softmax_fusion_max_seq" in performance:
        out["softmax_fusion_max_seq"] = performance["softmax_fusion_max_seq"]
    if "shape_buckets" in performance:
        out["shape_buckets"] = performance["shape_buckets"]
    return out


def _format_error(err: dict[str, Any], lines: dict[tuple[str, ...], int], source: str) -> str:
    loc = tuple(str(p) for p in err["loc"])
    key = ".".join(loc) or "(top level)"
    line = None
    for n in range(len(loc), 0, -1):
        if loc[:n] in lines:
            line = lines[loc[:n]]
            break
    where = f"{source} line {line}: " if line else f"{source}: "
    kind = err["type"]
    msg = err["msg"].removeprefix("Value error, ")
    if kind == "extra_forbidden":
        return f"{where}{key}: unknown key; remove it or check the spelling"
    if kind == "missing":
        return f"{where}{key}: required key is missing"
    value = err.get("input")
    shown = "" if isinstance(value, dict) else f" = {value!r}"
    return f"{where}{key}{shown}: {msg}"


def load_config(path: str | Path, overrides: list[str] | None = None) -> RunConfig:
    path = Path(path)
    data, text = _read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping with sections model, device, workload, ...")
    if "fusion_strategy" in data and "model" not in data:
        raise ConfigError(
            f"{path} is an ATB fusion-strategy file (seed 002's atb_fusion_config.yaml), not a run config: "
            f"reference it from a run config as `fusion: {path.name}` (see fixtures/llama2-7b-atb-graph.yaml)"
        )
    lines = _yaml_lines(text)
    base = path.parent
    for key, value in parse_overrides(overrides or []):
        _apply(data, key, value)
    for section in ("model", "device", "fusion"):
        if isinstance(data.get(section), str):
            raw = data[section]
            if section == "fusion" and raw.endswith((".yaml", ".yml")):
                fpath = Path(_resolve(base, raw) or raw)
                doc, _ = _read_yaml(fpath)
                if not isinstance(doc, dict):
                    raise ConfigError(f"{fpath}: expected a fusion config mapping")
                data[section] = translate_atb_fusion_config(doc, str(fpath))
            else:
                data[section] = _expand_shorthand(section, raw)
    fusion = data.get("fusion")
    if isinstance(fusion, dict) and "fusion_strategy" in fusion:
        data["fusion"] = translate_atb_fusion_config(fusion, "fusion")
    data.setdefault("name", path.stem)
    model = data.get("model")
    if isinstance(model, dict) and isinstance(model.get("hf_config"), str):
        model["hf_config"] = _resolve(base, model["hf_config"])
    device = data.get("device")
    if isinstance(device, dict) and isinstance(device.get("spec"), str):
        device["spec"] = _resolve(base, device["spec"])
        device.setdefault("preset", None)
    if isinstance(data.get("fusion"), dict) and isinstance(data["fusion"].get("rules_file"), str):
        data["fusion"]["rules_file"] = _resolve(base, data["fusion"]["rules_file"])
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError([_format_error(e, lines, str(path)) for e in err.errors()]) from None
