"""What `atbprof plot` and `atbprof report` draw: a target (a run of ours, two inputs to diff, a cluster, a sweep,
or one real profile) read once into its figures, and, for the report, the sections of its terminal view.

Figures come from aggregates only: a run's summary (run.json), its steps table, and its op table grouped per op
type and phase in Arrow (a few columns of ops.parquet), so drawing a run of millions of ops costs about the same
as drawing a small one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from atbprof.errors import InputError
from atbprof.plots.base import Plot

if TYPE_CHECKING:
    import pyarrow as pa

    from atbprof.render.sections import Section

SWEEP_JSON = "sweep.json"


@dataclass
class Target:
    kind: str  # run | diff | cluster | sweep | profile
    name: str
    paths: list[Path]
    plots: list[Plot]
    sections: Callable[[], list[Section]] = field(default=lambda: [])
    """The terminal view's sections (made on demand: the report needs them, the plots do not)."""


def is_sweep_dir(path: Path) -> bool:
    return path.is_dir() and (path / SWEEP_JSON).is_file() and (path / "sweep.parquet").is_file()


def load_target(paths: list[Path], top: int = 10) -> Target:
    """The target of `paths` (one or two), with its figures."""
    from atbprof.importers.cluster import is_cluster
    from atbprof.importers.ours import is_run_dir

    if not paths or len(paths) > 2:
        raise InputError("give one input (a run, a cluster, a sweep, a profile) or two to compare")
    for p in paths:
        if not p.exists():
            raise InputError(f"{p}: no such file or directory; give a run directory, a profile, a cluster or a sweep")
    if len(paths) == 2:
        return _diff_target(paths[0], paths[1], top)
    path = paths[0]
    if is_sweep_dir(path):
        return _sweep_target(path)
    if is_cluster(path):
        return _cluster_target(path, top)
    if is_run_dir(path):
        return _run_target(path, top)
    return _profile_target(path, top)


# -- a run of ours ---------------------------------------------------------------------------------------------
def _run_json(path: Path) -> dict[str, Any]:
    from atbprof.importers.ours import RUN_JSON_MAX_BYTES
    from atbprof.inputs import read_bytes

    try:
        doc = orjson.loads(read_bytes(path / "run.json", RUN_JSON_MAX_BYTES))
    except (OSError, orjson.JSONDecodeError) as err:
        raise InputError(f"{path / 'run.json'}: not a run.json of atbprof ({err}); run `atbprof run` again") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("summary"), dict):
        raise InputError(f"{path / 'run.json'}: no summary; it was not written by `atbprof run`")
    return doc


def run_breakdown_side(doc: dict[str, Any], label: str | None = None) -> dict[str, Any]:
    s = doc["summary"]
    return {
        "label": label or str(doc.get("name", "run")),
        "rows": s["breakdown_ms_per_token"],
        "norm_ms": s.get("norm_ms_per_token"),
    }


