"""The result of `atbprof analyze`: the findings table (one row per occurrence) and the report model.

The JSON twin (`atbprof analyze --format json`) is `AnalysisReport.model_dump(mode="json")`; it is a contract:
`schema_version`, `source` (what was read), `summary` (one line), `has_unfused`, `findings` (one item per
(level, kind, pattern, fused_as): at least `kind`, `count`, `time_us`, `est_saving_us`), `breakdown` (where the
measured time went, adding up to 100 % of the span), `whatif` (the estimate after fusion), `assumptions`, `notes`
and `next_commands`. Times are µs unless a field name says ms. New fields may be added; existing ones keep their
meaning.
"""

from __future__ import annotations

from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from atbprof.analyze.patterns import FindingKind, Level
from atbprof.numerics.report import NumericsReport

REPORT_SCHEMA_VERSION = "1"

FINDINGS_SCHEMA = pa.schema(
    [
        pa.field("level", pa.string(), nullable=False, metadata={"doc": "kernel | framework"}),
        pa.field("kind", pa.string(), nullable=False, metadata={"doc": "decomposed_rmsnorm ... fused_norm"}),
        pa.field("pattern", pa.string(), nullable=False, metadata={"doc": "name of the pattern that matched"}),
        pa.field("fused_as", pa.string(), nullable=False, metadata={"doc": "the fused op it would become / is"}),
        pa.field("rule", pa.string(), nullable=False, metadata={"doc": "simulator fusion rule, or empty"}),
        pa.field("step", pa.int32(), nullable=True),
        pa.field("phase", pa.string(), nullable=True),
        pa.field("stream_id", pa.int64(), nullable=True, metadata={"doc": "device stream (framework: thread)"}),
        pa.field("layer", pa.int32(), nullable=True),
        pa.field("role", pa.string(), nullable=True, metadata={"doc": "role of the anchor op (runs of ours)"}),
        pa.field("start_ns", pa.int64(), nullable=False, metadata={"doc": "start of the first member"}),
        pa.field("op_indices", pa.list_(pa.int64()), nullable=False, metadata={"doc": "members (op_index)"}),
        pa.field("kernel_ns", pa.int64(), nullable=False, metadata={"doc": "sum of member durations"}),
        pa.field("max_kernel_ns", pa.int64(), nullable=False, metadata={"doc": "longest member"}),
        pa.field("last_kernel_ns", pa.int64(), nullable=False, metadata={"doc": "duration of the last member"}),
        pa.field("wait_ns", pa.int64(), nullable=False, metadata={"doc": "idle time of the stream before members"}),
        pa.field("inner_wait_ns", pa.int64(), nullable=False, metadata={"doc": "wait_ns minus the first member's"}),
        pa.field("launch_ns", pa.int64(), nullable=True, metadata={"doc": "host launch time of members, if known"}),
        pa.field("time_ns", pa.int64(), nullable=False, metadata={"doc": "kernel_ns + wait_ns (time involved)"}),
        pa.field("shape", pa.string(), nullable=True, metadata={"doc": "input shapes of the anchor op"}),
        pa.field("dtype", pa.string(), nullable=True, metadata={"doc": "input dtypes of the anchor op"}),
        pa.field("out_width", pa.int64(), nullable=True, metadata={"doc": "last output dim of the last member"}),
        pa.field("evidence", pa.string(), nullable=False, metadata={"doc": "how the match was confirmed"}),
        pa.field("est_fused_ns", pa.float64(), nullable=True, metadata={"doc": "what-if: the fused kernel"}),
        pa.field("est_saving_ns", pa.float64(), nullable=True, metadata={"doc": "what-if: time saved"}),
        pa.field(
            "device_ns",
            pa.float64(),
            nullable=True,
            metadata={"doc": "framework level: device time of the kernels its calls launched (kernel_ns is host time)"},
        ),
        pa.field("device_kernels", pa.int64(), nullable=True, metadata={"doc": "framework level: those kernels"}),
    ],
    metadata={"atbprof.table": "analyze.findings", "atbprof.schema_version": REPORT_SCHEMA_VERSION},
)


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Source(_M):
    kind: str = Field(description="importer kind: atbprof-run, kernel_details, op_summary, trace_view, ...")
    path: str
    ops: int
    framework_ops: int
    steps: int
    streams: list[int]
    phases: list[str]
    has_roles: bool = Field(description="ops carry model roles (runs of ours): categories come from them")
    has_launch: bool = Field(description="ops carry host launch times")
    has_shapes: bool
    has_graph: bool = Field(description="data edges of the run's graph were used (runs of ours)")
    patterns: str


