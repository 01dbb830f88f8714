"""What a path holds, decided in one place: a run of ours, two inputs to compare, a cluster, a sweep or one real
profile, read into a typed result. `plot`, `report` and the Python API (`atbprof.load_target`) start here; the
figures (plots/figures.py) and pages (render/html.py) only consume what this returns.

A run is read from aggregates only (run.json, its steps table, its op table grouped per op type and phase in Arrow),
so drawing a run of millions of ops costs about what drawing a small one does."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from atbprof.errors import InputError

if TYPE_CHECKING:
    import pyarrow as pa

    from atbprof.analyze.cluster_report import ClusterReport
    from atbprof.analyze.report import AnalysisReport
    from atbprof.diff.report import DiffReport
    from atbprof.diff.serving_report import ServingDiff
    from atbprof.serving.summary import ServingSummary
    from atbprof.sweep.report import SweepResult

Kind = Literal["run", "diff", "cluster", "sweep", "profile", "serving", "serving-diff"]


@dataclass(frozen=True)
class _OnePath:
    path: Path

    @property
    def paths(self) -> list[Path]:
        return [self.path]


@dataclass(frozen=True)
class RunTarget(_OnePath):
    """A run directory of ours: run.json, its steps and its op table's per-type aggregates (rank 0)."""

    name: str
    doc: dict[str, Any]
    steps: pa.Table | None
    op_groups: list[dict[str, Any]]
    top: int = 10
    kind: Literal["run"] = "run"

    def analysis(self) -> AnalysisReport:
        """The run analysed as a profile (for the report's tables; the figures do not need it)."""
        from atbprof.analyze.api import analyze
        from atbprof.importers.ours import load_run

        return analyze(load_run(self.path), top=self.top)


@dataclass(frozen=True)
class DiffTarget:
    base: Path
    new: Path
    report: DiffReport
    run_docs: tuple[dict[str, Any], dict[str, Any]] | None
    """Both run.json documents when both sides are runs of ours (their per-token breakdowns are drawn)."""
    top: int = 10
    kind: Literal["diff"] = "diff"

    @property
    def name(self) -> str:
        return f"{self.report.base.name}-vs-{self.report.new.name}"

    @property
    def paths(self) -> list[Path]:
        return [self.base, self.new]


@dataclass(frozen=True)
class ClusterTarget(_OnePath):
    report: ClusterReport
    top: int = 10
    kind: Literal["cluster"] = "cluster"

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class SweepTarget(_OnePath):
    result: SweepResult
    kind: Literal["sweep"] = "sweep"

    @property
    def name(self) -> str:
        return self.result.report.name


@dataclass(frozen=True)
class ProfileTarget(_OnePath):
    report: AnalysisReport
    kind: Literal["profile"] = "profile"

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class ServingSide:
    """One serving run: its summary and its per-request latencies (the iterations are not drawn)."""

    path: Path
    name: str
    summary: ServingSummary
    requests: pa.Table


@dataclass(frozen=True)
class ServingTarget:
    """A serving run (`workload.kind: serving`), or two of them compared (`diff` set)."""

    sides: tuple[ServingSide, ...]
    diff: ServingDiff | None = None

    @property
    def kind(self) -> Literal["serving", "serving-diff"]:
        return "serving" if self.diff is None else "serving-diff"

    @property
    def name(self) -> str:
        return "-vs-".join(s.name for s in self.sides)

    @property
    def paths(self) -> list[Path]:
        return [s.path for s in self.sides]


Target = RunTarget | DiffTarget | ClusterTarget | SweepTarget | ProfileTarget | ServingTarget


def path_kind(path: Path) -> Kind:
    """What one existing path holds (cheap: names and markers, nothing parsed)."""
    from atbprof.diff.serving import is_serving_run
    from atbprof.importers.cluster import is_cluster
    from atbprof.importers.ours import is_run_dir
    from atbprof.sweep.report import is_sweep_dir

    if is_sweep_dir(path):
        return "sweep"
    if is_serving_run(path):
        return "serving"
    if is_cluster(path):
        return "cluster"
    if is_run_dir(path):
        return "run"
    return "profile"


