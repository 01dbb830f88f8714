"""`atbprof diff` output: a rich terminal report and its Markdown and JSON twins (the same content).

Direction is always base -> new and delta = new - base: a negative time delta is faster (green), a significant
positive one is a regression (red).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from atbprof.diff.report import DiffReport, Figure
from atbprof.hints import command
from atbprof.render.sections import Section, render_sections, sections_markdown

if TYPE_CHECKING:
    from rich.console import Console

from atbprof.render.labels import CATEGORY_LABELS

_CATEGORY = {**CATEGORY_LABELS, "per-token total": "total"}
_FIGURES = (("decode_ms_per_token", "decode ms/token"), ("ttft_ms", "TTFT ms"), ("tokens_per_s", "tokens/s"))


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.2f} %"


def _ci(lo: float | None, hi: float | None, fmt: str = "{:+.3f}") -> str:
    return "-" if lo is None or hi is None else f"[{fmt.format(lo)}, {fmt.format(hi)}]"


def _style(delta: float, significant: bool, more_is_better: bool = False) -> str:
    if not significant or delta == 0:
        return ""
    worse = delta < 0 if more_is_better else delta > 0
    return "bold red" if worse else "green"


def sections(report: DiffReport, args: tuple[str, str] | None = None) -> list[Section]:
    decode = report.matching.scope == "decode"
    per = (
        "per token" if decode else "per step" if report.matching.scope == "all" else f"per {report.matching.scope} step"
    )
    out = [Section("summary", lines=[report.summary])]
    out.append(
        Section(
            "inputs",
            lines=[
                f"base: {report.base.path} ({report.base.kind}, {report.base.ops:,} ops, {report.base.steps} steps)",
                f"new:  {report.new.path} ({report.new.kind}, {report.new.ops:,} ops, {report.new.steps} steps)",
            ],
        )
    )
    head = Section(
        "headline (base -> new; delta = new - base, negative = less time)",
        ["", "base", "new", "delta", "delta %", "95 % CI of delta", "significant", "method"],
        numeric={1, 2, 3, 4},
    )
    figures = _FIGURES if decode else (("decode_ms_per_token", "ms/step"), *_FIGURES[1:])
    for key, label in figures:
        f: Figure | None = getattr(report.headline, key)
        if f is None:
            continue
        head.rows.append(
            [
                label,
                f"{f.base:,.3f}",
                f"{f.new:,.3f}",
                f"{f.delta:+,.3f}",
                _pct(f.delta_pct),
                _ci(f.ci_low, f.ci_high),
                "yes" if f.significant else "no",
                f.method,
            ]
        )
        head.row_styles.append(_style(f.delta, f.significant, more_is_better=key == "tokens_per_s"))
    if any(getattr(report.headline, k) is not None and getattr(report.headline, k).method == "untestable"
           for k, _ in figures):  # fmt: skip
        head.lines.append("untestable: one step a side and no noise estimate - a change is not called significant")
    check = report.regression_check
    if check is not None:
        head.lines.append(
            f"--fail-if-slower {check.limit_pct:g} %: tested {', '.join(check.tested) or 'nothing'}"
            + (f"; not testable {', '.join(check.not_tested)}" if check.not_tested else "")
            + (f"; FAILED {', '.join(check.failed)}" if check.failed else "; passed")
        )
    out.append(head)
    cats = Section(
        f"where the time went, ms {per} (seed 000's table; delta = new - base, negative = less time)",
        ["", "base", "new", "delta", "delta %", "95 % CI of delta", "significant"],
        numeric={1, 2, 3, 4},
    )
    for c in report.categories:
        cats.rows.append(
            [
                _CATEGORY.get(c.name, c.name),
                f"{c.base_ms:,.2f}",
                f"{c.new_ms:,.2f}",
                f"{-c.saved_ms:+,.2f}",
                _pct(c.delta_pct),
                _ci(c.ci_low, c.ci_high),
                "yes" if c.significant else "no",
            ]
        )
        cats.row_styles.append(_style(-c.saved_ms, c.significant))
    out.append(cats)
    dist = Section(
        "per-step distributions (ms)",
        ["", "side", "steps", "mean", "sd", "p10", "p50", "p90"],
        numeric={2, 3, 4, 5, 6, 7},
    )
    for key, label in figures[:2]:
        f = getattr(report.headline, key)
        if f is None:
            continue
        for side, d in (("base", f.base_steps), ("new", f.new_steps)):
            dist.rows.append(
                [
                    label,
                    side,
                    str(d.n),
                    f"{d.mean:,.3f}",
                    f"{d.sd:.4f}",
                    f"{d.p10:,.3f}",
                    f"{d.p50:,.3f}",
                    f"{d.p90:,.3f}",
                ]
            )
    out.append(dist)
    rows = Section(
        f"changes by {report.by} (µs {per}; 'wait' = the part of delta that is launch/wait, not kernel)",
        ["", "change", "instances", "base", "new", "delta", "each", "wait", "95 % CI", "rule"],
        numeric={2, 3, 4, 5, 6, 7},
    )
    for r in report.rows:
        rows.rows.append(
            [
                r.name,
                r.classification,
                f"{r.instances_per_step:g}",
                f"{r.base_us:,.1f}",
                f"{r.new_us:,.1f}",
                f"{r.delta_us:+,.1f}",
                "-" if r.per_instance_delta_us is None else f"{r.per_instance_delta_us:+,.2f}",
                f"{r.wait_delta_us:+,.1f}",
                _ci(r.ci_low_us, r.ci_high_us, "{:+,.1f}"),
                r.rule,
            ]
        )
        rows.row_styles.append(_style(r.delta_us, r.significant))
    out.append(rows)
    if report.numerics is not None:
        out.append(_numerics(report))
    m = report.matching
    counts = ", ".join(f"{v} {k}" for k, v in sorted(m.counts.items()))
    out.append(
        Section(
            "matching",
            lines=[
                f"{m.method}: {m.pairs} step pairs ({m.scope_pairs} {m.scope}); matched ops base {m.base_matched_ops:,}"
                f" / new {m.new_matched_ops:,}; unmatched base {m.base_unmatched_ops:,} / new {m.new_unmatched_ops:,}"
                f"; unpaired steps base {m.base_unpaired_steps} / new {m.new_unpaired_steps}"
                + (
                    f"; outside every step base {m.base_outside_steps_ops:,} / new {m.new_outside_steps_ops:,} ops"
                    if m.base_outside_steps_ops or m.new_outside_steps_ops
                    else ""
                )
                + f"; rows: {counts or 'none'}",
                f"threshold: changes under {report.threshold_pct:g} % are unchanged",
            ],
        )
    )
    out.append(Section("assumptions", lines=[f"- {a}" for a in report.assumptions]))
    if report.notes:
        out.append(Section("notes", lines=[f"- {n}" for n in report.notes]))
    a, b = (Path(p) for p in (args or (report.base.path, report.new.path)))
    out.append(
        Section(
            "next",
            lines=[
                command(
                    "atbprof",
                    "diff",
                    a,
                    b,
                    "--trace",
                    "diff.json.gz",
                    why="both runs side by side in https://ui.perfetto.dev",
                ),
                command("atbprof", "diff", a, b, "--by", "layer", why="or category, role, shape"),
                command(
                    "atbprof", "report", a, b, "--out", "diff-report.html", why="one page: the figures and these tables"
                ),
            ],
        )
    )
    return out


def _err(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _numerics(report: DiffReport) -> Section:
    n = report.numerics
    assert n is not None
    sec = Section(
        "numerics (atbprof run --numerics): fused kernels vs the unfused ops they replaced, base -> new",
        ["kernel", "phase", "verdict", "max abs err", "ulp p99", "vs float64 (scaled)"],
    )
    for k in n.kernels:
        sec.rows.append(
            [
                f"{k.op_type} ({k.role})",
                k.phase,
                f"{k.base_verdict or '-'} -> {k.new_verdict or '-'}",
                f"{_err(k.base_max_abs_err)} -> {_err(k.new_max_abs_err)}",
                f"{_err(k.base_ulp_p99)} -> {_err(k.new_ulp_p99)}",
                f"{_err(k.base_scaled_err)} -> {_err(k.new_scaled_err)}",
            ]
        )
        worse = k.base_verdict is not None and k.new_verdict is not None and k.new_verdict != k.base_verdict
        sec.row_styles.append("bold red" if worse and k.new_verdict != "aligned" else "")
    verdicts = ", ".join(f"{v.rule} {v.base or '-'} -> {v.new or '-'}" for v in n.rules)
    sec.lines.append(f"rules: {verdicts or 'none'}; finite: {n.base_finite} -> {n.new_finite}")
    if n.worse_rules:
        sec.lines.append(f"worse: {', '.join(n.worse_rules)}")
    if n.note:
        sec.lines.append(n.note)
    return sec


def render_diff(report: DiffReport, console: Console) -> None:
    render_sections(sections(report), console, quiet_titles=("inputs",))


def diff_markdown(report: DiffReport) -> str:
    return sections_markdown(sections(report), "atbprof diff")


def diff_json(report: DiffReport) -> dict[str, Any]:
    """The documented JSON contract (the result's to_dict)."""
    return report.to_dict()
