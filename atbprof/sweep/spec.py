"""What a sweep runs: a base config, fixed overrides, and its points (a grid's cartesian product, zipped axes that
vary together, and explicit points), from `--grid KEY=V1,V2` options and/or a sweep YAML.

Every point is a list of `--set` style overrides of the base config, so any config key a run takes can be swept.
Everything is bounded and checked before a point runs: an unknown key, an empty axis, a value of the wrong type
for its key is one message naming the key and value (exit 2). A value the base config takes on its own but that
clashes with another axis (tp 8 of a model with 14 heads) is the point's own failure, recorded in its row.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Annotated, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from atbprof.config.loader import load_config, parse_overrides
from atbprof.config.models import RunConfig
from atbprof.errors import ConfigError, UsageError
from atbprof.yamlio import MAX_SPEC_YAML_BYTES, YamlSyntaxError, parse_yaml, read_yaml

MAX_POINTS = 100_000
MAX_AXES = 16
MAX_VALUES = 10_000
MAX_REFERENCES = 100
CLASH_ERRORS = ("value_error", "assertion_error")
"""Pydantic error types of validators: about another key than the swept one (or the config as a whole), the value
clashes with another setting and fails only some points; about the swept key itself, or of any other type (unknown
key, wrong type, out of range), it is wrong for every point."""


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Compare(_M):
    """The gain a sweep is about: per point of the other axes, `figure` at `base` vs at `new` of `axis`."""

    axis: str = Field(description="a swept key, e.g. fusion")
    base: Any
    new: Any
    figure: str = Field(default="decode_ms_per_token", description="a sweep.parquet column; lower is better")


GainPct = Annotated[float, Field(ge=-1000, le=100, allow_inf_nan=False)]
"""A gain in % of the base figure: at most 100 (all of it saved); a slowdown is negative."""


class Reference(_M):
    """A published claim drawn beside the sweep's figures (seed 000: '~15 % at batch 1, prompt 512')."""

    label: str = Field(max_length=200)
    at: dict[str, Any] = Field(description="the swept keys and values the claim is about")
    gain_pct: GainPct | tuple[GainPct, GainPct] = Field(description="the claimed gain, or its range (low, high)")

    @model_validator(mode="after")
    def _range(self) -> Reference:
        if isinstance(self.gain_pct, tuple) and self.gain_pct[0] > self.gain_pct[1]:
            raise ValueError(f"gain_pct {list(self.gain_pct)}: a range is [low, high]; write it low first")
        return self


class SweepFile(_M):
    """A sweep YAML (fixtures/sweeps/seed000.yaml)."""

    name: str | None = Field(default=None, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    base: str | None = Field(default=None, description="the base config, relative to this file")
    set: dict[str, Any] = Field(default_factory=dict, description="overrides of every point")
    grid: dict[str, list[Any]] = Field(default_factory=dict, description="axes crossed with each other")
    zip: list[dict[str, list[Any]]] = Field(
        default_factory=list, description="groups of axes whose values go together (equal lengths)"
    )
    points: list[dict[str, Any]] = Field(default_factory=list, description="explicit points, after the product")
    compare: Compare | None = None
    reference: list[Reference] = Field(default_factory=list, max_length=MAX_REFERENCES)


class Axis(_M):
    key: str
    values: list[Any]


class SweepSpec(_M):
    """A sweep as it runs: the base, every point's overrides, and what its plots compare."""

    name: str
    base: str = Field(description="the base config's path")
    base_config: dict[str, Any] = Field(description="the base config with the fixed overrides, as a run records it")
    fixed: list[str] = Field(description="overrides of every point (KEY=VALUE)")
    axes: list[Axis]
    points: list[dict[str, Any]] = Field(description="per point: swept key -> value")
    compare: Compare | None
    reference: list[Reference]

    def overrides(self, i: int) -> list[str]:
        """Point `i`'s overrides of the base config (the fixed ones first)."""
        return [*self.fixed, *(override(k, v) for k, v in self.points[i].items())]

    def swept_keys(self) -> list[str]:
        return [a.key for a in self.axes]

    def digest(self) -> str:
        """What identifies the work of the sweep (resuming is only into a sweep of the same digest)."""
        doc = {"base": self.base_config, "fixed": self.fixed, "points": self.points}
        return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()


def override(key: str, value: Any) -> str:
    """KEY=VALUE as `--set` parses it back to `value` (a string that would read as another type is quoted)."""
    if isinstance(value, str):
        try:
            same = parse_yaml(value, "value").data == value if value.strip() else False
        except YamlSyntaxError:
            same = False
        return f"{key}={value}" if same else f"{key}={_yaml_quoted(value)}"
    if isinstance(value, float):
        return f"{key}={_yaml_float(value)}"
    return f"{key}={orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()}"


def _yaml_float(x: float) -> str:
    """A float as YAML 1.1 reads it back as one: a dot in the mantissa and a signed exponent (`1.0e-09`)."""
    text = repr(x)
    mantissa, e, exponent = text.partition("e")
    if "." not in mantissa and mantissa.lstrip("-").isdigit():
        mantissa += ".0"
    if e and exponent[:1] not in "+-":
        exponent = "+" + exponent
    return mantissa + (f"e{exponent}" if e else "")


def _yaml_quoted(text: str) -> str:
    """`text` as a YAML double-quoted scalar: JSON's escapes, and the characters YAML does not allow in a stream
    (DEL, C1 controls, U+FFFE/FFFF) as \\u escapes."""
    out = json.dumps(text, ensure_ascii=False)
    return "".join(
        f"\\u{ord(c):04x}" if (0x7F <= ord(c) <= 0x9F and ord(c) != 0x85) or ord(c) in (0xFFFE, 0xFFFF) else c
        for c in out
    )


def split_values(text: str) -> list[str]:
    """`1,4,8` -> ['1', '4', '8']; commas inside [] {} or quotes stay (`[20,12],[16,16]`)."""
    out: list[str] = []
    cur: list[str] = []
    depth, quote = 0, ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur).strip())
    return out


