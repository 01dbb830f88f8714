"""The numerics report: its models (the JSON contract of run.json's `numerics` key and of ops.parquet's
`atbprof.numerics` metadata) and `load_numerics` for other commands (analyze, diff)."""

from __future__ import annotations

from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from atbprof.errors import InputError
from atbprof.numerics.metrics import ErrorStats, Verdict

NUMERICS_SCHEMA = "atbprof.numerics/1"
PARQUET_KEY = b"atbprof.numerics"


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Subset(_M):
    """What was executed: the numerics of a big model run on a subset (stated in every view)."""

    layers: list[int]
    prompt_len: int  # tokens of the prefill step executed (<= the run's prompt_len, capped by max_prompt)
    run_prompt_len: int
    query_rows: int  # prefill rows whose outputs were computed (every row feeds K and V)
    decode_steps: int  # 0 or 1 (one decode step over the prefill's KV cache)
    batch: int  # always 1
    weights: str  # "random (seed N, logit std S)" or the checkpoint path
    dtype: str


class KernelNumerics(_M):
    """One fused op type in one phase (over the executed layers): its kernel against the unfused op sequence it
    replaced, and both against float64, from the same inputs."""

    phase: str
    op_type: str
    role: str
    rule: str  # the rule that produced this kernel
    rules: list[str]  # every rule whose kernels it contains (it counts toward their verdicts)
    fused_from: list[str]
    segments: list[str]
    outputs: list[str]
    layers: list[int]
    fused_vs_unfused: ErrorStats
    fused_vs_ref: ErrorStats
    unfused_vs_ref: ErrorStats
    stats_nonfinite: int  # NaN/Inf in the kernel's row statistics (fused attention's softmax sums)
    verdict: Verdict
    reason: str


class RuleNumerics(_M):
    """One fusion rule's own effect in one phase: the segments it changes run with only its kernels vs the
    unfused ops, from the fused path's inputs (a composite rule is judged by its kernels instead)."""

    phase: str
    rule: str
    segments: list[str]
    layers: list[int]
    places: int  # probes merged (per layer and place, e.g. both norms)
    fused_vs_unfused: ErrorStats
    fused_vs_ref: ErrorStats
    unfused_vs_ref: ErrorStats
    stats_nonfinite: int
    verdict: Verdict
    reason: str


class LayerNumerics(_M):
    """The whole decoder layer's output (residual + MLP) per phase and layer."""

    phase: str
    layer: int
    fused_vs_ref: ErrorStats
    unfused_vs_ref: ErrorStats
    fused_vs_unfused: ErrorStats
    verdict: Verdict
    reason: str


class NumericsReport(_M):
    schema_id: str = NUMERICS_SCHEMA
    fusion_strategy: str
    subset: Subset
    tolerance: dict[str, float]
    tolerance_rule: str
    kernels: list[KernelNumerics]
    rule_probes: list[RuleNumerics]
    layers: list[LayerNumerics]
    rules: dict[str, Verdict]  # fusion rule -> worst verdict of its own probes and of the kernels it produced
    finite: bool  # no NaN/Inf anywhere in the fused execution
    notes: list[str]

    def kernel_args(self) -> dict[str, dict[str, object]]:
        """Trace args per `phase|op_type|role` of the fused kernels (the writers attach them to the op slices)."""
        out: dict[str, dict[str, object]] = {}
        for kn in self.kernels:
            s = kn.fused_vs_unfused
            out[f"{kn.phase}|{kn.op_type}|{kn.role}"] = {
                "numerics_verdict": kn.verdict,
                "numerics_max_abs_err": s.max_abs_err,
                "numerics_max_rel_err": s.max_rel_err,
                "numerics_ulp_max": s.ulp_max,
                "numerics_nonfinite": s.nan + s.inf + kn.stats_nonfinite,
            }
        return out


def report_json(report: NumericsReport) -> dict[str, object]:
    return report.model_dump(mode="json")


def parse_report(doc: object, source: str) -> NumericsReport:
    try:
        return NumericsReport.model_validate(doc)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError(
            f"{source}: numerics report does not match {NUMERICS_SCHEMA} ({where}: {first['msg']})"
        ) from None


def load_numerics(run_dir: str | Path) -> NumericsReport | None:
    """The numerics report of a run directory (run.json's `numerics`, else ops.parquet's metadata), or None when
    the run was made without --numerics."""
    run_dir = Path(run_dir)
    run_json = run_dir / "run.json"
    if run_json.exists():
        try:
            doc = orjson.loads(run_json.read_bytes())
        except orjson.JSONDecodeError as err:
            raise InputError(f"{run_json}: not valid JSON ({err}); re-create the run with `atbprof run`") from None
        if isinstance(doc, dict) and doc.get("numerics") is not None:
            return parse_report(doc["numerics"], f"{run_json}: numerics")
        return None
    ops = run_dir / "ops.parquet"
    if ops.exists():
        import pyarrow.parquet as pq  # here: analyze of other formats never needs it (start-up time)

        meta = pq.read_schema(ops).metadata or {}
        if PARQUET_KEY in meta:
            try:
                return parse_report(orjson.loads(meta[PARQUET_KEY]), f"{ops}: metadata {PARQUET_KEY.decode()}")
            except orjson.JSONDecodeError as err:
                raise InputError(f"{ops}: metadata {PARQUET_KEY.decode()} is not JSON ({err})") from None
    return None
