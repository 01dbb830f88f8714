"""The rate a serving config sustains under its SLO (pure: the sweep table in, rows out): per point of the other
swept keys, the highest swept `workload.rate_qps` before the first one whose p99 TTFT or p99 TPOT misses the
point's `slo_ttft_ms` / `slo_tpot_ms` (vLLM-style capacity: the rate at which the tail still meets the target)."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from atbprof.sweep.spec import SweepSpec

RATE_KEY = "workload.rate_qps"


class CapacityRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    at: dict[str, Any] = Field(description="the other swept keys' values")
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    rate_qps: float | None = Field(description="the highest rate meeting the SLO (null: not even the lowest)")
    first_missing_qps: float | None = Field(description="the lowest swept rate that misses it (null: none does)")
    ttft_p99_ms: float | None = Field(description="at rate_qps")
    tpot_p99_ms: float | None = Field(description="at rate_qps")


def capacity(spec: SweepSpec, table: pa.Table) -> list[CapacityRow]:
    need = ("serving.ttft_ms.p99", "serving.tpot_ms.p99", "serving.goodput.slo_ttft_ms", "serving.goodput.slo_tpot_ms")
    if RATE_KEY not in spec.swept_keys() or any(c not in table.column_names for c in need):
        return []
    cols = {c: table.column(c).to_pylist() for c in need}
    others = [k for k in spec.swept_keys() if k != RATE_KEY]
    groups: dict[bytes, list[tuple[float, int]]] = {}
    ats: dict[bytes, dict[str, Any]] = {}
    for i, point in enumerate(table.column("point").to_pylist()):
        p = spec.points[point]
        rate = p.get(RATE_KEY)
        if not isinstance(rate, int | float) or cols["serving.ttft_ms.p99"][i] is None:
            continue
        at = {k: p.get(k) for k in others}
        key = orjson.dumps(at, option=orjson.OPT_SORT_KEYS)
        ats[key] = at
        groups.setdefault(key, []).append((float(rate), i))
    out = []
    for key, points in groups.items():
        points.sort()
        slo_ttft = cols["serving.goodput.slo_ttft_ms"][points[0][1]]
        slo_tpot = cols["serving.goodput.slo_tpot_ms"][points[0][1]]
        if slo_ttft is None and slo_tpot is None:
            continue
        best, missing = None, None
        for rate, i in points:
            ttft, tpot = cols["serving.ttft_ms.p99"][i], cols["serving.tpot_ms.p99"][i]
            ok = (slo_ttft is None or ttft <= slo_ttft) and (slo_tpot is None or tpot is None or tpot <= slo_tpot)
            if not ok:
                missing = rate
                break
            best = (rate, i)
        out.append(
            CapacityRow(
                at=ats[key],
                slo_ttft_ms=slo_ttft,
                slo_tpot_ms=slo_tpot,
                rate_qps=None if best is None else best[0],
                first_missing_qps=missing,
                ttft_p99_ms=None if best is None else cols["serving.ttft_ms.p99"][best[1]],
                tpot_p99_ms=None if best is None else cols["serving.tpot_ms.p99"][best[1]],
            )
        )
    return out