class Occurrence(_M):
    step: int | None
    phase: str | None
    stream_id: int | None
    layer: int | None
    role: str | None
    start_us: float
    op_indices: list[int]
    op_types: list[str]
    time_us: float
    est_saving_us: float | None


class PhaseCount(_M):
    count: int
    steps: int
    per_step: float
    time_us: float
    est_saving_us: float


class Finding(_M):
    kind: FindingKind
    level: Level
    pattern: str
    fused_as: str
    rule: str
    fusion: str | None = Field(
        default=None, description="the fusion catalogue's row (`atbprof fusions`) this finding is, when it is one"
    )
    api: str | None = Field(
        default=None, description="opportunities: the call that makes the fused kernel (torch_npu.<api>, ...)"
    )
    opportunity: bool = Field(description="false for fused_norm / fused_op (already fused)")
    count: int
    time_us: float = Field(
        description="kernel_us + wait_us: device time the matched ops account for (framework level: host time of "
        "the calls and the waits between them)"
    )
    kernel_us: float = Field(
        description="device time of the matched kernels; framework level: of the kernels its calls launched, when "
        "the profile records launches (else the calls' host time, as host_us)"
    )
    host_us: float | None = Field(
        default=None, description="framework level: host time of the calls; null for device kernels"
    )
    device_kernels: int | None = Field(
        default=None, description="framework level: kernels its calls launched, when the profile records launches"
    )
    wait_us: float = Field(description="idle time of the stream right before the members (waiting for launches)")
    launch_us: float | None = Field(description="host launch time of the members, when the profile records it")
    est_saving_us: float | None = Field(description="what fusing them saves; null: not estimated (est_method says why)")
    est_method: str
    evidence: str
    by_phase: dict[str, PhaseCount]
    examples: list[Occurrence]


class Row(_M):
    name: str
    count: int = 0
    device_us: float = Field(default=0.0, description="sum of kernel durations")
    charged_us: float = Field(default=0.0, description="device-timeline time charged (adds up to the span)")
    per_step_ms: float = Field(default=0.0, description="charged per step (per token in decode)")
    share: float = Field(default=0.0, description="charged / span")


class NormCost(_M):
    """Norm-related cost (seed 000's Add & Norm blocks): kernel time plus launch (or wait) time."""

    total_us: float
    kernel_us: float
    launch_us: float
    launch_source: Literal["host launch", "device wait before the op"]
    kernel_share: float
    launch_share: float
    span_share: float
    per_step_ms: float
    ops: int


IDLE_PREFIX = "idle: "
"""Rows of a profile's step time no op is charged start with this (idle: synchronisation, ...: idle_causes.py)."""


class Idle(_M):
    """Device idle time, HTA-style: waiting for the next launch (charged to the op waited for) vs other gaps."""

    host_wait_us: float
    other_gap_us: float
    frame_us: float = Field(description="step lead-in and token sync around the device work (runs of ours)")
    classified_by: str
    waited_for: list[Row]
    causes: list[Row] = Field(
        default_factory=list,
        description="profiles: the step time no op is charged, by what the host was doing (`idle: synchronisation`, "
        "`idle: graph/launch`, `idle: host dispatch`, `idle: unexplained`); the same rows end the category, op "
        "type, layer and bound tables. Empty for runs of ours (that time is `other`: host lead-in, token sync)",
    )


class PhaseBreakdown(_M):
    phase: str
    steps: int
    span_us: float = Field(description="measured span of the phase (all its steps)")
    per_step_ms: float = Field(description="mean span per step: TTFT for prefill, per-token latency for decode")
    categories: list[Row]
    norm: NormCost


