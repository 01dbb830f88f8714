"""The figures of a typed target (atbprof/target.py): drawn from what was read, never by reading or analysing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from atbprof.plots.base import Plot

if TYPE_CHECKING:
    import pyarrow as pa

    from atbprof.target import ClusterTarget, DiffTarget, ProfileTarget, RunTarget, ServingTarget, Target


def figures(target: Target) -> list[Plot]:
    if target.kind == "run":
        return _run(target)
    if target.kind == "diff":
        return _diff(target)
    if target.kind == "cluster":
        return _cluster(target)
    if target.kind == "sweep":
        from atbprof.plots.sweep_figures import sweep_plots

        r = target.result
        return sweep_plots(r.spec, r.report, r.table)
    from atbprof.target import ServingTarget

    if isinstance(target, ServingTarget):
        return _serving(target)
    return _profile(target)


def _serving(t: ServingTarget) -> list[Plot]:
    from atbprof.plots.serving import latency_cdf_plot

    def ms(table: pa.Table, column: str) -> Any:
        return table.column(column).to_numpy(zero_copy_only=False)

    sides = [(s.name, ms(s.requests, "ttft_ms"), ms(s.requests, "tpot_ms")) for s in t.sides]
    return [latency_cdf_plot(sides, t.name)]


def run_breakdown_side(doc: dict[str, Any], label: str | None = None) -> dict[str, Any]:
    s = doc["summary"]
    return {
        "label": label or str(doc.get("name", "run")),
        "rows": s["breakdown_ms_per_token"],
        "norm_ms": s.get("norm_ms_per_token"),
    }


def _steps_plot(steps: pa.Table, label: str) -> Plot:
    from atbprof.plots.step_latency import step_latency_plot

    wall = (steps.column("sync_end_ns").to_numpy() - steps.column("host_start_ns").to_numpy()) / 1e6
    return step_latency_plot(steps.column("step").to_pylist(), wall, steps.column("phase").to_pylist(), label)


def _run(t: RunTarget) -> list[Plot]:
    from atbprof.device.spec import DeviceSpec
    from atbprof.plots.breakdown import breakdown_plot
    from atbprof.plots.roofline import roofline_plot

    plots = [breakdown_plot([run_breakdown_side(t.doc)], f"Decode latency per token: {t.name}")]
    if t.steps is not None:
        plots.append(_steps_plot(t.steps, t.name))
    device = DeviceSpec.model_validate(t.doc["device"])
    plots.append(roofline_plot(t.op_groups, device.peak_flops, device.hbm_bytes_per_s, device.name))
    return plots


def _diff(t: DiffTarget) -> list[Plot]:
    from atbprof.plots.breakdown import breakdown_plot
    from atbprof.plots.waterfall import waterfall_plot

    report = t.report
    plots: list[Plot] = []
    if t.run_docs is not None:
        a, b = t.run_docs
        plots.append(breakdown_plot([run_breakdown_side(a), run_breakdown_side(b)], "Decode latency per token"))
    else:
        sides = [
            {"label": report.base.name, "rows": {c.name: c.base_ms for c in report.categories}, "norm_ms": None},
            {"label": report.new.name, "rows": {c.name: c.new_ms for c in report.categories}, "norm_ms": None},
        ]
        plots.append(breakdown_plot(sides, "Time per step by category", "ms per step (per token in decode)"))
    base_ms = sum(r.base_us for r in report.rows) / 1e3
    new_ms = sum(r.new_us for r in report.rows) / 1e3
    rows = [{"name": r.name, "classification": r.classification, "delta_ms": r.delta_us / 1e3} for r in report.rows]
    plots.append(waterfall_plot(report.base.name, report.new.name, base_ms, new_ms, rows))
    return plots


def _cluster(t: ClusterTarget) -> list[Plot]:
    from atbprof.analyze.cluster_report import link_bandwidths
    from atbprof.plots.cluster_matrix import cluster_matrix_plot
    from atbprof.plots.cluster_steps import cluster_steps_plot

    report = t.report
    plots = [cluster_steps_plot([r.model_dump() for r in report.cluster.ranks], t.name)]
    matrix = cluster_matrix_plot(link_bandwidths(report.communication.matrix), t.name)
    if matrix is not None:
        plots.append(matrix)
    return plots


def _profile(t: ProfileTarget) -> list[Plot]:
    from atbprof.plots.breakdown import breakdown_plot

    b = t.report.breakdown
    phase = next((p for p in b.phases if p.phase == b.scope), b.phases[0] if b.phases else None)
    if phase is None or not phase.categories:
        return []
    side = {"label": f"{t.name} ({phase.phase} steps)", "rows": {c.name: c.per_step_ms for c in phase.categories}}
    return [breakdown_plot([side], "Time per step by category", "ms per step")]
