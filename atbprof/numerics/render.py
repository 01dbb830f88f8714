"""The numerics section of `atbprof run` and `atbprof analyze` (rich); its JSON twin is the report itself."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from atbprof.numerics.report import NumericsReport

STYLE = {"aligned": "green", "degraded": "yellow", "broken": "bold red"}


def _v(verdict: str) -> str:
    return f"[{STYLE[verdict]}]{verdict}[/{STYLE[verdict]}]"


def render_numerics(report: NumericsReport, console: Console) -> None:
    sub = report.subset
    rows = f"{sub.query_rows} of {sub.prompt_len} prefill rows" if sub.query_rows < sub.prompt_len else "all rows"
    capped = f" (capped from {sub.run_prompt_len})" if sub.prompt_len < sub.run_prompt_len else ""
    console.print(
        f"[bold]numerics[/bold] ({sub.dtype}, weights {sub.weights}): layers {','.join(map(str, sub.layers))}, "
        f"prompt {sub.prompt_len}{capped}, {rows}, {sub.decode_steps} decode step(s), batch {sub.batch}"
    )
    t = Table(title="fused kernels vs the unfused ops they replaced (same inputs)", title_justify="left")
    for col in ("phase", "fused op type", "rule", "max abs", "max rel", "ULP p99/max", "vs fp64 (unfused)", "NaN/Inf"):
        text = col in ("phase", "fused op type", "rule")
        t.add_column(col, justify="left" if text else "right", no_wrap=not text)
    t.add_column("verdict")
    for k in report.kernels:
        s, f, u = k.fused_vs_unfused, k.fused_vs_ref, k.unfused_vs_ref
        bad = f.nan + f.inf + k.stats_nonfinite
        t.add_row(
            k.phase,
            k.op_type,
            k.rule,
            f"{s.max_abs_err:.2e}",
            f"{s.max_rel_err:.2e}",
            f"{s.ulp_p99:g}/{s.ulp_max}",
            f"{f.scaled_err:.1e} ({u.scaled_err:.1e})",
            str(bad),
            _v(k.verdict),
        )
    console.print(t)
    if report.layers:
        lt = Table(title="whole layer output vs float64", title_justify="left")
        for col in ("phase", "layer", "fused", "unfused", "fused vs unfused max abs", "NaN/Inf"):
            lt.add_column(col, justify="left" if col == "phase" else "right", no_wrap=col != "phase")
        lt.add_column("verdict")
        for row in report.layers:
            f = row.fused_vs_ref
            lt.add_row(
                row.phase,
                str(row.layer),
                f"{f.scaled_err:.1e}",
                f"{row.unfused_vs_ref.scaled_err:.1e}",
                f"{row.fused_vs_unfused.max_abs_err:.2e}",
                str(f.nan + f.inf),
                _v(row.verdict),
            )
        console.print(lt)
    console.print("rules: " + ", ".join(f"{r} {_v(v)}" for r, v in report.rules.items()))
    console.print(f"[dim]{report.tolerance_rule}; errors scaled by max(|ref|, rms(ref))[/dim]")
    if not report.finite:
        console.print("[bold red]the fused execution produced NaN/Inf[/bold red]")
    for note in report.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