def parse_grid(items: list[str]) -> dict[str, list[Any]]:
    """`--grid KEY=V1,V2,...` options -> key -> values (parsed as YAML scalars, as `--set` parses a value)."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--grid {item!r}: expected KEY=V1,V2,..., e.g. --grid workload.batch_size=1,8,32")
        if key in grid:
            raise UsageError(f"--grid {key}: given twice; list all its values in one --grid {key}=...")
        texts = split_values(raw)
        if not raw.strip() or any(t == "" for t in texts):
            raise UsageError(f"--grid {item!r}: an empty value; list values separated by commas, e.g. {key}=1,8,32")
        grid[key] = [v for (_, v) in parse_overrides([f"{key}={t}" for t in texts])]
    return grid


def load_sweep_file(path: Path) -> SweepFile:
    doc = read_yaml(path, max_bytes=MAX_SPEC_YAML_BYTES)
    if not isinstance(doc.data, dict):
        raise ConfigError(f"{path}: a sweep file is a mapping with base, set, grid, zip, points, compare, reference")
    try:
        return SweepFile.model_validate(doc.data)
    except ValidationError as err:
        problems = []
        for e in err.errors():
            loc = tuple(str(p) for p in e["loc"])
            line = next((doc.lines[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in doc.lines), None)
            where = f"{path} line {line}" if line else str(path)
            problems.append(f"{where}: {'.'.join(loc) or '(top level)'}: {e['msg']}")
        raise ConfigError(problems) from None


def _check_axes(grid: dict[str, list[Any]], zipped: list[dict[str, list[Any]]], where: str) -> list[Axis]:
    axes: list[Axis] = []
    seen: set[str] = set()
    for source, group in [("grid", grid), *((f"zip[{i}]", g) for i, g in enumerate(zipped))]:
        lengths = {len(v) for v in group.values()}
        if source.startswith("zip") and len(lengths) > 1:
            shown = ", ".join(f"{k} has {len(v)}" for k, v in group.items())
            raise UsageError(f"{where} {source}: zipped axes need as many values each ({shown})")
        for key, values in group.items():
            if key in seen:
                raise UsageError(f"{where}: {key} is swept twice; give it in one place (grid, zip or --grid)")
            seen.add(key)
            if not isinstance(values, list) or not values:
                raise UsageError(f"{where} {source}: {key} has no values; list at least one, e.g. {key}: [1, 8]")
            if len(values) > MAX_VALUES:
                raise UsageError(f"{where} {source}: {key} has {len(values):,} values; at most {MAX_VALUES:,}")
            axes.append(Axis(key=key, values=list(values)))
    if len(axes) > MAX_AXES:
        raise UsageError(f"{where}: {len(axes)} swept keys; at most {MAX_AXES}")
    return axes


def _points(
    grid: dict[str, list[Any]], zipped: list[dict[str, list[Any]]], explicit: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    factors: list[list[dict[str, Any]]] = [[{k: v} for v in values] for k, values in grid.items()]
    factors += [[dict(zip(g, row, strict=True)) for row in zip(*g.values(), strict=True)] for g in zipped if g]
    total = 1 if factors else 0  # no swept key: only the explicit points
    for f in factors:
        total *= len(f)
    if total + len(explicit) > MAX_POINTS:
        raise UsageError(f"the sweep has {total + len(explicit):,} points; at most {MAX_POINTS:,}: sweep fewer values")
    product = [{k: v for part in combo for k, v in part.items()} for combo in itertools.product(*factors)]
    return (product if factors else []) + [dict(p) for p in explicit]


def parse_compare(text: str) -> Compare:
    """`--compare KEY=BASE,NEW` (the figure: decode_ms_per_token)."""
    key, sep, raw = text.partition("=")
    values = split_values(raw) if sep else []
    if not key.strip() or len(values) != 2 or not all(values):
        raise UsageError(f"--compare {text!r}: expected KEY=BASE,NEW, e.g. --compare fusion=none,default")
    (_, base), (_, new) = parse_overrides([f"{key.strip()}={v}" for v in values])
    return Compare(axis=key.strip(), base=base, new=new)


FUSION_KEYS = ("fusion", "fusion.strategy")
SERVING_COMPARE_FIGURE = "serving.tpot_ms.p99"
"""The figure a serving sweep compares when its compare names none."""


def _default_compare(axes: list[Axis]) -> Compare | None:
    """A fusion key swept over two values compares them (the first is the base) when no compare is given."""
    axis = next((a for a in axes if a.key in FUSION_KEYS and len(a.values) == 2), None)
    return None if axis is None else Compare(axis=axis.key, base=axis.values[0], new=axis.values[1])


def build_spec(
    config: Path | None,
    spec_file: Path | None,
    grid_options: list[str],
    set_options: list[str],
    compare: str | None = None,
    name: str | None = None,
) -> SweepSpec:
    """The sweep of a base config (`--config`, else the sweep file's `base:`), its `--grid` options and sweep file,
    every key and value checked against the base config. `compare` (`--compare KEY=BASE,NEW`) overrides the
    file's; `name` is the sweep's when the file gives none."""
    sweep = load_sweep_file(spec_file) if spec_file is not None else SweepFile()
    where = str(spec_file) if spec_file is not None else "the sweep"
    if config is None and sweep.base is None:
        raise UsageError("sweep: give the base config with --config FILE (or `base:` in the --spec file)")
    base = Path(config) if config is not None else (Path(spec_file).parent / str(sweep.base))  # type: ignore[arg-type]
    cli_grid = parse_grid(grid_options)
    both = sorted(set(cli_grid) & (set(sweep.grid) | {k for g in sweep.zip for k in g}))
    if both:
        raise UsageError(f"--grid {both[0]}: also swept in {where}; give it in one place")
    grid = {**sweep.grid, **cli_grid}
    axes = _check_axes(grid, sweep.zip, where)
    points = _points(grid, sweep.zip, sweep.points)
    if not points:
        raise UsageError(
            "sweep: no points; give axes with --grid KEY=V1,V2 (e.g. --grid workload.batch_size=1,8,32) or "
            "grid / zip / points in a --spec file"
        )
    keys = [a.key for a in axes]
    for i, p in enumerate(sweep.points):
        if not p:
            raise UsageError(f"{where} points[{i}]: an empty point; give its keys and values")
        keys += [k for k in p if k not in keys]  # keys only explicit points set
    if len(keys) > MAX_AXES:
        raise UsageError(f"{where}: {len(keys)} swept keys; at most {MAX_AXES}")
    axes = [Axis(key=k, values=_distinct(p[k] for p in points if k in p)) for k in keys]
    fixed = [override(k, v) for k, v in sweep.set.items()] + list(set_options)
    base_cfg = load_config(base, fixed)  # the base itself must be valid
    origin = {k: "--grid" for k in cli_grid}
    origin |= {k: f"{where} grid" for k in sweep.grid} | {k: f"{where} zip" for g in sweep.zip for k in g}
    origin |= {k: f"{where} points" for p in sweep.points for k in p if k not in origin}
    _check_values(base, fixed, axes, points, origin)
    seen: dict[str, int] = {}
    for i, p in enumerate(points):
        key = orjson.dumps(p, option=orjson.OPT_SORT_KEYS).decode()
        if key in seen:
            raise UsageError(f"{where}: point {i} repeats point {seen[key]} ({_shown(p)}); sweep each point once")
        seen[key] = i
    chosen = parse_compare(compare) if compare is not None else sweep.compare or _default_compare(axes)
    if chosen is not None and base_cfg.workload.kind == "serving" and "figure" not in chosen.model_fields_set:
        # a serving sweep's figure of merit: the tail of the per-token latency under load
        chosen = Compare(axis=chosen.axis, base=chosen.base, new=chosen.new, figure=SERVING_COMPARE_FIGURE)
    _check_compare(chosen, axes, "--compare" if compare is not None else where)
    _check_references(sweep.reference, axes, where)
    if sweep.reference and chosen is None:
        raise UsageError(f"{where} reference: claims are about a compared gain; add compare: {{axis, base, new}}")
    name = sweep.name or name or (Path(spec_file).stem if spec_file is not None else base_cfg.name)
    return SweepSpec(
        name=name,
        base=str(base.resolve()),
        base_config=base_cfg.model_dump(mode="json"),
        fixed=fixed,
        axes=axes,
        points=points,
        compare=chosen,
        reference=sweep.reference,
    )


def _distinct(values: Any) -> list[Any]:
    out: list[Any] = []
    keys: set[bytes] = set()
    for v in values:
        k = orjson.dumps(v, option=orjson.OPT_SORT_KEYS)
        if k not in keys:
            keys.add(k)
            out.append(v)
    return out


def _shown(point: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.items())


def _check_values(
    base: Path, fixed: list[str], axes: list[Axis], points: list[dict[str, Any]], origin: dict[str, str]
) -> None:
    """Every distinct value of every swept key, applied alone to the base: wrong for every point -> exit 2."""
    for axis in axes:
        for value in _distinct(p[axis.key] for p in points if axis.key in p):
            item = override(axis.key, value)
            try:
                load_config(base, [*fixed, item])
            except ConfigError as err:
                own = axis.key.split(".")
                if err.kinds and all(
                    k in CLASH_ERRORS and loc.split(".")[: len(own)] != own
                    for k, loc in zip(err.kinds, err.locs or [""] * len(err.kinds), strict=True)
                ):
                    continue  # clashes with the base's other settings: some points may still be fine
                first = err.problems[0] if err.problems else str(err)
                reason = first.split(f"--set {item}: ", 1)[-1]
                more = f" (and {len(err.problems) - 1} more)" if len(err.problems) > 1 else ""
                raise UsageError(f"{origin.get(axis.key, 'the sweep')} {item}: {reason}{more}") from None


def _check_compare(compare: Compare | None, axes: list[Axis], where: str) -> None:
    if compare is None:
        return
    from atbprof.sweep.figures import NUMERIC_FIGURES as numeric

    if compare.figure not in numeric:
        raise UsageError(
            f"{where} compare.figure {compare.figure}: not a figure of sweep.parquet (one of {', '.join(numeric[:6])}, "
            "..., memory.total_gb: see docs/sweeps.md)"
        )
    axis = next((a for a in axes if a.key == compare.axis), None)
    if axis is None:
        raise UsageError(f"{where} compare.axis {compare.axis}: not a swept key ({', '.join(a.key for a in axes)})")
    for side in ("base", "new"):
        if getattr(compare, side) not in axis.values:
            raise UsageError(
                f"{where} compare.{side} {getattr(compare, side)!r}: not a value of {axis.key} ({axis.values})"
            )


def _check_references(refs: list[Reference], axes: list[Axis], where: str) -> None:
    known = {a.key: a.values for a in axes}
    for i, r in enumerate(refs):
        for key, value in r.at.items():
            if key not in known:
                raise UsageError(f"{where} reference[{i}].at: {key} is not a swept key ({', '.join(known)})")
            if value not in known[key]:
                raise UsageError(f"{where} reference[{i}].at: {key}={value!r} is not one of its values")


def point_config(spec: SweepSpec, i: int) -> RunConfig:
    return load_config(Path(spec.base), spec.overrides(i))
