"""`--to ascend-pt`: the directory torch_npu's profiler writes (Ascend PyTorch Profiler, CANN 8.3.RC1 text export).

    <worker>_<17-digit time>_ascend_pt/        worker = <host>_<pid>, here <run name>_<fixed pid>
    ├── profiler_info_0.json                   profiler configuration (Level1, PipeUtilization), CANN/torch versions
    ├── profiler_metadata.json                 environment + an "atbprof" entry: where this profile came from
    └── ASCEND_PROFILER_OUTPUT/
        ├── kernel_details.csv                 one row per device task (= ops.parquet rows)
        ├── op_statistic.csv                   per OP Type and core type
        ├── step_trace_time.csv                per step: Computing / Free / Stage / Preparing (µs)
        └── trace_view.json                    Python (ProfilerStep#N, cpu_op per call), CANN, Ascend Hardware, ...

msprof-analyze reads it (`msprof-analyze advisor all -d <dir>`). A multi-device run is a `<run>_<time>_cluster`
directory of one such directory per rank, with communication.json and communication_matrix.json
(export/cluster.py), for `msprof-analyze cluster -d <dir> -m all`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from atbprof.export import cluster
from atbprof.export.common import (
    EPOCH_BASE_NS,
    RunSource,
    text_bytes,
    wall_clock,
)
from atbprof.export.selection import TimelineSlice
from atbprof.export.tables import (
    KERNEL_DETAILS_BASE,
    OP_COLUMNS,
    OpCells,
    OpStatistic,
    StepComputing,
    kernel_details_lines,
)
from atbprof.export.timeline import BusyTracker, TraceWriter
from atbprof.version import __version__

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
CANN_VERSION = "8.3.RC1"  # the header variant written (Device_id, Block Dim, OP State, HF32 Eligible)
TORCH_NPU_VERSION = "2.7.1"
ENV_VARIABLES = (
    "ASCEND_GLOBAL_LOG_LEVEL",
    "HCCL_RDMA_TC",
    "HCCL_RDMA_SL",
    "ACLNN_CACHE_LIMIT",
    "HOST_CACHE_CAPACITY",
    "ASCEND_ENHANCE_ENABLE",
    "PYTORCH_NPU_ALLOC_CONF",
    "ASCEND_LAUNCH_BLOCKING",
    "HCCL_ALGO",
)


def dir_name(source: RunSource) -> str:
    """One device's directory; a multi-device run's export is a directory of one per rank (`cluster_dir_name`)."""
    if source.devices > 1 and source.rank is None:
        return f"{source.slug()}_{wall_clock(0, 17)}_cluster"
    if source.rank is not None:
        return f"{source.slug()}-rank{source.rank}_{source.os_pid() + source.rank}_{wall_clock(0, 17)}_ascend_pt"
    return f"{source.slug()}_{source.os_pid()}_{wall_clock(0, 17)}_ascend_pt"


def streams_of(source: RunSource) -> list[int]:
    """The device streams (one cheap pass over one column): trace thread metadata goes first."""
    seen: set[int] = set()
    for b in source.iter_batches(["stream_id"]):
        seen.update(b.column(0).unique().to_pylist())
    return sorted(seen)


def run_end_ns(source: RunSource) -> int:
    steps = source.steps
    return int(max(steps.column("sync_end_ns").to_pylist(), default=0))


def provenance(source: RunSource) -> dict[str, Any]:
    """What this profile is: written into the metadata files so nobody mistakes it for a capture."""
    cfg = source.doc.get("config", {})
    return {
        "generator": "atbprof export",
        "atbprof_version": source.doc.get("atbprof_version", __version__),
        "simulated": True,
        "run_name": source.name,
        "seed": source.doc.get("seed"),
        "device": source.doc.get("device", {}).get("name"),
        "soc_version": source.soc_version,
        "execution_mode": source.execution_mode,
        "fusion_strategy": cfg.get("fusion", {}).get("strategy"),
        "epoch_base_ns": EPOCH_BASE_NS,
        "epoch_base_note": "run time 0 = 2025-01-01T00:00:00Z in every export (fixed, so exports are reproducible)",
    }


def profiler_info(source: RunSource) -> dict[str, Any]:
    end = run_end_ns(source)
    return {
        "config": {
            "common_config": {
                "activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"],
                "schedule": {"wait": 0, "active": source.steps.num_rows, "warmup": 0, "repeat": 1, "skip_first": 0},
                "record_shapes": False,
                "profile_memory": False,
                "with_stack": False,
                "with_flops": False,
                "with_modules": False,
            },
            "experimental_config": {
                "_profiler_level": "Level1",
                "_aic_metrics": "ACL_AICORE_PIPE_UTILIZATION",
                "_l2_cache": False,
                "_msprof_tx": False,
                "_mstx": False,
                "_data_simplification": True,
                "record_op_args": False,
                "_export_type": ["text"],
                "_host_sys": [],
                "_op_attr": False,
                "_gc_detect_threshold": None,
                "_mstx_domain_include": [],
                "_mstx_domain_exclude": [],
                "_sys_io": False,
                "_sys_interconnection": False,
            },
        },
        "start_info": {"syscnt_enable": True, "freq": 100, "start_cnt": 0, "start_monotonic": 0},
        "end_info": {"collectionTimeEnd": EPOCH_BASE_NS + end, "MonotonicTimeEnd": end},
        "torch_npu_version": TORCH_NPU_VERSION,
        "cann_version": CANN_VERSION,
        "rank_id": str(source.rank or 0),
    }


def write(
    source: RunSource, root: Path, timeline: TimelineSlice, kernel_ranks: frozenset[int] | None = None
) -> tuple[int, int]:
    """Write the export into `root` (an empty directory), the timeline only of `timeline`'s ops; returns (op rows,
    trace events). A multi-device run: one `*_ascend_pt` directory per rank inside `root` (msprof-analyze's
    cluster input), each with its communication.json and communication_matrix.json; a rank not in `kernel_ranks`
    (None: all) is partial, as a real capture's ranks often are: step split and communication, no kernel tables."""
    if source.devices > 1 and source.rank is None:
        rows = events = 0
        per_rank = source.rank_rows()
        for rank in range(source.devices):
            view = source.for_rank(rank, per_rank.get(rank, 0))
            sub = root / dir_name(view)
            sub.mkdir()
            if kernel_ranks is None or rank in kernel_ranks:
                r, e = write(view, sub, timeline)
            else:
                r, e = _write_partial(view, sub)
            rows, events = rows + r, events + e
        return rows, events
    out, rank = _write_rank_files(source, root), source.rank or 0
    cells, stats, computing, tracker = OpCells(source), OpStatistic(), StepComputing(), BusyTracker()
    with open(out / "kernel_details.csv", "wb") as kernels, open(out / "trace_view.json", "wb") as trace_fh:
        kernels.write((",".join((*KERNEL_DETAILS_BASE, *cells.pmu_header)) + "\n").encode())
        trace = TraceWriter(trace_fh, source, "torch_npu")
        trace.open(streams_of(source), timeline.steps(source.steps))
        for b, busy in tracker.batches(source, ("op_index", *OP_COLUMNS)):
            kernels.write(text_bytes(kernel_details_lines(cells, b)))
            trace.write_batch(*timeline.batch(b, busy))
            stats.add(b)
            computing.add(b, busy.new_busy)
        trace.close(timeline.closing_tracker(tracker))
    (out / "op_statistic.csv").write_text(stats.csv())
    _write_steps(source, out, computing)
    return source.ops_rows, trace.events


