"""`atbprof diff` of two serving runs: rich, markdown and the JSON contract (ServingDiff.model_dump)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from atbprof.diff.serving_report import ServingDiff, ServingDiffRow
from atbprof.render.sections import Section, render_sections, sections_markdown

if TYPE_CHECKING:
    from rich.console import Console

_LABELS = {
    "ttft_ms": "TTFT ms",
    "tpot_ms": "TPOT ms",
    "e2e_ms": "E2E ms",
    "queue_ms": "queued ms",
    "requests_per_s": "requests/s",
    "output_tokens_per_s": "output tokens/s",
    "goodput_rps": "goodput requests/s",
}


def serving_diff_json(d: ServingDiff) -> dict[str, Any]:
    return {"schema_version": "1", "kind": "serving", **d.model_dump(mode="json")}


def _cells(r: ServingDiffRow) -> list[str]:
    ci = "-" if r.ci_low is None or r.ci_high is None else f"[{r.ci_low:+,.2f}, {r.ci_high:+,.2f}]"
    pct = "-" if r.delta_pct is None else f"{r.delta_pct:+.1f}%"
    return [
        _LABELS.get(r.metric, r.metric),
        r.statistic,
        f"{r.base:,.2f}",
        f"{r.new:,.2f}",
        f"{r.delta:+,.2f}",
        pct,
        ci,
        "yes" if r.significant else "no",
    ]


_HEAD = ["metric", "stat", "base", "new", "delta", "change", "95% CI of delta", "significant"]


def _title(d: ServingDiff) -> str:
    pairing = "the same requests, paired" if d.paired else "different request streams, unpaired"
    return (
        f"serving: {d.new} against {d.base} ({d.requests_base:,} / {d.requests_new:,} requests, {pairing}; "
        f"threshold {d.threshold_pct:g}%)"
    )


def serving_diff_sections(d: ServingDiff) -> list[Section]:
    sec = Section(_title(d), headers=list(_HEAD), numeric=set(range(2, len(_HEAD))))
    for r in d.rows:
        sec.rows.append(_cells(r))
        sec.row_styles.append("bold" if r.significant else "")
    return [sec]


def render_serving_diff(d: ServingDiff, console: Console) -> None:
    render_sections(serving_diff_sections(d), console)


def serving_diff_markdown(d: ServingDiff) -> str:
    return sections_markdown(serving_diff_sections(d), "serving diff")
