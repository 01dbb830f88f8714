"""Load a run config from YAML with `--set key.path=value` overrides; every problem becomes one clear line."""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from atbprof.config.models import KV_REUSE_WITH_PAGED_ATTENTION, LENGTH_NAMES, RunConfig
from atbprof.errors import ConfigError, InputError
from atbprof.suggest import did_you_mean
from atbprof.yamlio import Lines, YamlDoc, YamlSyntaxError, parse_yaml, read_yaml

# seed 002's atb_fusion_config.yaml flags -> atbprof fusion rules (see atbprof/data/fusion_rules.yaml)
ATB_FLAG_RULES: dict[str, tuple[str, ...]] = {
    "qkv_fusion": ("qkv_merge", "rope", "flash_attention"),
    "ffn_fusion": ("gate_up_merge", "swiglu", "ffn"),
    "rmsnorm_fusion": ("norm_matmul",),
    "attention_softmax_fusion": ("attention_softmax",),
    "residual_fusion": ("add_norm",),
}
ATB_ALWAYS = ("norm_kernel",)  # ATB never runs a decomposed norm chain


def _read_yaml(path: Path, hint: str = "pass an existing YAML file to --config") -> YamlDoc:
    """The YAML document at `path` (a fresh copy: callers change it), parsed once per file version: a sweep loads
    its base config for every point."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file; {hint}") from None
    except OSError:
        return read_yaml(path)  # its own message
    except ValueError:  # a NUL byte in the name
        raise ConfigError(f"{str(path)!r}: not a file name (it holds a NUL byte); {hint}") from None
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size, st.st_ino)
    doc = _PARSED.get(key)
    if doc is None:
        doc = read_yaml(path)
        if len(_PARSED) >= 64:
            _PARSED.clear()
        _PARSED[key] = doc
    return YamlDoc(copy.deepcopy(doc.data), doc.lines)


_PARSED: dict[tuple[object, ...], YamlDoc] = {}


def parse_overrides(items: list[str]) -> list[tuple[tuple[str, ...], Any]]:
    """`workload.batch_size=32` -> (("workload", "batch_size"), 32); values are parsed as YAML scalars."""
    parsed = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY.PATH=VALUE, e.g. --set workload.batch_size=32")
        try:
            value = copy.deepcopy(_override_value(raw, item)) if raw.strip() else ""
        except YamlSyntaxError:
            value = raw  # not YAML: the text as it is (bounds and duplicate keys still refuse)
        parsed.append((tuple(key.strip().split(".")), value))
    return parsed


@lru_cache(maxsize=4096)
def _override_value(raw: str, item: str) -> Any:
    """A --set value parsed as YAML (remembered: a sweep parses the same values for many points; callers copy)."""
    return parse_yaml(raw, f"--set {item}").data


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
    """Paths in a config are relative to the config file when that file exists there, else to the CWD; stored
    absolute and resolved (no `..`, no symbolic link), so run.json is the same from any directory."""
    if value is None:
        return None
    if "\x00" in value:
        return value  # not a file name: the config's own check names it (no such file)
    candidate = base / value
    path = candidate if not Path(value).is_absolute() and candidate.exists() else Path(value)
    return str(path.resolve()) if path.exists() else value  # a missing file keeps its name for the message


def translate_atb_fusion_config(
    doc: dict[str, Any],
    where: str,
    lines: dict[tuple[str, ...], int] | None = None,
    prefix: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Seed 002's atb_fusion_config.yaml (model_type, fusion_strategy, performance, memory) -> fusion section.

    `where` names the file in messages; `lines` maps its key paths (below `prefix`) to YAML lines.
    """
    lines = lines or {}

    def problem(path: tuple[str, ...], text: str) -> str:
        full = (*prefix, *path)
        line = next((lines[full[:n]] for n in range(len(full), 0, -1) if full[:n] in lines), None)
        return f"{where} line {line}: {'.'.join(full)}{text}" if line else f"{where}: {'.'.join(full)}{text}"

    known = {"model_type", "fusion_strategy", "performance", "memory"}
    unknown = sorted(set(doc) - known, key=str)
    problems = [
        problem((str(k),), f": unknown key in an ATB fusion config (allowed: {', '.join(sorted(known))})")
        for k in unknown
    ]
    sections: dict[str, dict[str, Any]] = {}
    for name in ("fusion_strategy", "performance", "memory"):
        value = doc.get(name) or {}
        if not isinstance(value, dict):
            problems.append(problem((name,), f" = {value!r}: expected a mapping of keys to values"))
            value = {}
        sections[name] = value
    flags, performance, memory = sections["fusion_strategy"], sections["performance"], sections["memory"]
    enable: list[str] = list(ATB_ALWAYS)
    for flag, value in flags.items():
        if flag not in ATB_FLAG_RULES:
            allowed = ", ".join(ATB_FLAG_RULES)
            problems.append(problem(("fusion_strategy", str(flag)), f": unknown flag (allowed: {allowed})"))
        elif not isinstance(value, bool):
            problems.append(problem(("fusion_strategy", flag), f" = {value!r}: expected true or false"))
        elif value:
            enable.extend(ATB_FLAG_RULES[flag])
    for key in ("enable_kv_cache_reuse", "enable_activation_checkpoint", "paged_attention"):
        if key in memory and not isinstance(memory[key], bool):
            problems.append(problem(("memory", key), f" = {memory[key]!r}: expected true or false"))
    if memory.get("enable_kv_cache_reuse") is True and memory.get("paged_attention") is True:
        pitfall = f" = true: {KV_REUSE_WITH_PAGED_ATTENTION}"
        problems.append(problem(("memory", "enable_kv_cache_reuse"), pitfall))
    if problems:
        raise ConfigError(problems)
    out: dict[str, Any] = {
        "strategy": "none",
        "enable": enable,
        "source_format": "atb_fusion_config",
    }
    if "softmax_fusion_max_seq" in performance:
        out["softmax_fusion_max_seq"] = performance["softmax_fusion_max_seq"]
    if "shape_buckets" in performance:
        out["shape_buckets"] = performance["shape_buckets"]
    return out


