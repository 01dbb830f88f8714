"""Each finding's figures before they are rounded into a Finding (analyze/api.py), from the occurrences table held
whole; analyze/digest.py gives the same from the occurrences of a run read in parts, reduced as they came."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.analyze.patterns import OPPORTUNITY_KINDS
from atbprof.analyze.report import Breakdown
from atbprof.analyze.view import dict_codes, int_column
from atbprof.arrays import distinct


@dataclass
class GroupSums:
    """One finding's figures before they are rounded into a Finding: from the occurrences table held whole
    (`group_sums`), or from the occurrences of a run read in parts, reduced as they came (analyze/digest.py).
    Times in ns; `examples`: its longest occurrences, rows of EXAMPLE_COLUMNS and est_saving_ns."""

    level: str
    kind: str
    pattern: str
    fused_as: str
    rule: str
    evidence: str
    count: int
    time_ns: float
    kernel_ns: float  # the device time of the calls' kernels where known (framework level), else the members'
    host_ns: float  # the members' own time (framework level: the calls' host time)
    device_kernels: int | None
    wait_ns: float
    launch_ns: float | None  # None: the profile records no launches
    saving_ns: float | None  # None: not estimated
    estimated: bool
    by_phase: list[tuple[str, int, int, float, float]]  # (phase, count, steps, time_ns, saving_ns)
    examples: list[dict[str, Any]]


EXAMPLE_COLUMNS = ["op_indices", "step", "phase", "stream_id", "layer", "role", "start_ns", "time_ns"]


def group_sums(table: pa.Table, breakdown: Breakdown, top: int) -> list[GroupSums]:
    """Per finding (level, kind, pattern, fused_as), in the order of their codes: its sums over the occurrences."""
    if not table.num_rows:
        return []
    keys = ("level", "kind", "pattern", "fused_as")
    # one integer group key from the dictionary codes of the key columns (no Python object per occurrence)
    group = np.zeros(table.num_rows, dtype=np.int64)
    for k in keys:
        codes, names = dict_codes(table.column(k))
        group = group * (len(names) + 1) + codes
    phase_codes, phase_names = dict_codes(table.column("phase"))
    phase_names = [*phase_names, "all"]
    phase_codes = np.where(phase_codes >= 0, phase_codes, len(phase_names) - 1)
    step = int_column(table, "step")
    time = table.column("time_ns").to_numpy()
    kernel, wait = table.column("kernel_ns").to_numpy(), table.column("wait_ns").to_numpy()
    launch = table.column("launch_ns")
    launch_np = pc.fill_null(launch, 0).to_numpy()
    has_launch = launch.null_count < len(launch)
    saving = pc.fill_null(table.column("est_saving_ns"), 0.0).to_numpy()
    device = table.column("device_ns").to_numpy(zero_copy_only=False).astype(float)  # NaN: not known
    device_kernels = pc.fill_null(table.column("device_kernels"), -1).to_numpy()
    estimated = np.asarray(table.column("est_saving_ns").is_valid().to_numpy(zero_copy_only=False), bool)
    steps_of = {p.phase: p.steps for p in breakdown.phases}

    def known_device(rows: np.ndarray) -> bool:
        return bool(len(rows)) and not np.isnan(device[rows]).any()

    order = np.argsort(group, kind="stable")
    bounds = np.flatnonzero(np.diff(group[order])) + 1
    groups = np.split(order, bounds)
    n_examples = max(min(3, top), 1)
    # the examples of every finding (its longest occurrences) in one take: a take per finding gathers the table's
    # chunks every time
    examples_of = [rows[np.argsort(-time[rows], kind="stable")[:n_examples]] for rows in groups]
    every = np.concatenate(examples_of) if examples_of else np.zeros(0, np.int64)
    samples = table.select([*EXAMPLE_COLUMNS, "est_saving_ns"]).take(pa.array(every)).to_pylist()
    sample_at = np.cumsum([0, *(len(b) for b in examples_of)])
    out = []
    for g, rows in enumerate(groups):
        head = table.slice(int(rows[0]), 1).to_pylist()[0]
        by_phase = []
        for code in distinct(phase_codes[rows]).tolist():
            sel = rows[phase_codes[rows] == code]
            ph = phase_names[code]
            n_steps = steps_of.get(ph) or len(distinct(step[sel])) or 1
            by_phase.append((ph, len(sel), n_steps, float(time[sel].sum()), float(saving[sel].sum())))
        known = known_device(rows)
        any_estimated = bool(estimated[rows].any())
        out.append(
            GroupSums(
                level=head["level"],
                kind=head["kind"],
                pattern=head["pattern"],
                fused_as=head["fused_as"],
                rule=head["rule"],
                evidence=head["evidence"],
                count=len(rows),
                time_ns=float(time[rows].sum()),
                kernel_ns=float(device[rows].sum() if known else kernel[rows].sum()),
                host_ns=float(kernel[rows].sum()),
                device_kernels=int(device_kernels[rows].sum()) if known else None,
                wait_ns=float(wait[rows].sum()),
                launch_ns=float(launch_np[rows].sum()) if has_launch else None,
                saving_ns=float(saving[rows].sum()) if any_estimated or head["kind"] not in OPPORTUNITY_KINDS else None,
                estimated=any_estimated,
                by_phase=by_phase,
                examples=samples[sample_at[g] : sample_at[g + 1]],
            )
        )
    return out
