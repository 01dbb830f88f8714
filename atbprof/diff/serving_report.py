"""The typed result of `atbprof diff` of two serving runs (diff/serving.py makes it; renderers read it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ServingDiffRow(BaseModel):
    model_config = ConfigDict(frozen=True)

    metric: str  # ttft_ms | tpot_ms | e2e_ms | queue_ms | requests_per_s | output_tokens_per_s | goodput_rps
    statistic: str  # mean | p50 | p90 | p99 | value
    base: float
    new: float
    delta: float
    delta_pct: float | None
    ci_low: float | None
    ci_high: float | None
    significant: bool
    method: str  # paired-t | welch-t | paired-bootstrap | bootstrap | exact


class ServingDiff(BaseModel):
    model_config = ConfigDict(frozen=True)

    base: str
    new: str
    requests_base: int
    requests_new: int
    paired: bool  # the same requests on both sides
    threshold_pct: float
    rows: list[ServingDiffRow]
    regression: list[str] = []  # with --fail-if-slower: the p99 TTFT / TPOT rows significantly slower by more
