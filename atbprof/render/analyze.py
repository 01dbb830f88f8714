"""`atbprof analyze` output: a rich terminal report and its Markdown and JSON twins (the same content).

Both text forms are rendered from one list of sections (a line of text or a table of strings), so they can not
drift apart: summary line first, then the findings, the breakdown tables, the what-if, assumptions and notes, and
the next command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from atbprof.analyze.report import IDLE_PREFIX, AnalysisReport, Row
from atbprof.numerics.report import NumericsReport
from atbprof.render.sections import Section, render_sections, sections_markdown

if TYPE_CHECKING:  # rich loads only for the terminal form (the JSON and Markdown twins start faster without it)
    from rich.console import Console

_KIND = {
    "decomposed_rmsnorm": "decomposed RMSNorm",
    "decomposed_layernorm": "decomposed LayerNorm",
    "add_norm": "Add -> Norm",
    "norm_matmul": "Norm -> MatMul",
    "unfused_op": "unfused",
    "fused_norm": "already fused",
    "fused_op": "already fused",
}


def _ms(us: float) -> str:
    return f"{us / 1e3:,.3f}"


def _share(x: float) -> str:
    return f"{x:.1%}"


def _row_table(title: str, rows: list[Row], per: str) -> Section:
    sec = Section(title, ["", "count", "device ms", "charged ms", per, "share"], numeric={1, 2, 3, 4, 5})
    for r in rows:
        sec.rows.append(
            [r.name, f"{r.count:,}", _ms(r.device_us), _ms(r.charged_us), f"{r.per_step_ms:.3f}", _share(r.share)]
        )
    return sec


def sections(report: AnalysisReport) -> list[Section]:
    b, w = report.breakdown, report.whatif
    per = "ms/token" if b.scope == "decode" else "ms/step"
    out = [Section("summary", lines=[report.summary])]
    src = report.source
    out.append(
        Section(
            "source",
            lines=[
                f"{src.path} ({src.kind}): {src.ops:,} device ops"
                + (f", {src.framework_ops:,} framework ops" if src.framework_ops else "")
                + f", {src.steps} step(s), streams {', '.join(map(str, src.streams)) or '-'}; patterns: {src.patterns}"
            ],
        )
    )
    fnd = Section(
        "findings",
        [
            "kind",
            "level",
            "count",
            "per step",
            "fused as",
            "time ms",
            "wait ms",
            "est. saving ms",
            "example",
            "evidence",
        ],
        numeric={2, 3, 5, 6, 7},
    )
    for f in report.findings:
        scope = f.by_phase.get(b.scope) or next(iter(f.by_phase.values()))
        ex = f.examples[0] if f.examples else None
        where = ""
        if ex is not None:
            loc = [
                f"step {ex.step}" if ex.step is not None else "",
                f"layer {ex.layer}" if ex.layer is not None else "",
                f"stream {ex.stream_id}" if ex.stream_id is not None else "",
            ]
            ops = f"ops {ex.op_indices[0]}-{ex.op_indices[-1]}" if len(ex.op_indices) > 1 else f"op {ex.op_indices[0]}"
            where = " ".join(x for x in loc if x) + f" {ops} @ {ex.start_us / 1e3:.3f} ms: " + " ".join(ex.op_types)
        fnd.rows.append(
            [
                f"{_KIND[f.kind]} {f.fusion}" if f.kind == "unfused_op" and f.fusion else _KIND[f.kind],
                f.level,
                f"{f.count:,}",
                f"{scope.per_step:g}",
                f.fused_as,
                _ms(f.time_us),
                _ms(f.wait_us),
                _saving(f.est_saving_us, f.time_us + f.wait_us) if f.opportunity else "-",
                where,
                f.evidence,
            ]
        )
    if not report.findings:
        fnd.lines.append("no norms or other catalogue fusions found (neither unfused nor fused)")
    out.append(fnd)
    shown = ["attention", "ffn", "other", "communication"]
    if any(r.name == "memory" for p in b.phases for r in p.categories):
        shown.append("memory")  # device copies and fills of a Kineto trace
    idle_rows = any(r.name.startswith(IDLE_PREFIX) for p in b.phases for r in p.categories)
    if idle_rows:
        shown.append("idle")  # a profile's step time no op is charged, by cause below
    ph = Section(
        "phases (measured span; TTFT = prefill per step)",
        ["phase", "steps", "ms/step", *shown, "norm-related", "norm kernel / launch"],
        numeric=set(range(1, len(shown) + 5)),
    )
    for p in b.phases:
        cats = {r.name: r for r in p.categories}
        idle_parts = [r for r in p.categories if r.name.startswith(IDLE_PREFIX)]
        if idle_parts:
            cats["idle"] = Row(
                name="idle",
                charged_us=sum(r.charged_us for r in idle_parts),
                per_step_ms=sum(r.per_step_ms for r in idle_parts),
                share=sum(r.share for r in idle_parts),
            )
        ph.rows.append(
            [
                p.phase,
                str(p.steps),
                f"{p.per_step_ms:.3f}",
                *[f"{cats[c].per_step_ms:.3f} ({_share(cats[c].share)})" if c in cats else "-" for c in shown],
                f"{p.norm.per_step_ms:.3f} ({_share(p.norm.span_share)})",
                f"{_share(p.norm.kernel_share)} / {_share(p.norm.launch_share)}",
            ]
        )
    ph.lines.append(f"categories: {b.categories_heuristic}")
    if b.idle.causes:
        ph.lines.append(
            f"idle ({b.scope}), by what the host was doing: "
            + ", ".join(
                f"{r.name.removeprefix(IDLE_PREFIX)} {_ms(r.charged_us)} ms ({_share(r.share)})" for r in b.idle.causes
            )
        )
    if b.training:
        ph.lines.append(
            "training steps ("
            + ", ".join(f"{t.phase} {t.per_step_ms:.3f} ms ({_share(t.share)})" for t in b.training)
            + " per step): no decode or tokens/s figures; backward kernels count for the block they differentiate"
        )
    o = b.outside_steps
    if b.steps_from in ("ProfilerStep", "iteration"):
        what = (
            "the ProfilerStep frames"
            if b.steps_from == "ProfilerStep"
            else f"a serving loop's iterations, from {b.steps_rule or 'the trace'}, cut on the device timeline"
        )
        ph.lines.append(
            f"steps are {what}; outside every step: {_ms(o.us)} ms, {o.ops:,} device ops"
            + (f", {o.empty_frames} frame(s) without device ops" if o.empty_frames else "")
        )
    norm = next((p.norm for p in b.phases if p.phase == b.scope), None)
    if norm is not None:
        ph.lines.append(
            f"norm-related ({b.scope}): {norm.ops:,} ops, {_ms(norm.total_us)} ms = {_ms(norm.kernel_us)} kernel "
            f"+ {_ms(norm.launch_us)} {norm.launch_source}"
        )
    out.append(ph)
    out.append(_row_table(f"op types ({b.scope})", b.by_op_type, per))
    if b.by_layer:
        out.append(_row_table(f"layers ({b.scope})", b.by_layer, per))
    out.append(_row_table(f"bound ({b.scope})", b.by_bound, per))
    idle = Section(
        f"idle ({b.scope}): host-dispatch wait, by the op waited for",
        ["op waited for", "gaps", "wait ms", per, "share"],
        numeric={1, 2, 3, 4},
    )
    for r in b.idle.waited_for:
        idle.rows.append([r.name, f"{r.count:,}", _ms(r.charged_us), f"{r.per_step_ms:.3f}", _share(r.share)])
    idle.lines = [
        f"host-dispatch wait {_ms(b.idle.host_wait_us)} ms, other gaps {_ms(b.idle.other_gap_us)} ms, step lead-in "
        f"and sync {_ms(b.idle.frame_us)} ms ({b.idle.classified_by})"
    ]
    out.append(idle)
    wi = Section(
        "what-if", ["after", "rules on", "span ms", "TTFT ms", "ms/token", "saved ms", "notes"], numeric={2, 3, 4, 5}
    )
    wi.lines.append(
        f"not estimated: {w.assumption}"
        if w.method == "none"
        else f"{w.method}: {_ms(w.span_us)} ms -> {_ms(w.span_after_us)} ms, saving {_ms(w.total_saving_us)} ms "
        f"({_share(w.saving_share)})"
        + (
            f"; decode {w.decode_ms_per_token_before:.3f} -> {w.decode_ms_per_token_after:.3f} ms/token"
            if w.decode_ms_per_token_before is not None and w.decode_ms_per_token_after is not None
            else ""
        )
    )
    for s in w.steps:
        wi.rows.append(
            [
                ", ".join(s.kinds),
                ", ".join(s.rules),
                _ms(s.span_us),
                "-" if s.ttft_ms is None else f"{s.ttft_ms:.3f}",
                "-" if s.decode_ms_per_token is None else f"{s.decode_ms_per_token:.3f}",
                _ms(s.saving_us),
                "; ".join(s.notes),
            ]
        )
    out.append(wi)
    if report.numerics is not None:
        out.append(numerics_section(report.numerics))
    out.append(Section("assumptions", lines=[f"- {a}" for a in report.assumptions]))
    if report.notes:
        out.append(Section("notes", lines=[f"- {n}" for n in report.notes]))
    out.append(Section("next", lines=list(report.next_commands)))
    return out


def render_analysis(report: AnalysisReport, console: Console) -> None:
    render_sections(sections(report), console)


def analysis_markdown(report: AnalysisReport) -> str:
    return sections_markdown(sections(report), "atbprof analyze")


def analysis_json(report: AnalysisReport) -> dict[str, Any]:
    """The documented JSON contract (the result's to_dict)."""
    return report.to_dict()


def numerics_section(n: NumericsReport) -> Section:
    """The run's numerics (atbprof run --numerics): one row per fused op type and phase."""
    sub = n.subset
    sec = Section(
        "numerics (fused kernels vs the unfused ops they replaced)",
        headers=["phase", "fused op type", "rule", "max abs", "max rel", "ULP p99/max", "NaN/Inf", "verdict"],
        numeric={3, 4, 5, 6},
    )
    for k in n.kernels:
        s = k.fused_vs_unfused
        bad = k.fused_vs_ref.nan + k.fused_vs_ref.inf + k.stats_nonfinite
        errs = [f"{s.max_abs_err:.2e}", f"{s.max_rel_err:.2e}", f"{s.ulp_p99:g}/{s.ulp_max}"]
        sec.rows.append([k.phase, k.op_type, k.rule, *errs, str(bad), k.verdict])
    sec.lines = [
        f"subset: layers {','.join(map(str, sub.layers))}, prompt {sub.prompt_len} of {sub.run_prompt_len}, "
        f"{sub.query_rows} query rows, {sub.decode_steps} decode step(s), {sub.dtype}, weights {sub.weights}",
        "rules: " + ", ".join(f"{r} {v}" for r, v in n.rules.items()),
        n.tolerance_rule,
    ]
    return sec


def _saving(saving_us: float | None, own_us: float) -> str:
    """The estimated saving; when it exceeds the chain's own time and wait, why, on the same line."""
    if saving_us is None:
        return "-"
    text = _ms(saving_us)
    if saving_us > own_us * 1.001:
        text += " (more than its time + wait: the fusion also removes host launches that later ops waited for)"
    return text
