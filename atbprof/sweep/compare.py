"""The gain a sweep compares (pure: the sweep table in, rows out): per point of the other swept keys, `figure`
at the compared axis's base value against its new value, and the published claims beside the model's figure."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from atbprof.sweep.spec import Compare, Reference, SweepSpec


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GainRow(_M):
    at: dict[str, Any] = Field(description="the other swept keys' values")
    base: float | None = Field(description="the figure at the base value (null: that point has no figures)")
    new: float | None
    gain_pct: float | None = Field(description="(base - new) / base x 100: what the change saves")


class ClaimCheck(_M):
    label: str
    at: dict[str, Any]
    claimed_pct: tuple[float, float] = Field(description="the claim as a range (a single figure: lo = hi)")
    model_pct: float | None = Field(description="the model's gain there (null: no such point, or it has no figures)")
    difference_pct: float | None = Field(description="model - the nearest end of the claim (0 within it)")


def _canon(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def gains(spec: SweepSpec, table: pa.Table) -> list[GainRow]:
    """One row per combination of the other swept keys that has the compared axis at its base or new value."""
    c = spec.compare
    if c is None:
        return []
    others = [k for k in spec.swept_keys() if k != c.axis]
    rows: dict[bytes, dict[str, Any]] = {}
    figure = table.column(c.figure).to_pylist() if c.figure in table.column_names else [None] * table.num_rows
    for i, point in enumerate(table.column("point").to_pylist()):
        p = spec.points[point]
        if c.axis not in p:
            continue
        side = "base" if _canon(p[c.axis]) == _canon(c.base) else "new" if _canon(p[c.axis]) == _canon(c.new) else ""
        if not side:
            continue
        at = {k: p.get(k) for k in others}
        row = rows.setdefault(_canon(at), {"at": at, "base": None, "new": None})
        row[side] = figure[i]
    out = []
    for row in rows.values():
        b, n = row["base"], row["new"]
        gain = round((b - n) / b * 100, 3) if b and n is not None else None
        out.append(GainRow(at=row["at"], base=b, new=n, gain_pct=gain))
    return out


def claims(spec: SweepSpec, rows: list[GainRow]) -> list[ClaimCheck]:
    """Each reference claim beside the model's gain at the point it is about."""
    out = []
    for ref in spec.reference:
        lo, hi = _range(ref)
        match = [r for r in rows if all(_canon(r.at.get(k)) == _canon(v) for k, v in ref.at.items())]
        model = match[0].gain_pct if len(match) == 1 else None
        diff = None if model is None else round(model - lo if model < lo else model - hi if model > hi else 0.0, 3)
        out.append(ClaimCheck(label=ref.label, at=ref.at, claimed_pct=(lo, hi), model_pct=model, difference_pct=diff))
    return out


def _range(ref: Reference) -> tuple[float, float]:
    g = ref.gain_pct
    return (float(g[0]), float(g[1])) if isinstance(g, tuple) else (float(g), float(g))


__all__ = ["ClaimCheck", "Compare", "GainRow", "claims", "gains"]