def load_target(paths: list[Path], top: int = 10) -> Target:
    """The typed target of `paths`: one input (a run, a cluster, a sweep, a profile) or two to compare."""
    paths = [Path(p) for p in paths]
    if not paths or len(paths) > 2:
        raise InputError("give one input (a run, a cluster, a sweep, a profile) or two to compare")
    for p in paths:
        if not p.exists():
            raise InputError(f"{p}: no such file or directory; give a run directory, a profile, a cluster or a sweep")
    kinds = [path_kind(p) for p in paths]
    if "serving" in kinds:
        return _serving_target(paths)
    if len(paths) == 2:
        return _diff_target(paths[0], paths[1], top)
    path = paths[0]
    kind = kinds[0]
    if kind == "sweep":
        from atbprof.sweep.api import read_sweep

        return SweepTarget(path, read_sweep(path))
    if kind == "cluster":
        from atbprof.analyze.cluster_job import analyze_cluster_path

        return ClusterTarget(path, analyze_cluster_path(path, top=top), top)
    if kind == "run":
        return _run_target(path, top)
    from atbprof.analyze.api import analyze
    from atbprof.importers.detect import load_profile

    return ProfileTarget(path, analyze(load_profile(path), top=top))


def read_run_json(path: Path) -> dict[str, Any]:
    """A run directory's run.json, checked to be one of ours with a summary (importers/run_doc.py)."""
    from atbprof.importers.run_doc import read_run_doc

    if not (path / "run.json").is_file():
        raise InputError(f"{path / 'run.json'}: no such file; it was not written by `atbprof run`")
    doc = read_run_doc(path / "run.json")
    if not isinstance(doc.get("summary"), dict):
        raise InputError(f"{path / 'run.json'}: no summary; it was not written by `atbprof run`")
    return doc


def op_groups(ops_path: Path) -> list[dict[str, Any]]:
    """Per op type and phase (rank 0): kernels, FLOPs, HBM bytes and kernel time summed (Arrow group-by)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from atbprof.optable.schema import check_times, ops_metadata, verify_pages

    schema = ops_metadata(ops_path).schema.to_arrow_schema()  # a Parquet file of our op schema, else a refusal
    cols = ["op_type", "phase", "flops", "hbm_read_bytes", "hbm_write_bytes", "task_start_ns", "task_dur_ns", "rank"]
    try:
        table = pq.read_table(ops_path, columns=cols, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"{ops_path}: damaged ({err}); re-create the run with `atbprof run`") from None
    check_times(table, str(ops_path), need_rows=False)
    verify_pages(ops_path, [c for c in schema.names if c not in cols])
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


def _run_target(path: Path, top: int) -> RunTarget:

    from atbprof.optable.schema import read_steps

    doc = read_run_json(path)
    steps = read_steps(path / "steps.parquet") if (path / "steps.parquet").exists() else None
    return RunTarget(path, str(doc.get("name", path.name)), doc, steps, op_groups(path / "ops.parquet"), top)


def _serving_target(paths: list[Path]) -> ServingTarget:
    from atbprof.diff.serving import diff_serving_paths, read_serving_run

    sides = []
    for p in paths:
        requests, summary = read_serving_run(p)
        sides.append(ServingSide(p, p.name, summary, requests))
    diff = diff_serving_paths(paths[0], paths[1]) if len(paths) == 2 else None
    return ServingTarget(tuple(sides), diff)


def _diff_target(base: Path, new: Path, top: int) -> DiffTarget:
    from atbprof.diff.api import diff_paths

    kinds = (path_kind(base), path_kind(new))
    if {"cluster", "sweep"} & set(kinds):
        raise InputError(
            f"{base} and {new}: plot and report compare two runs or profiles; draw a cluster or a sweep on its own"
        )
    report = diff_paths(base, new, top=1_000).report
    docs = (read_run_json(base), read_run_json(new)) if kinds == ("run", "run") else None
    return DiffTarget(base, new, report, docs, top)