_NO_EFFECT = {
    ("fusion", "paged_attention"): "not a setting of the simulator (paged attention changes no kernel it prices); "
    "remove it. In an ATB fusion config (`fusion: atb_fusion_config.yaml`) memory.paged_attention is read for "
    "seed 002's KV-cache-reuse pitfall",
    ("fusion", "kv_cache_reuse"): "not a setting of the simulator (it changes no kernel it prices); remove it. In an "
    "ATB fusion config memory.enable_kv_cache_reuse is read for seed 002's paged-attention pitfall",
}
"""Keys a reader may expect from ATB's vocabulary that the simulator has no use for: said so, not 'unknown'."""


def _section_keys(path: tuple[str, ...]) -> list[str]:
    """The keys the config section at `path` allows (for 'did you mean')."""
    model: Any = RunConfig
    for part in path:
        field = getattr(model, "model_fields", {}).get(part)
        sub = getattr(field, "annotation", None)
        if sub is None or not hasattr(sub, "model_fields"):
            return []
        model = sub
    return list(getattr(model, "model_fields", {}))


_EXPECTED = {
    "int_type": "expected a whole number (e.g. 32)",
    "float_type": "expected a number (e.g. 1.5)",
    "bool_type": "expected true or false",
    "string_type": "expected text",
    "finite_number": "expected a finite number (not .inf or .nan)",
    "tuple_type": "expected a list, e.g. [a, b]",
}


def _format_error(
    err: Mapping[str, Any],
    lines: dict[tuple[str, ...], int],
    source: str,
    overridden: dict[tuple[str, ...], str] | None = None,
) -> str:
    """One line: file, YAML line (or the --set that produced the value), key, bad value, what is allowed."""
    loc = tuple(str(p) for p in err["loc"])
    key = ".".join(loc) or "(top level)"
    prefixes = [loc[:n] for n in range(len(loc), 0, -1)]
    overridden = overridden or {}
    item = next((overridden[p] for p in prefixes if p in overridden), None)
    if item is None and loc:  # a --set below the bad key (`--set executon.mode=graph`) made it
        item = next((v for k, v in overridden.items() if k[: len(loc)] == loc), None)
    line = next((lines[p] for p in prefixes if p in lines), None)
    where = f"{source}, --set {item}: " if item else f"{source} line {line}: " if line else f"{source}: "
    kind = err["type"]
    msg = err["msg"].removeprefix("Value error, ")
    if kind == "extra_forbidden":
        if loc in _NO_EFFECT:
            return f"{where}{key}: {_NO_EFFECT[loc]}"
        hint = did_you_mean(loc[-1], _section_keys(loc[:-1])) if loc else ""
        return f"{where}{key}: unknown key{hint}; remove it or check the spelling"
    if kind == "missing":
        if loc == ("model",):
            return (
                f"{where}model: required section is missing; add e.g. `model: {{preset: llama2-7b}}` "
                "or `model: {hf_config: path/to/config.json}`"
            )
        return f"{where}{key}: required key is missing"
    if kind in ("model_type", "dict_type"):
        msg = "expected a section (a mapping of keys to values)"
    if kind in _EXPECTED:
        msg = _EXPECTED[kind]
    value = err.get("input")
    shown = "" if isinstance(value, dict) else f" = {value!r}"
    return f"{where}{key}{shown}: {msg}"


def _recorded_config(path: Path) -> tuple[dict[str, Any], Path] | None:
    """The config a run recorded (a run directory, or its run.json), to run exactly that run again."""
    run_json = path / "run.json" if path.is_dir() else path
    if path.is_dir() and not run_json.is_file():
        raise ConfigError(f"{path} is a directory without run.json; pass a config YAML or a run directory")
    if run_json.name != "run.json":
        return None
    import orjson

    from atbprof.importers.ours import RUN_JSON_MAX_BYTES
    from atbprof.inputs import read_bytes

    try:
        doc = orjson.loads(read_bytes(run_json, RUN_JSON_MAX_BYTES))
    except (orjson.JSONDecodeError, InputError) as err:
        raise ConfigError(f"{run_json}: not a run.json written by `atbprof run` ({err})") from None
    if not isinstance(doc, dict) or "atbprof_version" not in doc or not isinstance(doc.get("config"), dict):
        raise ConfigError(f"{run_json}: not a run.json written by `atbprof run` (no atbprof_version / config)")
    return doc["config"], run_json


