"""`atbprof diff CLUSTER_A CLUSTER_B`: the cluster diff as sections (rich and Markdown) and its JSON twin."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from atbprof.diff.cluster_report import COLUMNS, Change, ClusterDiff
from atbprof.render.sections import Section, render_sections, sections_markdown

if TYPE_CHECKING:
    from rich.console import Console

LABELS = {
    "stage_us": "step",
    "computing_us": "computing",
    "communication_not_overlapped_us": "comm (not overlapped)",
    "free_us": "free",
    "bubble_us": "bubble",
}


def _cell(c: Change) -> str:
    pct = "" if c.delta_pct is None else f" ({c.delta_pct:+.1f}%)"
    mark = "*" if c.significant else ""
    return f"{c.base / 1e3:,.3f} -> {c.new / 1e3:,.3f}{pct}{mark}"


def sections(d: ClusterDiff) -> list[Section]:
    out = [Section("summary", lines=[d.summary]), Section("source", lines=[f"base {d.base}", f"new  {d.new}"])]
    stages = Section(
        "stages (mean step, ms; base -> new, * significant over the stage's ranks, paired by rank)",
        headers=["stage", "ranks", *(LABELS[c] for c in COLUMNS), "test"],
    )
    for s in d.stages:
        label = "-" if s.stage is None else str(s.stage)
        stages.rows.append(
            [label, ",".join(map(str, s.ranks)), *(_cell(s.columns[c]) for c in COLUMNS), s.columns["stage_us"].method]
        )
    out.append(stages)
    ranks = Section(
        "ranks (mean step, ms; base -> new)", headers=["rank", "stage", *(LABELS[c] for c in COLUMNS), "slow"]
    )
    ranks.numeric = {0, 1}
    for r in d.ranks:
        slow = {(False, True): "now slow", (True, False): "no longer slow", (True, True): "slow"}.get(
            (r.slow_base, r.slow_new), ""
        )
        stage = "-" if r.stage is None else str(r.stage)
        ranks.rows.append([str(r.rank), stage, *(_cell(r.columns[c]).rstrip("*") for c in COLUMNS), slow])
    out.append(ranks)
    if d.added_ranks or d.removed_ranks:
        out.append(
            Section(
                "ranks one side only",
                lines=[
                    f"added (new only): {', '.join(map(str, d.added_ranks)) or '-'}",
                    f"removed (base only): {', '.join(map(str, d.removed_ranks)) or '-'}",
                ],
            )
        )
    return out


def render_cluster_diff(d: ClusterDiff, console: Console) -> None:
    render_sections(sections(d), console)


def cluster_diff_markdown(d: ClusterDiff) -> str:
    return sections_markdown(sections(d), "atbprof diff (clusters)")


def cluster_diff_json(d: ClusterDiff) -> dict[str, Any]:
    """The documented JSON contract (the result's to_dict)."""
    return d.to_dict()
