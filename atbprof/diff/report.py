"""The diff report: a documented JSON contract (`atbprof diff --format json`) and what the renderers draw.

Sign convention everywhere: delta = new - base, so a negative time delta is faster; `saved_ms` = base - new.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import pyarrow as pa

from pydantic import BaseModel, ConfigDict, Field

DIFF_SCHEMA_VERSION = "1"
Classification = Literal["added", "removed", "fused", "split", "faster", "slower", "unchanged"]
By = Literal["op-type", "category", "layer", "role", "shape"]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Distribution(_M):
    n: int = Field(description="steps measured")
    mean: float
    sd: float
    p10: float
    p50: float
    p90: float


class Figure(_M):
    """One headline figure, base -> new, with the confidence interval of the difference."""

    unit: str
    base: float
    new: float
    delta: float = Field(description="new - base")
    delta_pct: float | None
    ci_low: float | None = Field(description="95 % interval of delta; null with a single step a side")
    ci_high: float | None
    significant: bool
    method: str = Field(
        description="paired-t | welch-t | single (one step a side, judged by the other steps' noise) | exact (no "
        "measurement noise: atbprof runs without jitter) | untestable (one step a side and no noise estimate: never "
        "significant)"
    )
    base_steps: Distribution
    new_steps: Distribution


class Headline(_M):
    decode_ms_per_token: Figure | None = Field(description="mean decode step wall (or per step, see scope)")
    ttft_ms: Figure | None = Field(description="prefill step wall (runs of ours: run start to first token)")
    tokens_per_s: Figure | None


class Category(_M):
    name: str
    base_ms: float = Field(description="per step of the scope (per token in decode)")
    new_ms: float
    saved_ms: float = Field(description="base - new")
    delta_pct: float | None
    ci_low: float | None = Field(description="95 % interval of new - base (ms)")
    ci_high: float | None
    significant: bool
    base_steps: Distribution
    new_steps: Distribution


class DiffRow(_M):
    name: str = Field(description="the group key: 'Add + RmsNorm (2 kernels) -> AddRmsNorm', an op type, a layer...")
    classification: Classification
    base_types: list[str] = Field(description="op types of one base instance (structural rows)")
    new_types: list[str]
    rule: str = Field(description="fusion rule that explains a fused/split row, if known")
    instances_per_step: float = Field(description="matched groups per step (per token in decode)")
    base_ops_per_step: float
    new_ops_per_step: float
    base_us: float = Field(description="time charged per step: kernel + the idle wait before it")
    new_us: float
    delta_us: float = Field(description="new - base, per step")
    delta_pct: float | None
    ci_low_us: float | None
    ci_high_us: float | None
    significant: bool
    base_kernel_us: float = Field(description="kernel time per step")
    new_kernel_us: float
    wait_delta_us: float = Field(description="the part of delta_us that is launch/wait time, not kernel time")
    per_instance_delta_us: float | None


class DiffSide(_M):
    kind: str
    path: str
    name: str
    ops: int
    steps: int
    phases: list[str]


class Matching(_M):
    method: str = Field(description="graph (runs of ours: exact) | alignment (op sequences per stream and step)")
    pairs: int = Field(description="step pairs compared")
    scope: str = Field(description="phase the rows and categories cover (decode = per token)")
    scope_pairs: int
    base_matched_ops: int
    new_matched_ops: int
    base_unmatched_ops: int = Field(
        description="ops of compared steps with no counterpart on the other side: in no group, or in a removed "
        "(new: added) group"
    )
    new_unmatched_ops: int
    base_unpaired_steps: int
    new_unpaired_steps: int
    base_outside_steps_ops: int = Field(
        default=0, description="ops outside every ProfilerStep frame (before, between or after them): in no step"
    )
    new_outside_steps_ops: int = 0
    counts: dict[str, int] = Field(description="rows per classification")


class RuleVerdictChange(_M):
    rule: str
    base: str | None = Field(description="aligned | degraded | broken; null when that run did not fuse/test it")
    new: str | None
    worse: bool


class KernelNumericsChange(_M):
    """One fused kernel (phase, op type, role): its errors against the unfused ops it replaced, base -> new."""

    phase: str
    op_type: str
    role: str
    base_verdict: str | None
    new_verdict: str | None
    base_max_abs_err: float | None
    new_max_abs_err: float | None
    base_ulp_p99: float | None
    new_ulp_p99: float | None
    base_scaled_err: float | None = Field(description="fused kernel vs the float64 reference")
    new_scaled_err: float | None


class NumericsChange(_M):
    """`atbprof run --numerics` results of the two runs side by side."""

    base_finite: bool | None
    new_finite: bool | None
    rules: list[RuleVerdictChange]
    kernels: list[KernelNumericsChange]
    worse_rules: list[str]
    note: str


class RegressionCheck(_M):
    """What --fail-if-slower could test: it fails only on a tested, significant slowdown beyond its limit."""

    limit_pct: float
    tested: list[str] = Field(description="figures with a test behind them (decode_ms_per_token, ttft_ms)")
    not_tested: list[str] = Field(description="figures present but untestable (one step a side, no noise estimate)")
    failed: list[str] = Field(description="tested figures significantly slower by more than limit_pct")


class DiffReport(_M):
    schema_version: str = DIFF_SCHEMA_VERSION
    steps_compared_as: str = Field(
        default="host frames",
        description="host frames (both sides have them: atbprof runs, ProfilerStep) | ops (a step is the span of "
        "its kernels, on both sides, when either input has no host frames)",
    )
    base: DiffSide
    new: DiffSide
    summary: str
    headline: Headline
    categories: list[Category]
    by: By
    rows: list[DiffRow]
    matching: Matching
    threshold_pct: float = Field(description="noise threshold: smaller changes are 'unchanged'")
    assumptions: list[str]
    notes: list[str]
    regression: bool = Field(description="a significant slowdown of decode per token or TTFT beyond fail_if_slower")
    regression_check: RegressionCheck | None = Field(default=None, description="only with --fail-if-slower")
    numerics: NumericsChange | None = Field(default=None, description="only when a run was made with --numerics")

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract of `atbprof diff --format json`."""
        return self.model_dump(mode="json")

    def to_arrow(self) -> pa.Table:
        """One row per compared group (`rows`, grouped as `by` says)."""
        import pyarrow as pa

        return pa.Table.from_pylist([r.model_dump(mode="json") for r in self.rows])
