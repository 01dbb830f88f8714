"""Two runs of ours diffed in bounded memory: each read from ops.parquet in parts of whole steps (as `analyze`
reads a large run, analyze/chunked.py), and each part charged, grouped and summed per step frame and row as it is
read (diff/frame_sums.py). Nothing per op is held: a run's groups come from its config and the other run's
(diff/graphs.graph_groups), and the rows (`--by`) from the groups, before any op is read.

Charging needs nothing outside a step (analyze/charges.charge: an op's wait runs back to the op before it in its
step; a step's wall comes from steps.parquet), and a frame's sums run over its ops in timeline order, so the parts
give the figures of the whole table, byte for byte (tests/diff/test_parts.py). A diff that needs more - a combined
trace, renamed kernels (`--map`), runs of different models aligned at `--force`, runs without roles or node ids,
several devices - reads both inputs whole (diff/api.diff_paths).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from atbprof.analyze.categories import CATEGORY_NAMES, ROLES_RULE, by_roles
from atbprof.analyze.charges import Charges, charge, launch_latency_ns
from atbprof.analyze.chunked import CHUNK_OPS, CHUNKED_FROM
from atbprof.analyze.patterns import PatternSet
from atbprof.analyze.view import OpView
from atbprof.arrays import distinct
from atbprof.diff.frame_sums import FrameSums, Rows, charges_per_group, frame_sums
from atbprof.diff.graphs import graphs_of, groups_of_ops
from atbprof.diff.like import check_workloads, workload_of
from atbprof.diff.measure import Side, Timeline, category_ns, common_step_definition, side_of
from atbprof.heap import release_freed
from atbprof.importers.base import Profile, import_warnings

PART_COLUMNS = (
    "op_index",
    "step",
    "phase",
    "node_id",
    "role",
    "op_type",
    "stream_id",
    "task_start_ns",
    "task_dur_ns",
    "host_launch_start_ns",
    "host_launch_dur_ns",
)
"""What a part is read with: the timeline, launches and phase (charges), roles (categories), node ids (matching)
and op types (whether the runs are unlike work)."""

_RECORDED = ("role", "node_id", "host_launch_start_ns", "host_launch_dur_ns")


@dataclass(frozen=True)
class Plan:
    """A run to be read in parts: its profile (ops: none), ops.parquet, the parts' row groups and which columns
    hold values (from the row groups' statistics)."""

    profile: Profile
    ops_path: Path
    chunks: list[list[int]]
    ops: int
    recorded: dict[str, bool]


def _plan(path: Path, from_ops: int, part_ops: int) -> Plan | None:
    from atbprof.importers.ours import is_run_dir, run_in_parts
    from atbprof.optable.schema import column_recorded, ops_metadata

    if not is_run_dir(path):
        return None
    planned = run_in_parts(path, None, PART_COLUMNS, part_ops, from_ops)
    if planned is None:
        return None
    profile, chunks = planned
    meta = ops_metadata(path / "ops.parquet")
    groups = [g for c in chunks for g in c]
    recorded = {name: column_recorded(meta, groups, name) for name in _RECORDED}
    if any(v is None for v in recorded.values()):
        return None  # statistics that do not say: read whole
    ops = sum(meta.row_group(g).num_rows for g in groups)
    return Plan(profile, path / "ops.parquet", chunks, ops, {k: bool(v) for k, v in recorded.items()})


def plan_parts(
    base: Path, new: Path, *, part_ops: int = CHUNK_OPS, parts_from: int = CHUNKED_FROM
) -> tuple[Plan, Plan] | None:
    """Both inputs as runs to read in parts, when either has more than `parts_from` ops and both are single-device
    runs of one model whose ops record roles and node ids; None: read them whole."""
    plans = [_plan(p, parts_from, part_ops) for p in (base, new)]
    if all(p is None for p in plans):
        return None
    if any(p is None for p in plans):  # the smaller one, in one or a few parts
        plans = [p or _plan(path, 0, part_ops) for p, path in zip(plans, (base, new), strict=True)]
    a, b = plans
    if a is None or b is None or not all(p.recorded["role"] and p.recorded["node_id"] for p in (a, b)):
        return None
    graphs = [graphs_of(p.profile) for p in (a, b)]
    if graphs[0] is None or graphs[1] is None or graphs[0][1] != graphs[1][1]:
        return None  # no config, or runs of different models: refused, or aligned at --force, from whole tables
    return a, b


def measure_in_parts(
    plan: Plan, launches: tuple[bool, int], luts: dict[str, np.ndarray], rows: Rows
) -> tuple[Side, FrameSums, list[str]]:
    """A side of a diff from a run read in parts (`launches` as for diff/measure.measure), its ops summed per frame
    by `rows` as they are read (`luts`: its groups, diff/graphs.graph_groups), and the run's op types."""
    from atbprof.optable.schema import read_ops_chunks

    profile = plan.profile
    steps: list[np.ndarray] = []
    walls: list[np.ndarray] = []
    overhead: list[np.ndarray] = []
    per_category: list[np.ndarray] = []
    sums: list[tuple[np.ndarray, ...]] = []
    first_frame: list[int] = []  # per part
    frame_phase: list[str] = []
    types: dict[str, None] = {}
    ops = outside = 0
    for part in read_ops_chunks(plan.ops_path, plan.chunks, columns=PART_COLUMNS):
        view, ch, group = _charged(part, profile, launches, luts)
        frames, frame_of_op = len(ch.frame_starts), ch.frame_of_op
        first_frame.append(len(frame_phase))
        per_category.append(category_ns(frame_of_op, ch.tl(by_roles(view)), ch.charged, frames))
        sums.append(frame_sums(frame_of_op, group, ch.charged, ch.dur, frames, rows))
        steps.append(ch.frame_step)
        walls.append(ch.wall)
        overhead.append(ch.overhead)
        frame_phase += [ch.phase_names[c] for c in ch.frame_phase.tolist()]
        types.update(dict.fromkeys(view.type_names[c] for c in distinct(view.type_codes[view.type_codes >= 0])))
        outside += ch.outside_ops
        ops += len(view)
        del view, ch, part, group, frame_of_op  # the next part's arrays replace these
    # the parts' buffers, freed, handed back before the other side's stack on them (once a side: after each part it
    # cost 3.6 s of 13 at 21.1 M ops a side, for 15-30 MB less)
    release_freed()
    if ops != plan.ops:  # a part's rows are the row groups' less a step carried to the next: they add up
        raise AssertionError(f"{plan.ops_path}: {ops} ops read in parts of {plan.ops}")

    def group_charges(frame: int) -> tuple[np.ndarray, np.ndarray]:
        """One frame's charges per group: its part read again (a diff of one step a side tests the instances)."""
        index = int(np.searchsorted(first_frame, frame, side="right")) - 1
        for k, part in enumerate(read_ops_chunks(plan.ops_path, plan.chunks, columns=PART_COLUMNS, verify=False)):
            if k == index:
                _, ch, group = _charged(part, profile, launches, luts)
                mine = ch.frame_of_op == frame - first_frame[index]
                return charges_per_group(group[mine], ch.charged[mine], len(rows.of_group))
        raise AssertionError(f"{plan.ops_path}: frame {frame} in no part")

    timeline = Timeline(_joined(steps, np.int64), _joined(walls, np.float64), _joined(overhead, np.float64), outside)
    c, k, n, present, matched, unmatched = (np.concatenate([s[i] for s in sums]) for i in range(6))
    frame_sums_of = FrameSums(c, k, n, present, matched, unmatched, group_charges)
    by_category = np.concatenate(per_category) if per_category else np.zeros((0, len(CATEGORY_NAMES)))
    ours = profile.kind == "atbprof-run"
    side = side_of(profile, timeline, frame_phase, by_category, ROLES_RULE, ops, ours, None)
    return side, frame_sums_of, list(types)


def _charged(
    part: pa.Table, profile: Profile, launches: tuple[bool, int], luts: dict[str, np.ndarray]
) -> tuple[OpView, Charges, np.ndarray]:
    """A part's view, its charges and the group of each of its ops (timeline order)."""
    use, latency = launches
    view = OpView.build(part)
    ch = charge(view, profile.steps, profile.step_frames, latency, use)
    codes, names = view.codes("phase")
    return view, ch, groups_of_ops(ch.tl(view.ints("node_id")), ch.tl(codes), names, luts)


def _joined(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype)


def measure_runs(
    plans: tuple[Plan, Plan], patterns: PatternSet, force: bool, luts: tuple[dict[str, np.ndarray], ...], rows: Rows
) -> tuple[Side, Side, FrameSums, FrameSums, list[str], str]:
    """Both sides of a diff of two runs planned by `plan_parts` with their frame sums, the notes so far and how
    steps are compared: what diff/api.diff makes of the two tables held whole, before it compares them."""
    pb, pn = plans[0].profile, plans[1].profile
    steps_as = common_step_definition(pb, pn)
    recorded = [p.recorded["host_launch_start_ns"] and p.recorded["host_launch_dur_ns"] for p in plans]
    launches = (all(recorded), max(launch_latency_ns(pb.meta), launch_latency_ns(pn.meta)))
    a, sa, types_a = measure_in_parts(plans[0], launches, luts[0], rows)
    b, sb, types_b = measure_in_parts(plans[1], launches, luts[1], rows)
    # runs of ours ran on Ascend devices, both: no vendor notes
    notes = check_workloads(pb.source, workload_of(types_a, patterns), pn.source, workload_of(types_b, patterns), force)
    notes += [f"{p.source}: {w}" for p in (pb, pn) for w in import_warnings(p)]
    return a, b, sa, sb, notes, steps_as