class TrainingPhase(_M):
    phase: str = Field(description="forward | backward | optimizer (a training step's structure, training.py)")
    ops: int
    charged_us: float
    per_step_ms: float
    share: float = Field(description="of the span of the scope's steps; the host time outside kernels is not in it")


class OutsideSteps(_M):
    us: float = Field(description="time of the profile's timeline in no step (before, between, after the frames)")
    ops: int = Field(description="device ops that start outside every step")
    empty_frames: int = Field(description="ProfilerStep frames with no device op in them (counted in `us`)")


class Breakdown(_M):
    scope: str = Field(description="the phase the op-type/layer/bound/idle rows describe")
    steps: int = Field(description="steps in that phase")
    span_us: float = Field(description="measured span of the whole profile's steps (sum over phases)")
    steps_from: str = Field(
        default="ops",
        description="what a step is: ProfilerStep (the host frames, which partition the timeline), iteration (a "
        "serving loop's iterations, cut on the device timeline; `steps_rule` says how they were found), run "
        "(atbprof host frames), ops (the span of the ops a step id names)",
    )
    steps_rule: str | None = Field(
        default=None, description="for iteration steps: what found them (a framework range, graph launches, idle gaps)"
    )
    outside_steps: OutsideSteps = Field(default_factory=lambda: OutsideSteps(us=0.0, ops=0, empty_frames=0))
    step_kind: str = Field(
        default="inference",
        description="training (backward kernels: no ms/token or tokens/s) | inference | host (no device kernels)",
    )
    training: list[TrainingPhase] = Field(default_factory=list, description="a training step's phases, else empty")
    categories_heuristic: str
    phases: list[PhaseBreakdown]
    by_op_type: list[Row]
    by_layer: list[Row]
    by_bound: list[Row]
    idle: Idle


class WhatIfStep(_M):
    kinds: list[str]
    rules: list[str] = Field(description="rules switched on, cumulatively, for this step")
    span_us: float
    ttft_ms: float | None
    decode_ms_per_token: float | None
    saving_us: float
    fired: dict[str, int]
    notes: list[str]


class WhatIf(_M):
    method: Literal["resimulated", "device-model", "trace", "none"] = Field(
        description="resimulated (runs of ours), device-model (Ascend profiles), trace (a device atbprof has no "
        "model of: measured from the trace's host and device timelines), none"
    )
    device: str | None
    assumption: str
    span_us: float
    total_saving_us: float
    span_after_us: float
    saving_share: float
    decode_ms_per_token_before: float | None
    decode_ms_per_token_after: float | None
    steps: list[WhatIfStep]


class AnalysisReport(_M):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    schema_version: str = REPORT_SCHEMA_VERSION
    source: Source
    summary: str
    has_unfused: bool = Field(description="unfused norm opportunities exist (`--fail-on-unfused` exits 1)")
    findings: list[Finding]
    breakdown: Breakdown
    whatif: WhatIf
    assumptions: list[str]
    notes: list[str]
    next_commands: list[str]
    numerics: NumericsReport | None = Field(
        default=None, description="our runs made with --numerics: the run's numerics report (atbprof.numerics/1)"
    )
    occurrences: pa.Table | None = Field(
        exclude=True,
        description="FINDINGS_SCHEMA: every occurrence, not in the JSON; None for a run analysed in parts (the "
        "command's reading of a large run: its occurrences are summed as they come, not kept)",
    )

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract of `atbprof analyze --format json`; `numerics` only for runs made with it."""
        return self.model_dump(mode="json", exclude=None if self.numerics is not None else {"numerics"})

    def to_arrow(self) -> pa.Table:
        """Every occurrence of every finding (FINDINGS_SCHEMA), not only the examples the JSON lists."""
        if self.occurrences is None:
            from atbprof.errors import UsageError

            raise UsageError(
                f"{self.source.path}: analysed in parts (a large run), its occurrences summed as they came and not "
                "kept; atbprof.analyze(path) reads the run whole and keeps them"
            )
        return self.occurrences