def op_groups(ops_path: Path) -> list[dict[str, Any]]:
    """Per op type and phase (rank 0): kernels, FLOPs, HBM bytes and kernel time summed (Arrow group-by)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    cols = ["op_type", "phase", "flops", "hbm_read_bytes", "hbm_write_bytes", "task_dur_ns", "rank"]
    table = pq.read_table(ops_path, columns=cols)
    if table.num_rows and (pc.max(table.column("rank")).as_py() or 0) > 0:
        table = table.filter(pc.equal(table.column("rank"), 0))
    table = table.append_column(
        "bytes", pc.add(table.column("hbm_read_bytes").fill_null(0), table.column("hbm_write_bytes").fill_null(0))
    )
    # grouped on the dictionary codes (no string per row); the few groups are decoded after
    agg = table.group_by(["op_type", "phase"], use_threads=False).aggregate(
        [("flops", "sum"), ("bytes", "sum"), ("task_dur_ns", "sum"), ("task_dur_ns", "count")]
    )
    agg = agg.set_column(agg.schema.get_field_index("op_type"), "op_type", agg.column("op_type").cast("string"))
    agg = agg.set_column(agg.schema.get_field_index("phase"), "phase", agg.column("phase").cast("string"))
    agg = agg.sort_by([("op_type", "ascending"), ("phase", "ascending")])
    return [
        {
            "op_type": r["op_type"],
            "phase": r["phase"] or "",
            "flops": float(r["flops_sum"] or 0),
            "bytes": float(r["bytes_sum"] or 0),
            "time_ns": float(r["task_dur_ns_sum"] or 0),
            "count": int(r["task_dur_ns_count"]),
        }
        for r in agg.to_pylist()
    ]


def _steps_plot(steps: pa.Table, label: str) -> Plot:
    from atbprof.plots.step_latency import step_latency_plot

    wall = (steps.column("sync_end_ns").to_numpy() - steps.column("host_start_ns").to_numpy()) / 1e6
    return step_latency_plot(steps.column("step").to_pylist(), wall, steps.column("phase").to_pylist(), label)


def _run_target(path: Path, top: int) -> Target:
    import pyarrow.parquet as pq

    from atbprof.device.spec import DeviceSpec
    from atbprof.plots.breakdown import breakdown_plot
    from atbprof.plots.roofline import roofline_plot

    doc = _run_json(path)
    name = str(doc.get("name", path.name))
    plots = [breakdown_plot([run_breakdown_side(doc)], f"Decode latency per token: {name}")]
    if (path / "steps.parquet").exists():
        plots.append(_steps_plot(pq.read_table(path / "steps.parquet"), name))
    device = DeviceSpec.model_validate(doc["device"])
    plots.append(roofline_plot(op_groups(path / "ops.parquet"), device.peak_flops, device.hbm_bytes_per_s, device.name))

    def sections() -> list[Section]:
        from atbprof.analyze import analyze
        from atbprof.importers.ours import load_run
        from atbprof.render.analyze import sections as analysis_sections

        return [_run_section(doc), *analysis_sections(analyze(load_run(path), top=top))]

    return Target("run", name, [path], plots, sections)


def _run_section(doc: dict[str, Any]) -> Section:
    from atbprof.render.sections import Section

    s = doc["summary"]
    cfg = doc.get("config", {})
    rows = [
        ["model", str((cfg.get("model") or {}).get("preset") or "")],
        ["device", str(doc.get("device", {}).get("name", ""))],
        ["mode", str((cfg.get("execution") or {}).get("mode", ""))],
        ["fusion", str((cfg.get("fusion") or {}).get("strategy", ""))],
        ["decode ms per token", f"{s['decode_ms_per_token']:,.3f}"],
        ["TTFT ms", f"{s['ttft_ms']:,.3f}"],
        ["tokens/s", f"{s['tokens_per_s']:,.1f}"],
        ["norm-related ms per token", f"{s['norm_ms_per_token']:,.3f}"],
        ["HBM floor ms per token", f"{s['hbm_floor_ms_per_token']:,.3f}"],
        ["kernels per decode step", str(s["ops_per_decode_step"])],
    ]
    return Section("run", headers=["", ""], rows=rows, numeric={1})


# -- two inputs: a diff ------------------------------------------------------------------------------------------
def _diff_target(base: Path, new: Path, top: int) -> Target:
    from atbprof.diff.api import diff_paths
    from atbprof.importers.cluster import is_cluster
    from atbprof.importers.ours import is_run_dir
    from atbprof.plots.breakdown import breakdown_plot
    from atbprof.plots.waterfall import waterfall_plot

    if is_cluster(base) or is_cluster(new) or is_sweep_dir(base) or is_sweep_dir(new):
        raise InputError(
            f"{base} and {new}: plot and report compare two runs or profiles; draw a cluster or a sweep on its own"
        )
    report = diff_paths(base, new, top=1_000).report
    plots: list[Plot] = []
    if is_run_dir(base) and is_run_dir(new):
        a, b = _run_json(base), _run_json(new)
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

    def sections() -> list[Section]:
        from atbprof.render.diff import sections as diff_sections

        shown = report.model_copy(update={"rows": report.rows[:top]})
        return diff_sections(shown)

    return Target("diff", f"{report.base.name} vs {report.new.name}", [base, new], plots, sections)


# -- a cluster ---------------------------------------------------------------------------------------------------
def _cluster_target(path: Path, top: int) -> Target:
    from atbprof.analyze.cluster_job import analyze_cluster_path
    from atbprof.analyze.cluster_report import link_bandwidths
    from atbprof.plots.cluster_matrix import cluster_matrix_plot
    from atbprof.plots.cluster_steps import cluster_steps_plot

    report = analyze_cluster_path(path, top=top)
    name = path.name
    plots = [cluster_steps_plot([r.model_dump() for r in report.cluster.ranks], name)]
    matrix = cluster_matrix_plot(link_bandwidths(report.communication.matrix), name)
    if matrix is not None:
        plots.append(matrix)

    def sections() -> list[Section]:
        from atbprof.render.cluster import sections as cluster_sections

        return cluster_sections(report, top)

    return Target("cluster", name, [path], plots, sections)


# -- a sweep -----------------------------------------------------------------------------------------------------
def _sweep_target(path: Path) -> Target:
    from atbprof.sweep.api import read_sweep

    done = read_sweep(path)

    def sections() -> list[Section]:
        from atbprof.render.sweep import sections as sweep_sections

        return sweep_sections(done.report)

    return Target("sweep", done.report.name, [path], sweep_plots(done), sections)


def sweep_plots(done: Any) -> list[Plot]:
    """The figures of a finished sweep (sweep/api.py SweepResult): lines, the compared gain, the grid."""
    from atbprof.plots.sweep_data import sweep_rows
    from atbprof.plots.sweep_gain import sweep_gain_plot
    from atbprof.plots.sweep_grid import sweep_grid_plot
    from atbprof.plots.sweep_lines import sweep_lines_plot

    spec, report = done.spec, done.report
    rows = sweep_rows(spec.swept_keys(), {a.key: a.values for a in spec.axes}, done.table)
    compare = spec.compare
    gains = [g.model_dump() for g in report.gains] if compare else None
    plots: list[Plot | None] = [sweep_lines_plot(rows, spec.name)]
    if compare is not None and gains:
        what = f"{compare.figure}, {compare.axis} {compare.base} -> {compare.new}"
        claims = [c.model_dump() for c in report.claims]
        plots.append(sweep_gain_plot(gains, claims, spec.swept_keys(), compare.axis, what, spec.name))
    plots.append(sweep_grid_plot(rows, spec.name, gains, compare.axis if compare else None))
    return [p for p in plots if p is not None]


# -- one real profile --------------------------------------------------------------------------------------------
def _profile_target(path: Path, top: int) -> Target:
    from atbprof.analyze import analyze
    from atbprof.importers.detect import load_profile
    from atbprof.plots.breakdown import breakdown_plot

    report = analyze(load_profile(path), top=top)
    b = report.breakdown
    phase = next((p for p in b.phases if p.phase == b.scope), b.phases[0] if b.phases else None)
    plots = []
    if phase is not None and phase.categories:
        side = {
            "label": f"{path.name} ({phase.phase} steps)",
            "rows": {c.name: c.per_step_ms for c in phase.categories},
        }
        plots.append(breakdown_plot([side], "Time per step by category", "ms per step"))

    def sections() -> list[Section]:
        from atbprof.render.analyze import sections as analysis_sections

        return analysis_sections(report)

    return Target("profile", path.name, [path], plots, sections)
