"""`--to msprof`: the directory native msprof (CANN) writes, in msprof's vocabulary.

    PROF_000001_<17-digit time>_<16 letters>/
    └── mindstudio_profiler_output/
        ├── op_summary_<14-digit time>.csv     Op Name, OP Type, Task Type, Task Start Time(us), ... (= op rows)
        ├── op_statistic_<time>.csv            per OP Type and core type
        ├── task_time_<time>.csv               one row per device task, start/stop in absolute µs
        ├── msprof_<time>.json                 CANN, Ascend Hardware, AI Core Freq, Overlap Analysis
        └── README.txt                         what is here and where it came from

The file times are the run's end on the fixed export clock (common.EPOCH_BASE_NS).
"""

from __future__ import annotations

import json
from pathlib import Path

from atbprof.export.ascend_pt import provenance, run_end_ns, streams_of
from atbprof.export.common import RunSource, text_bytes, wall_clock
from atbprof.export.selection import TimelineSlice
from atbprof.export.tables import (
    OP_COLUMNS,
    OP_SUMMARY_BASE,
    TASK_TIME_HEADER,
    OpCells,
    OpStatistic,
    op_summary_lines,
    task_time_lines,
)
from atbprof.export.timeline import BusyTracker, TraceWriter

OUTPUT_DIR = "mindstudio_profiler_output"


def dir_name(source: RunSource) -> str:
    return f"PROF_000001_{wall_clock(0, 17)}_{source.letters(16)}"


def _readme(source: RunSource, stamp: str) -> str:
    facts = json.dumps(provenance(source), indent=2, sort_keys=True)
    return f"""atbprof export of a SIMULATED run, laid out like msprof's output (not a capture from real hardware).

op_summary_{stamp}.csv    one row per device task: Op Name, OP Type, Task Type, Task Start Time(us) (absolute epoch
                           µs, ends with a TAB like msprof writes), Task Duration(us), Task Wait Time(us), Block Dim,
                           shapes / data types / formats, PipeUtilization PMU columns
op_statistic_{stamp}.csv  count and total / min / avg / max time per OP Type and core type
task_time_{stamp}.csv     one row per device task with start and stop time
msprof_{stamp}.json       timeline (Chrome trace JSON array): CANN launches, Ascend Hardware tasks per stream,
                           HostToDevice flows, Overlap Analysis (Computing / Free), AI Core Freq

Read it with msprof-analyze (e.g. `msprof-analyze advisor all -d <this PROF_ directory>`) or MindStudio
Insight. Times: run time 0 is mapped to 2025-01-01T00:00:00Z.

{facts}
"""


def write(source: RunSource, root: Path, timeline: TimelineSlice) -> tuple[int, int]:
    """Write the export into `root` (an empty directory), the timeline only of `timeline`'s ops; returns (op rows,
    trace events)."""
    out = root / OUTPUT_DIR
    out.mkdir()
    stamp = wall_clock(run_end_ns(source), 14)
    cells, stats, tracker = OpCells(source), OpStatistic(), BusyTracker()
    summary_path, task_path = out / f"op_summary_{stamp}.csv", out / f"task_time_{stamp}.csv"
    with (
        open(summary_path, "wb") as summary,
        open(task_path, "wb") as tasks,
        open(out / f"msprof_{stamp}.json", "wb") as trace_fh,
    ):
        summary.write((",".join((*OP_SUMMARY_BASE, *cells.pmu_header)) + "\n").encode())
        tasks.write((TASK_TIME_HEADER + "\n").encode())
        trace = TraceWriter(trace_fh, source, "msprof")
        trace.open(streams_of(source), timeline.steps(source.steps))
        for b, busy in tracker.batches(source, ("op_index", *OP_COLUMNS)):
            summary.write(text_bytes(op_summary_lines(cells, b)))
            tasks.write(text_bytes(task_time_lines(b)))
            trace.write_batch(*timeline.batch(b, busy))
            stats.add(b)
        trace.close(timeline.closing_tracker(tracker))
    (out / f"op_statistic_{stamp}.csv").write_text(stats.csv())
    (out / "README.txt").write_text(_readme(source, stamp))
    return source.ops_rows, trace.events