def _write_rank_files(source: RunSource, root: Path) -> Path:
    """profiler_info, profiler_metadata and (a rank of a cluster) its communication files; the output dir."""
    rank = source.rank or 0
    # json.dumps with indent 4 / default separators: the byte layout torch_npu writes
    (root / f"profiler_info_{rank}.json").write_text(json.dumps(profiler_info(source), indent=4))
    meta: dict[str, Any] = {"ENV_VARIABLES": dict.fromkeys(ENV_VARIABLES, ""), "atbprof": provenance(source)}
    if source.rank is not None:
        meta = {**cluster.metadata(source, rank), **meta}
    (root / "profiler_metadata.json").write_text(json.dumps(meta))
    out = root / OUTPUT_DIR
    out.mkdir()
    if source.rank is not None:
        comm, matrix = cluster.communication(source, rank)
        (out / "communication.json").write_text(json.dumps(comm))
        (out / "communication_matrix.json").write_text(json.dumps(matrix))
    return out


def _write_steps(source: RunSource, out: Path, computing: StepComputing) -> None:
    last_stage = source.rank is None or cluster.is_last_stage(source, source.rank or 0)
    (out / "step_trace_time.csv").write_text(computing.csv(source.steps, source.sync_ns() if last_stage else 0))


def _write_partial(source: RunSource, root: Path) -> tuple[int, int]:
    """A partial rank: its files and step split, no kernel tables or timeline."""
    out = _write_rank_files(source, root)
    computing, tracker = StepComputing(), BusyTracker()
    for b, busy in tracker.batches(source, ("op_index", *OP_COLUMNS)):
        computing.add(b, busy.new_busy)
    _write_steps(source, out, computing)
    return 0, 0
