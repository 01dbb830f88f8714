"""The op table as Ascend CSV text: kernel_details / op_summary rows, op_statistic, step_trace_time, task_time.

kernel_details.csv (torch_npu) and op_summary_*.csv (msprof) carry the same cells under two vocabularies
(docs/ascend_profiling_formats.md §2.2); the header variant is CANN 8.3.RC1 (`Device_id`, `Block Dim`), the PMU
tail PipeUtilization: A2 (Ascend910B*) splits it into aic_* (cube core) / aiv_* (vector core) columns, older SoCs
(910A) write the unprefixed set. Cell formats copy the real Qwen3 capture: start times end in a TAB, shapes carry
literal quotes, durations have three decimals, wait times six, PMU values print like Python's round(x, 3).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.export.common import (
    DEVICE_ID,
    RunSource,
    abs_ns,
    csv_field,
    csv_lines,
    fixed3,
    int_text,
    map_dictionary,
    matches,
    model_id,
    py_number,
    quoted_shapes,
    short3,
    thousandths,
)
from atbprof.optable.schema import PIPES

OP_COLUMNS = (
    "step",
    "op_name",
    "op_type",
    "task_type",
    "stream_id",
    "task_id",
    "task_start_ns",
    "task_dur_ns",
    "task_wait_ns",
    "host_launch_start_ns",
    "host_launch_dur_ns",
    "block_dim",
    "mix_block_dim",
    "input_shapes",
    "input_dtypes",
    "output_shapes",
    "output_dtypes",
    *[f"{p}_time_ns" for p in PIPES],
    *[f"{p}_ratio" for p in PIPES],
)
"""The ops.parquet columns the exports read."""

# one entry per shared cell: (kernel_details name, op_summary name)
_CELLS = (
    ("Device_id", "Device_id"),
    ("Model ID", "Model ID"),
    ("Task ID", "Task ID"),
    ("Stream ID", "Stream ID"),
    ("Name", "Op Name"),
    ("Type", "OP Type"),
    ("OP State", "OP State"),
    ("Accelerator Core", "Task Type"),
    ("Start Time(us)", "Task Start Time(us)"),
    ("Duration(us)", "Task Duration(us)"),
    ("Wait Time(us)", "Task Wait Time(us)"),
    ("Block Dim", "Block Dim"),
    ("Mix Block Dim", "Mix Block Dim"),
    ("HF32 Eligible", "HF32 Eligible"),
    ("Input Shapes", "Input Shapes"),
    ("Input Data Types", "Input Data Types"),
    ("Input Formats", "Input Formats"),
    ("Output Shapes", "Output Shapes"),
    ("Output Data Types", "Output Data Types"),
    ("Output Formats", "Output Formats"),
    ("Context ID", "Context ID"),
)
KERNEL_DETAILS_BASE = ("Step Id", *(k for k, _ in _CELLS))
OP_SUMMARY_BASE = tuple(m for _, m in _CELLS)

_AIC_PIPES = ("mac", "scalar", "mte1", "mte2", "fixpipe")
_AIV_PIPES = ("vec", "scalar", "mte2", "mte3")
PMU_910B = (
    "aicore_time(us)",
    "aic_total_cycles",
    *[f"aic_{p}_{kind}" for p in _AIC_PIPES for kind in ("time(us)", "ratio")],
    "aic_icache_miss_rate",
    "aiv_time(us)",
    "aiv_total_cycles",
    *[f"aiv_{p}_{kind}" for p in _AIV_PIPES for kind in ("time(us)", "ratio")],
    "aiv_icache_miss_rate",
    "cube_utilization(%)",
)
_PIPES_910A = ("vec", "mac", "scalar", "mte1", "mte2", "mte3")
PMU_910A = (
    "aicore_time(us)",
    "total_cycles",
    *[f"{p}_{kind}" for p in _PIPES_910A for kind in ("time(us)", "ratio")],
    "icache_miss_rate",
    "memory_bound",
)
OP_STATISTIC_HEADER = "Device_id,OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),Max Time(us),Ratio(%)"
STEP_TRACE_HEADER = (
    "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
    "Communication(Not Overlapped and Exclude Receive),Preparing"
)
TASK_TIME_HEADER = "Device_id,kernel_name,kernel_type,stream_id,task_id,task_time(us),task_start(us),task_stop(us)"
_KEEP_PREFIX = ("DT_BF16", "DT_UNDEFINED")
NOT_MODELLED = "N/A"  # msprof's marker for a value it did not collect (atbprof does not model the icache)


def msprof_dtypes(dtypes: str) -> str:
    """Data type names as msprof prints them: FLOAT16, FLOAT, INT64, ... but DT_BF16 (real captures, e.g.
    `DT_BF16;FLOAT`); the op table keeps GE's DT_* names."""
    return ";".join(t[3:] if t.startswith("DT_") and t not in _KEEP_PREFIX else t for t in dtypes.split(";"))


