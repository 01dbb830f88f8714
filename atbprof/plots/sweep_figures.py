"""The figures of a finished sweep: its lines, the compared gain with the claims drawn on, the grid of what fits."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    plots: list[Plot | None] = [sweep_lines_plot(rows, spec.name)]
    if compare is not None and gains:
        what = f"{compare.figure}, {compare.axis} {compare.base} -> {compare.new}"
        claims = [c.model_dump() for c in report.claims]
        plots.append(sweep_gain_plot(gains, claims, spec.swept_keys(), compare.axis, what, spec.name))
    plots.append(sweep_grid_plot(rows, spec.name, gains, compare.axis if compare else None))
    return [p for p in plots if p is not None]
