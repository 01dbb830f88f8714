"""Export a run directory in the layouts Ascend tools read: torch_npu's `*_ascend_pt` or native msprof's `PROF_*`.

    from atbprof.export import export_run
    result = export_run(Path("traces/tiny-llama"), "ascend-pt", Path("exports"))

The export is streamed from ops.parquet (memory stays flat), written into a temp directory beside the target and
renamed into place (nothing half-written), never touches the run directory, and is byte-identical for the same run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from atbprof.errors import InputError, OutputExistsError, UsageError
from atbprof.export import ascend_pt, msprof
from atbprof.export.common import load_run
from atbprof.export.selection import TimelineSlice, TraceChoice, export_selection
from atbprof.outputs import MARKER, check_output_dir, staged_dir
from atbprof.writers.selection import parse_ranges

ExportTarget = Literal["ascend-pt", "msprof"]
TARGETS: tuple[ExportTarget, ...] = ("ascend-pt", "msprof")


@dataclass(frozen=True)
class ExportResult:
    target: ExportTarget
    root: Path  # the directory written: <out>/<worker>_<time>_ascend_pt or <out>/PROF_...
    files: tuple[Path, ...]  # every file written, sorted
    op_rows: int  # rows of kernel_details.csv / op_summary_*.csv (= ops.parquet rows)
    steps: int  # rows of step_trace_time.csv / ProfilerStep markers
    trace_events: int  # events in trace_view.json / msprof_*.json
    note: str | None = None  # what the timeline covers when it is not the whole run


def export_run(
    run_dir: Path,
    to: ExportTarget,
    out: Path,
    force: bool = False,
    trace: TraceChoice | None = None,
    kernel_ranks: str | None = None,
) -> ExportResult:
    """Write the run in `run_dir` as a `to` profile directory under `out`; the timeline JSON keeps the steps and
    layers `trace` (else the run's own output settings) choose, within the trace size cap.

    Raises InputError (missing / damaged run directory, unknown target, --out overlapping the run) and
    OutputExistsError (the target exists and `force` is False, or it is not an export atbprof wrote).
    """
    if to not in TARGETS:
        raise InputError(f"unknown export format {to!r}: use one of {', '.join(TARGETS)}")
    source = load_run(Path(run_dir))
    if source.devices > 1 and to == "msprof":
        raise InputError(
            f"{run_dir}: a {source.devices}-device run; --to msprof writes one device's PROF_ directory: export it "
            "--to ascend-pt (one *_ascend_pt directory per rank, msprof-analyze's cluster input)"
        )
    layout = ascend_pt if to == "ascend-pt" else msprof
    kernels = _kernel_ranks(kernel_ranks, source.devices, to)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"{out} exists and is not a directory; give --out a directory")
    root = out / layout.dir_name(source)
    target = check_output_dir(root, "export", force=force, inputs=[source.run_dir])
    selection = export_selection(source, to, trace or TraceChoice())
    with staged_dir(target, "export", lambda: check_output_dir(root, "export", force=force)) as tmp:
        if kernels is None:
            rows, events = layout.write(source, tmp, TimelineSlice(selection))
        else:
            rows, events = ascend_pt.write(source, tmp, TimelineSlice(selection), kernels)
    files = tuple(sorted(p for p in root.rglob("*") if p.is_file() and p.name != MARKER))
    return ExportResult(to, root, files, rows, source.steps.num_rows, events, selection.describe())


def _kernel_ranks(text: str | None, devices: int, to: str) -> frozenset[int] | None:
    """The ranks of `--kernel-ranks` (None: every rank gets kernel tables)."""
    if text is None:
        return None
    if to != "ascend-pt" or devices < 2:
        raise UsageError("--kernel-ranks: for --to ascend-pt of a multi-device run (the others are partial ranks)")
    ranges = parse_ranges(text, "--kernel-ranks")
    outside = [a for a, b in ranges if a >= devices or (b is not None and b >= devices)]
    if outside:
        raise UsageError(f"--kernel-ranks {text!r}: rank {outside[0]} is not in the run (ranks 0-{devices - 1})")
    return frozenset(r for a, b in ranges for r in range(a, (devices - 1 if b is None else b) + 1))


__all__ = ["TARGETS", "ExportResult", "ExportTarget", "TraceChoice", "export_run"]