def _formats(shapes: str) -> str:
    """One layout per tensor slot (atbprof keeps ND tensors); an empty slot (absent optional input) stays empty."""
    if not shapes or shapes == "N/A":
        return shapes
    return ";".join("ND" if slot else "" for slot in shapes.split(";"))


def _is(col: pa.Array, *values: str) -> np.ndarray:
    return pc.is_in(col, value_set=pa.array(values, pa.string())).to_numpy(zero_copy_only=False)


def _const(text: str, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(text, pa.string()), n)


class OpCells:
    """Per-batch text of the op-table cells both CSV vocabularies share, plus the PMU tail of the device."""

    def __init__(self, source: RunSource) -> None:
        self.source = source
        self.pmu_header = PMU_910B if source.is_910b else PMU_910A
        self.op_state = "static" if source.execution_mode == "graph" else "dynamic"
        self.model_id = str(model_id(source.execution_mode))
        self._caches: dict[str, dict[str, str]] = {}

    def _map(self, col: pa.Array, key: str, fn: Callable[[str], str]) -> pa.Array:
        """fn per distinct value, cached across batches under `key` (dictionaries repeat from batch to batch)."""
        return map_dictionary(col, fn, self._caches.setdefault(key, {}))

    def cells(self, b: pa.RecordBatch) -> list[pa.Array]:
        """The 21 shared cells (`_CELLS` order) as escaped CSV text."""
        n, c = b.num_rows, b.column
        task_type = c("task_type")
        is_mix = pa.array(_is(task_type, "MIX_AIC", "MIX_AIV"), pa.bool_())
        wait = c("task_wait_ns")
        wait_text = pc.if_else(pc.equal(wait, 0), "0", pc.binary_join_element_wise(fixed3(wait), "000", ""))
        return [
            _const(str(DEVICE_ID), n),
            _const(self.model_id, n),
            int_text(c("task_id")),
            int_text(c("stream_id")),
            self._map(c("op_name"), "name", csv_field),
            self._map(c("op_type"), "type", csv_field),
            _const(self.op_state, n),
            self._map(task_type, "core", csv_field),
            pc.binary_join_element_wise(fixed3(abs_ns(c("task_start_ns"))), "\t", ""),
            fixed3(c("task_dur_ns")),
            wait_text,
            int_text(c("block_dim")),
            int_text(c("mix_block_dim")),
            _const("NO", n),
            self._map(c("input_shapes"), "shapes", quoted_shapes),
            self._map(c("input_dtypes"), "dtypes", lambda t: csv_field(msprof_dtypes(t))),
            self._map(c("input_shapes"), "formats", lambda s: csv_field(_formats(s))),
            self._map(c("output_shapes"), "shapes", quoted_shapes),
            self._map(c("output_dtypes"), "dtypes", lambda t: csv_field(msprof_dtypes(t))),
            self._map(c("output_shapes"), "formats", lambda s: csv_field(_formats(s))),
            pc.if_else(is_mix, "0", "N/A"),
        ]

    def pmu(self, b: pa.RecordBatch) -> list[pa.Array]:
        return self._pmu_910b(b) if self.source.is_910b else self._pmu_910a(b)

    def _pmu_910a(self, b: pa.RecordBatch) -> list[pa.Array]:
        c, n = b.column, b.num_rows
        dur = c("task_dur_ns").to_numpy()
        cycles = np.rint(dur * self.source.clock_ghz).astype(np.int64) * c("block_dim").to_numpy()
        out = [short3(dur), int_text(cycles)]
        ratios = {}
        for p in _PIPES_910A:
            ratios[p] = thousandths(c(f"{p}_ratio").to_numpy(zero_copy_only=False))
            out += [short3(c(f"{p}_time_ns")), short3(ratios[p])]
        busiest = np.maximum(ratios["mac"], ratios["vec"])
        bound = np.where(busiest > 0, ratios["mte2"] * 1000 // np.maximum(busiest, 1), 0)
        out += [_const(NOT_MODELLED, n), short3(bound)]
        return self._blank_aicpu(b, out)

    def _pmu_910b(self, b: pa.RecordBatch) -> list[pa.Array]:
        """Cube-side pipes go to aic_*, vector-side to aiv_*; a MIX kernel fills both (each core has its own
        scalar and MTE2 pipe, so those appear on both sides); the side a kernel does not use reads 0."""
        c = b.column
        kind = c("task_type")
        dur = c("task_dur_ns").to_numpy()
        block, mix = c("block_dim").to_numpy().astype(np.int64), c("mix_block_dim").to_numpy().astype(np.int64)
        on_aic = _is(kind, "AI_CORE", "MIX_AIC", "MIX_AIV")
        on_aiv = _is(kind, "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV")
        aic_blocks = np.where(_is(kind, "MIX_AIV"), mix, block)
        aiv_blocks = np.where(_is(kind, "MIX_AIC"), mix, block)
        cycles = np.rint(dur * self.source.clock_ghz).astype(np.int64)
        out: list[pa.Array] = []
        for active, pipes, blocks in ((on_aic, _AIC_PIPES, aic_blocks), (on_aiv, _AIV_PIPES, aiv_blocks)):
            out += [short3(np.where(active, dur, 0)), int_text(np.where(active, cycles * blocks, 0))]
            for p in pipes:
                t = np.where(active, c(f"{p}_time_ns").to_numpy(), 0)
                r = np.where(active, thousandths(c(f"{p}_ratio").to_numpy(zero_copy_only=False)), 0)
                out += [short3(t), short3(r)]
            out.append(pc.if_else(pa.array(active, pa.bool_()), NOT_MODELLED, "0.0"))
        # cube_utilization(%) = aic_total_cycles / (freq * aic cores * duration), printed with three decimals
        util = np.where(on_aic, aic_blocks * 100_000 // max(self.source.aic_cores, 1), 0)
        out.append(fixed3(util))
        return self._blank_aicpu(b, out)

    @staticmethod
    def _blank_aicpu(b: pa.RecordBatch, cols: list[pa.Array]) -> list[pa.Array]:
        """AI CPU tasks have no AI Core PMU data: msprof writes N/A."""
        aicpu = _is(b.column("task_type"), "AI_CPU")
        if not aicpu.any():
            return cols
        mask = pa.array(aicpu, pa.bool_())
        return [pc.if_else(mask, "N/A", col) for col in cols]


def kernel_details_lines(cells: OpCells, b: pa.RecordBatch) -> pa.Array:
    return csv_lines([int_text(b.column("step")), *cells.cells(b), *cells.pmu(b)])


def op_summary_lines(cells: OpCells, b: pa.RecordBatch) -> pa.Array:
    return csv_lines([*cells.cells(b), *cells.pmu(b)])


def task_time_lines(b: pa.RecordBatch) -> pa.Array:
    c = b.column
    start = abs_ns(c("task_start_ns"))
    tab = "\t"
    return csv_lines(
        [
            _const(str(DEVICE_ID), b.num_rows),
            map_dictionary(c("op_name"), csv_field),
            map_dictionary(c("task_type"), csv_field),
            int_text(c("stream_id")),
            int_text(c("task_id")),
            fixed3(c("task_dur_ns")),
            pc.binary_join_element_wise(fixed3(start), tab, ""),
            pc.binary_join_element_wise(fixed3(pc.add(start, c("task_dur_ns"))), tab, ""),
        ]
    )


# -- aggregates ----------------------------------------------------------------------------------------------------


def _r3(ns: float) -> str:
    return py_number(round(ns / 1000.0, 3))


@dataclass
class OpStatistic:
    """op_statistic: count / total / min / max device time per (OP Type, Core Type)."""

    groups: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # count, total, min, max (ns)

    def add(self, b: pa.RecordBatch) -> None:
        table = pa.table(
            {
                "t": pc.cast(b.column("op_type"), pa.string()),
                "k": pc.cast(b.column("task_type"), pa.string()),
                "d": b.column("task_dur_ns"),
            }
        )
        agg = table.group_by(["t", "k"]).aggregate([("d", "count"), ("d", "sum"), ("d", "min"), ("d", "max")])
        for t, k, n, s, lo, hi in zip(*(agg.column(x).to_pylist() for x in agg.column_names), strict=True):
            g = self.groups.setdefault((t, k), [0, 0, lo, hi])
            g[0], g[1], g[2], g[3] = g[0] + n, g[1] + s, min(g[2], lo), max(g[3], hi)

    def csv(self, with_device: bool = True) -> str:
        total = sum(g[1] for g in self.groups.values()) or 1
        rows = sorted(self.groups.items(), key=lambda kv: (-kv[1][1], kv[0]))
        lines = [OP_STATISTIC_HEADER if with_device else OP_STATISTIC_HEADER.split(",", 1)[1]]
        for (op_type, core), (n, s, lo, hi) in rows:
            cells = [csv_field(op_type), csv_field(core), str(n), _r3(s), _r3(lo), _r3(s / n), _r3(hi)]
            cells.append(py_number(round(100.0 * s / total, 3)))
            lines.append(",".join(([str(DEVICE_ID)] if with_device else []) + cells))
        return "\n".join(lines) + "\n"


class StepComputing:
    """Per step: device busy time of compute tasks and of collectives (the union of task intervals: tasks run in
    start order on the device), the time in pipeline receives, and the first and last task."""

    def __init__(self) -> None:
        self.busy_ns: dict[int, int] = {}
        self.comm_ns: dict[int, int] = {}
        self.receive_ns: dict[int, int] = {}
        self.first_ns: dict[int, int] = {}
        self.last_ns: dict[int, int] = {}

    def add(self, b: pa.RecordBatch, new_busy: np.ndarray) -> None:
        comm = matches(b.column("task_type"), lambda v: pc.equal(v, "COMMUNICATION"))
        receive = matches(b.column("op_type"), lambda v: pc.starts_with(v, "hcom_receive"))
        start = b.column("task_start_ns")
        table = pa.table(
            {
                "step": b.column("step"),
                "busy": pc.if_else(comm, 0, pa.array(new_busy)),
                "comm": pc.if_else(comm, pa.array(new_busy), 0),
                "receive": pc.if_else(receive, b.column("task_dur_ns"), 0),
                "start": start,
                "end": pc.add(start, b.column("task_dur_ns")),
            }
        )
        aggs = [("busy", "sum"), ("comm", "sum"), ("receive", "sum"), ("start", "min"), ("end", "max")]
        agg = table.group_by("step").aggregate(aggs)
        names = ("step", "busy_sum", "comm_sum", "receive_sum", "start_min", "end_max")
        rows = zip(*(agg.column(c).to_pylist() for c in names), strict=True)
        for step, busy, comm_ns, receive_ns, first, last in rows:
            self.busy_ns[step] = self.busy_ns.get(step, 0) + busy
            self.comm_ns[step] = self.comm_ns.get(step, 0) + comm_ns
            self.receive_ns[step] = self.receive_ns.get(step, 0) + receive_ns
            self.first_ns[step] = min(self.first_ns.get(step, first), first)
            self.last_ns[step] = max(self.last_ns.get(step, last), last)

    def csv(self, steps: pa.Table, sync_ns: int, with_device: bool = True, device_id: int = DEVICE_ID) -> str:
        """step_trace_time as torch_npu computes it, over this rank's ProfilerStep frames (the end of its previous
        step to the end of this one: its last task, plus the token copy `sync_ns` where it samples):
        Communication = the collectives (none overlap compute: a rank's tasks run in order), Free = frame -
        Computing - Communication, Bubble = the pipeline receives, Stage = frame - Bubble, Preparing = frame start
        -> this device's first task."""
        lines = [STEP_TRACE_HEADER if with_device else STEP_TRACE_HEADER.split(",", 1)[1]]
        begin = 0
        for r in steps.to_pylist():
            step = r["step"]
            end = self.last_ns.get(step, r["device_end_ns"]) + sync_ns
            span = end - begin
            computing, comm = self.busy_ns.get(step, 0), self.comm_ns.get(step, 0)
            bubble = self.receive_ns.get(step, 0)
            cells = [str(step), *_us_list(computing, comm, 0, comm, span - computing - comm, span - bubble, bubble)]
            cells.append(py_number((comm - bubble) / 1000.0))
            first = self.first_ns.get(step, r["device_start_ns"])
            cells.append(py_number((first - begin) / 1000.0))
            lines.append(",".join(([str(device_id)] if with_device else []) + cells))
            begin = end
        return "\n".join(lines) + "\n"


def _us_list(*ns: int) -> Sequence[str]:
    return [py_number(v / 1000.0) for v in ns]
