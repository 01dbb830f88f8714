"""`atbprof fusions`: the fusion catalogue as a table (rich and Markdown from one list of sections); its JSON twin
is `Catalogue.to_dict()`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from atbprof.fusion.catalogue import Catalogue
from atbprof.render.sections import Section, render_sections, sections_markdown

if TYPE_CHECKING:
    from rich.console import Console

DETECTED = {
    "norm-patterns": "unfused chains and fused kernels",
    "sequences": "unfused sequences (priced) and fused kernels",
    "fused": "fused kernels and calls (already fused)",
}


def catalogue_sections(catalogue: Catalogue) -> list[Section]:
    head = Section("summary", lines=[f"{len(catalogue.fusions)} inference fusions (data/fusion_catalogue.yaml)"])
    table = Section(
        "fusions",
        ["fusion", "fused kernel Types", "torch_npu API", "replaces", "simulated (rule)", "analyze finds"],
    )
    sources = Section("sources")
    renames = Section("names by CANN release (atbprof analyze --cann-version, or the profile's cann_version)")
    for row in catalogue.fusions:
        for r in row.by_version:
            span = " and ".join(p for p in (r.since and f"from {r.since}", r.before and f"before {r.before}") if p)
            calls = f" ({', '.join(f'torch_npu.{a}' for a in r.api)})" if r.api else ""
            renames.lines.append(f"{row.title}: {r.fused} is {r.fused_as}{calls} {span}")
        table.rows.append(
            [
                row.title,
                ", ".join(row.fused_types),
                ", ".join(f"torch_npu.{a}" for a in row.api),
                row.removes + (f" ({row.versions})" if row.versions else ""),
                ", ".join(row.simulated) or "none",
                DETECTED[row.detected],
            ]
        )
        sources.lines.append(f"{row.title}: {row.source}")
    return [head, table, renames, sources]


def render_catalogue(catalogue: Catalogue, console: Console) -> None:
    render_sections(catalogue_sections(catalogue), console)


def catalogue_markdown(catalogue: Catalogue) -> str:
    return sections_markdown(catalogue_sections(catalogue), "atbprof fusions")
