"""The figures of a finished sweep: its lines, the compared gain with the claims drawn on, the grid of what fits."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from atbprof.plots.base import Plot

if TYPE_CHECKING:
    import pyarrow as pa

    from atbprof.sweep.report import SweepReport
    from atbprof.sweep.spec import SweepSpec


def sweep_plots(spec: SweepSpec, report: SweepReport, table: pa.Table) -> list[Plot]:
    from atbprof.plots.sweep_data import sweep_rows
    from atbprof.plots.sweep_gain import sweep_gain_plot
    from atbprof.plots.sweep_grid import sweep_grid_plot
    from atbprof.plots.sweep_lines import sweep_lines_plot

    rows = sweep_rows(spec.swept_keys(), {a.key: a.values for a in spec.axes}, table)
    compare = spec.compare
    gains = [g.model_dump() for g in report.gains] if compare else None
    serving = "serving.tpot_ms.p99" in table.column_names
    # a serving sweep's figures are its serving.* columns (the batch lines would be empty)
    plots: list[Plot | None] = [] if serving else [sweep_lines_plot(rows, spec.name)]
    if compare is not None and gains:
        what = f"{compare.figure}, {compare.axis} {compare.base} -> {compare.new}"
        claims = [c.model_dump() for c in report.claims]
        plots.append(sweep_gain_plot(gains, claims, spec.swept_keys(), compare.axis, what, spec.name))
    plots.append(sweep_grid_plot(rows, spec.name, gains, compare.axis if compare else None))
    if serving and "workload.rate_qps" in spec.swept_keys():
        plots.append(_rate_plot(spec, table))
    return [p for p in plots if p is not None]


def _rate_plot(spec: SweepSpec, table: pa.Table) -> Plot | None:
    """A serving sweep over the request rate: one curve per combination of the other swept keys."""
    from atbprof.plots.serving import rate_sweep_plot
    from atbprof.plots.sweep_data import label_of

    others = [k for k in spec.swept_keys() if k != "workload.rate_qps"]
    cols = ["serving.ttft_ms.p99", "serving.tpot_ms.p99", "serving.output_tokens_per_s"]
    values = {c: table.column(c).to_pylist() for c in cols}
    series: dict[str, list[list[Any]]] = {}
    for i, point in enumerate(table.column("point").to_pylist()):
        p = spec.points[point]
        if not isinstance(p.get("workload.rate_qps"), int | float):
            continue
        label = ", ".join(label_of(k, p.get(k)) for k in others) or spec.name
        series.setdefault(label, []).append([p.get("workload.rate_qps"), *(values[c][i] for c in cols)])
    rows = [{"label": k, "points": sorted(v, key=lambda q: q[0])} for k, v in series.items()]
    return rate_sweep_plot(rows, spec.name)
