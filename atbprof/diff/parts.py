"""Two runs of ours diffed in bounded memory: each read from ops.parquet in parts of whole steps (as `analyze`
reads a large run, analyze/chunked.py), charged part by part, and held as the few arrays per op that the exact
matching of runs of ours reads after (diff/graphs.py, rows.py): charged and kernel time, node id, phase and
category, 22 bytes an op, where the table and its charges held whole take ~750 bytes.

Charging needs nothing outside a step (analyze/charges.charge: an op's wait runs back to the op before it in its
step; a step's wall comes from steps.parquet), so the parts' charges are the whole table's, in its timeline order.
A diff that needs more - a combined trace, renamed kernels (`--map`), runs of different models aligned at
`--force`, runs without roles or node ids, several devices - reads both inputs whole (diff/api.diff_paths).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from atbprof.analyze.categories import ROLES_RULE, by_roles
from atbprof.analyze.charges import charge, launch_latency_ns
from atbprof.analyze.chunked import CHUNK_OPS, CHUNKED_FROM
from atbprof.analyze.patterns import PatternSet
from atbprof.analyze.view import OpView
from atbprof.arrays import distinct
from atbprof.diff.graphs import graphs_of
from atbprof.diff.like import check_workloads, workload_of
from atbprof.diff.measure import Side, Timeline, common_step_definition, side_of
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


@dataclass(frozen=True)
class HeldColumns:
    """The columns of a run read in parts that a diff reads per op after charging, timeline order: node ids
    (int32, -1 where none) and phase codes into `phase_names` (int16, -1 where none)."""

    node_id: np.ndarray
    phase: np.ndarray
    phase_names: list[str]

    def ints(self, name: str, positions: np.ndarray | None = None, fill: int = -1) -> np.ndarray:
        if name != "node_id":
            raise KeyError(f"{name}: not held by a run diffed in parts")
        values = self.node_id if positions is None else self.node_id[positions]
        return values if fill == -1 else np.where(values == -1, fill, values)

    def codes(self, name: str) -> tuple[np.ndarray, list[str]]:
        if name != "phase":
            raise KeyError(f"{name}: not held by a run diffed in parts")
        return self.phase, self.phase_names


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


def measure_in_parts(plan: Plan, launches: tuple[bool, int]) -> tuple[Side, list[str]]:
    """A side of a diff from a run read in parts (`launches` as for diff/measure.measure), and the run's op types."""
    from atbprof.optable.schema import read_ops_chunks

    use, latency = launches
    profile = plan.profile
    n = plan.ops
    charged, dur = np.empty(n, np.float64), np.empty(n, np.float64)
    node, phase, category = np.empty(n, np.int32), np.empty(n, np.int16), np.empty(n, np.int8)
    starts: list[np.ndarray] = []
    steps: list[np.ndarray] = []
    walls: list[np.ndarray] = []
    frame_phase: list[str] = []
    phase_names: dict[str, int] = {}
    types: dict[str, None] = {}
    at = outside = 0
    for part in read_ops_chunks(plan.ops_path, plan.chunks, columns=PART_COLUMNS):
        view = OpView.build(part)
        ch = charge(view, profile.steps, profile.step_frames, latency, use)
        end = at + len(view)
        charged[at:end], dur[at:end] = ch.charged, ch.dur
        node[at:end] = ch.tl(view.ints("node_id"))
        codes, names = view.codes("phase")
        lut = np.array([phase_names.setdefault(x, len(phase_names)) for x in names] + [-1], dtype=np.int16)
        phase[at:end] = lut[ch.tl(codes)]
        category[at:end] = ch.tl(by_roles(view))
        starts.append(ch.frame_starts + at)
        steps.append(ch.frame_step)
        walls.append(ch.wall)
        frame_phase += [ch.phase_names[c] for c in ch.frame_phase.tolist()]
        types.update(dict.fromkeys(view.type_names[c] for c in distinct(view.type_codes[view.type_codes >= 0])))
        outside += ch.outside_ops
        at = end
        del view, ch, part  # the next part's arrays replace these
    release_freed()  # the parts' buffers, freed: the other side's should not stack on them
    if at != n:  # a part's rows are the row groups' less a step carried to the next: they add up
        raise AssertionError(f"{plan.ops_path}: {at} ops read in parts of {n}")
    timeline = Timeline(
        charged,
        dur,
        np.concatenate(starts) if starts else np.zeros(0, np.int64),
        np.concatenate(steps) if steps else np.zeros(0, np.int64),
        np.concatenate(walls) if walls else np.zeros(0, np.float64),
        outside,
    )
    held = HeldColumns(node, phase, list(phase_names))
    side = side_of(profile, held, timeline, frame_phase, category, ROLES_RULE, n, profile.kind == "atbprof-run")
    return side, list(types)


def measure_runs(plans: tuple[Plan, Plan], patterns: PatternSet, force: bool) -> tuple[Side, Side, list[str], str]:
    """Both sides of a diff of two runs planned by `plan_parts`, the notes so far and how steps are compared: what
    diff/api.diff makes of the two tables held whole, before it compares them."""
    pb, pn = plans[0].profile, plans[1].profile
    steps_as = common_step_definition(pb, pn)
    recorded = [p.recorded["host_launch_start_ns"] and p.recorded["host_launch_dur_ns"] for p in plans]
    launches = (all(recorded), max(launch_latency_ns(pb.meta), launch_latency_ns(pn.meta)))
    (a, types_a), (b, types_b) = (measure_in_parts(p, launches) for p in plans)
    # runs of ours ran on Ascend devices, both: no vendor notes
    notes = check_workloads(pb.source, workload_of(types_a, patterns), pn.source, workload_of(types_b, patterns), force)
    notes += [f"{p.source}: {w}" for p in (pb, pn) for w in import_warnings(p)]
    return a, b, notes, steps_as