def load_config(path: str | Path, overrides: list[str] | None = None) -> RunConfig:
    """A run config from a YAML file, or the config a run recorded (its directory or run.json), plus overrides."""
    path = Path(path)
    recorded = _recorded_config(path)
    if recorded is not None:
        data, source = recorded
        return _validate(data, {}, str(source), overrides, source.parent)
    doc = _read_yaml(path)
    data = doc.data
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping with sections model, device, workload, ...")
    if "fusion_strategy" in data and "model" not in data:
        raise ConfigError(
            f"{path} is an ATB fusion-strategy file (seed 002's atb_fusion_config.yaml), not a run config: "
            f"reference it from a run config as `fusion: {path.name}` (see fixtures/llama2-7b-atb-graph.yaml)"
        )
    return _validate(data, doc.lines, str(path), overrides, path.parent, path)


_NAME_MAX = 96
"""Characters of a run name made from its config's name and overrides (longer: cut, with a digest of the rest)."""


def _name_with_overrides(name: str, overridden: dict[tuple[str, ...], str]) -> str:
    """The config's name plus what the overrides changed (`seed000-baseline-batch_size-32`), so a run made with
    `--set` or `--fusion` does not default to the same directory as the plain one. Output and numerics settings
    change no figure and are left out; the name is a plain file name (no spaces or shell characters)."""
    parts = []
    for key, item in overridden.items():
        if key[0] in ("output", "numerics"):
            continue
        value = item.partition("=")[2].strip().strip("'\"")
        parts.append(f"{key[-1]}-{value}")
    if not parts:
        return name
    full = re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join([name, *parts])).strip("-_")
    if len(full) <= _NAME_MAX:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    return f"{full[: _NAME_MAX - 9].rstrip('-')}-{digest}"


def _validate(
    data: dict[str, Any],
    lines: Lines,
    source: str,
    overrides: list[str] | None,
    base: Path,
    path: Path | None = None,
) -> RunConfig:
    """Overrides applied, shorthands expanded, paths resolved, then the models; every problem one line."""
    overridden: dict[tuple[str, ...], str] = {}
    for item, (key, value) in zip(overrides or [], parse_overrides(overrides or []), strict=True):
        _apply(data, key, value)
        overridden[key] = item
    for section in ("model", "device", "fusion"):
        if isinstance(data.get(section), str):
            raw = data[section]
            if section == "fusion" and raw.endswith((".yaml", ".yml")):
                fpath = Path(_resolve(base, raw) or raw)
                named = f"`fusion: {raw}` in {source}"
                if ("fusion",) in overridden:
                    named = f"--set {overridden[('fusion',)]}"
                atb = _read_yaml(fpath, f"{named} names an ATB fusion config that is not there")
                if not isinstance(atb.data, dict):
                    raise ConfigError(f"{fpath}: expected an ATB fusion config (fusion_strategy, memory)")
                data[section] = translate_atb_fusion_config(atb.data, str(fpath), atb.lines)
            else:
                data[section] = _expand_shorthand(section, raw)
    fusion = data.get("fusion")
    if isinstance(fusion, dict) and "fusion_strategy" in fusion:
        data["fusion"] = translate_atb_fusion_config(fusion, source, lines, ("fusion",))
    if path is not None:
        data.setdefault("name", re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).lstrip(".") or "run")
    if isinstance(data.get("name"), str) and ("name",) not in overridden:
        data["name"] = _name_with_overrides(data["name"], overridden)
    model = data.get("model")
    if isinstance(model, dict) and isinstance(model.get("hf_config"), str):
        model["hf_config"] = _resolve(base, model["hf_config"])
    device = data.get("device")
    if isinstance(device, dict) and isinstance(device.get("spec"), str):
        device["spec"] = _resolve(base, device["spec"])
        device.setdefault("preset", None)
    if isinstance(data.get("fusion"), dict) and isinstance(data["fusion"].get("rules_file"), str):
        data["fusion"]["rules_file"] = _resolve(base, data["fusion"]["rules_file"])
    workload = data.get("workload")
    lengths = workload.get("lengths") if isinstance(workload, dict) else None
    if isinstance(lengths, str) and lengths not in LENGTH_NAMES:  # a lengths file, as the other files of a config
        workload["lengths"] = _resolve(base, lengths)  # type: ignore[index]
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        errors = err.errors()
        problems = [_format_error(e, lines, source, overridden) for e in errors]
        kinds = [str(e["type"]) for e in errors]
        locs = [".".join(str(p) for p in e["loc"]) for e in errors]
        raise ConfigError(problems, kinds=kinds, locs=locs) from None
