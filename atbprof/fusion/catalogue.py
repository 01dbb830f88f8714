"""The inference fusion catalogue (data/fusion_catalogue.yaml): every fusion Ascend inference runs, with its fused
kernel Types, torch_npu API, what it removes, the simulator's rule and how `atbprof analyze` finds it. One source of
names: `atbprof fusions` lists it, and the analyzer counts each fused Type and API call as a fusion already made."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from atbprof.yamlio import load_data

CATALOGUE_SCHEMA_VERSION = "2"  # 2: simulated is a list of rules


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Renamed(_M):
    """On the CANN releases from `since` (inclusive) to `before` (exclusive), a finding that would name the fused
    kernel `fused` names `fused_as` (and the calls `api`) instead."""

    fused: str
    since: str | None = None
    before: str | None = None
    fused_as: str
    api: tuple[str, ...] = ()


class FusionRow(_M):
    name: str
    title: str
    fused_types: tuple[str, ...] = Field(description="the fused kernel's Type (kernel_details.csv / op_summary)")
    api: tuple[str, ...] = Field(description="torch_npu calls that make it (torch_npu.<api>)")
    removes: str = Field(description="the unfused sequence it replaces, as device Types")
    versions: str = Field(description="where names changed between releases")
    simulated: tuple[str, ...] = Field(
        description="the simulator's fusion rules that make it in a run of ours (empty: none)", strict=False
    )
    detected: Literal["norm-patterns", "sequences", "fused"] = Field(
        description="norm-patterns: unfused chains and fused kernels (the norm patterns of patterns.yaml); "
        "sequences: its unfused sequence (a patterns.yaml pattern with `fusion: <name>`) and its fused kernels; "
        "fused: its fused kernels and calls are counted as already fused"
    )
    source: str
    by_version: tuple[Renamed, ...] = Field(
        default=(), description="the fused kernel and calls a finding names on other CANN releases"
    )

    def framework_names(self) -> tuple[str, ...]:
        """The framework op names a profile records for its API calls."""
        return tuple(f"{ns}::{api}" for api in self.api for ns in ("npu", "torch_npu"))


class Catalogue(_M):
    schema_version: str = CATALOGUE_SCHEMA_VERSION
    fusions: tuple[FusionRow, ...]

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract of `atbprof fusions --format json`."""
        return self.model_dump(mode="json")


@cache
def fusion_catalogue() -> Catalogue:
    """data/fusion_catalogue.yaml, parsed once."""
    text = resources.files("atbprof.data").joinpath("fusion_catalogue.yaml").read_text(encoding="utf-8")
    return Catalogue(fusions=tuple(FusionRow.model_validate(r) for r in load_data(text)["fusions"]))
