"""A sweep's typed result (the JSON contract of `atbprof sweep --format json` and sweep.json's `report`), and how a
sweep directory is recognised. Renderers and figures read these; they never import the sweep's runner."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from atbprof.sweep.capacity import CapacityRow
from atbprof.sweep.compare import ClaimCheck, GainRow
from atbprof.sweep.spec import Axis, Compare, SweepSpec
from atbprof.sweep.table import SWEEP_SCHEMA_VERSION

SWEEP_JSON = "sweep.json"
SWEEP_PARQUET = "sweep.parquet"


def is_sweep_dir(path: Path) -> bool:
    return path.is_dir() and (path / SWEEP_JSON).is_file() and (path / SWEEP_PARQUET).is_file()


PREVIEW_COLUMNS = ("fits", "decode_ms_per_token", "ttft_ms", "tokens_per_s", "memory.total_gb", "error")
SERVING_PREVIEW_COLUMNS = (
    "fits",
    "serving.ttft_ms.p99",
    "serving.tpot_ms.p99",
    "serving.requests_per_s",
    "serving.goodput.requests_per_s",
    "error",
)
"""The preview of a sweep whose points serve requests (its figures are the serving.* columns)."""


class PointError(BaseModel):
    model_config = ConfigDict(extra="forbid")
    point: int
    at: dict[str, Any]
    error: str
    internal: bool = Field(description="an atbprof bug (the sweep exits 70 once written)")


class SweepReport(BaseModel):
    """`atbprof sweep --format json` (and sweep.json's `report`)."""

    model_config = ConfigDict(extra="forbid")
    schema_version: str = SWEEP_SCHEMA_VERSION
    name: str
    out: str
    base: str
    digest: str = Field(description="SHA-256 of the base config, fixed overrides and points")
    points: int
    ran: int = Field(description="points with figures")
    not_fitting: int = Field(description="points that do not fit the device's HBM (a row saying so)")
    failed: int = Field(description="points with another error (their rows say which)")
    resumed: int = Field(description="points taken from an interrupted run of the same sweep")
    axes: list[Axis]
    compare: Compare | None
    gains: list[GainRow] = Field(description="compare: per point of the other keys, the figure's gain")
    claims: list[ClaimCheck] = Field(description="reference claims beside the model's gains")
    capacity: list[CapacityRow] = Field(
        default_factory=list,
        description="serving sweeps over workload.rate_qps with an SLO: the highest rate meeting it (left out "
        "when empty)",
    )
    errors: list[PointError]
    rows: list[dict[str, Any]] = Field(description="per point: swept keys and " + ", ".join(PREVIEW_COLUMNS))
    files: list[str]
    notes: list[str] = Field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return self.dump()

    def dump(self, exclude: set[str] | None = None) -> dict[str, Any]:
        """The JSON form; `capacity` only when a serving sweep has it (other sweeps' files keep their bytes)."""
        doc = self.model_dump(mode="json", exclude=exclude)
        if not doc.get("capacity"):
            doc.pop("capacity", None)
        return doc


@dataclass
class SweepResult:
    spec: SweepSpec
    report: SweepReport
    table: pa.Table

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract of `atbprof sweep --format json`."""
        return self.report.to_dict()

    def to_arrow(self) -> pa.Table:
        """sweep.parquet: one row per point (its swept keys and every summary figure)."""
        return self.table
