"""One side of a diff: the profile's ops charged on the device timeline, its step frames and their categories.

Built once per input from the same pieces `atbprof analyze` uses (atbprof/analyze/charges.py, categories.py), so
a diff's base and new figures equal what `analyze` reports for each input alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from atbprof.analyze.categories import CATEGORY_NAMES, ROLES_RULE, by_blocks, by_roles
from atbprof.analyze.charges import Charges, charge, frame_of_ops
from atbprof.analyze.detect import detect_kernels
from atbprof.analyze.patterns import PatternSet
from atbprof.analyze.training import training_phases
from atbprof.analyze.view import OpView, has_values, int_column
from atbprof.importers.base import Profile

OTHER = CATEGORY_NAMES.index("other")


@dataclass(frozen=True)
class OpCharges:
    """Per op of a table held whole, timeline order: its charged and kernel time (float ns), and where each step
    frame's ops start."""

    charged: np.ndarray
    dur: np.ndarray
    frame_starts: np.ndarray
    order: np.ndarray | None = None  # timeline position -> view position (None: the same)

    def tl(self, view_order: np.ndarray) -> np.ndarray:
        """A per-op array in view order, in timeline order."""
        return view_order if self.order is None else view_order[self.order]

    @property
    def frame_of_op(self) -> np.ndarray:
        """Frame number (index into the frame arrays) of every op, timeline order."""
        return frame_of_ops(self.frame_starts, len(self.charged))


@dataclass(frozen=True)
class Timeline:
    """What a diff reads of an input's charges per step frame (analyze/charges.Charges): its step, its wall and the
    wall no op is charged (host lead-in and sync, unexplained idle). The ops' own charges, where the table is held
    whole, are the Side's `held`."""

    frame_step: np.ndarray
    wall: np.ndarray  # float ns
    overhead: np.ndarray  # float ns
    outside_ops: int = 0

    @classmethod
    def of(cls, ch: Charges) -> Timeline:
        return cls(ch.frame_step, ch.wall, ch.overhead, ch.outside_ops)


@dataclass(frozen=True)
class HeldOps:
    """The ops of a table held whole: their columns (view order), charges and categories (timeline order)."""

    view: OpView
    charges: OpCharges
    category: np.ndarray  # per op: index into CATEGORY_NAMES


@dataclass(frozen=True)
class Side:
    """A profile prepared for diffing: per step frame its figures; per op (`held`) the ops of a table held whole,
    or None for a run read in parts (diff/parts.py)."""

    profile: Profile  # its ops: the table read whole, or none (an empty table) when read in parts
    charges: Timeline
    categories_rule: str
    frame_phase: list[str]  # per frame
    frame_tokens: np.ndarray  # tokens produced per frame (batch size in decode; 1 when the profile does not say)
    frame_category_ns: np.ndarray  # frames x categories: charged time, the frame's host overhead in `other`
    tokens_known: bool
    ops: int  # ops of the input
    ours: bool  # a run of ours whose ops name their graph nodes (matched exactly, diff/graphs.py)
    held: HeldOps | None
    step_kind: str = "inference"  # training (backward kernels) | host (framework ops only) | inference

    @property
    def name(self) -> str:
        meta = self.profile.meta
        return str(meta.get("name")) if self.profile.kind == "atbprof-run" and meta.get("name") else self.profile.source

    @property
    def exact(self) -> bool:
        """A simulated run without jitter: its figures carry no measurement noise."""
        cfg = self.profile.meta.get("config")
        if self.profile.kind != "atbprof-run" or not isinstance(cfg, dict):
            return False
        execution = cfg.get("execution")
        jitter = execution.get("jitter") if isinstance(execution, dict) else None
        if not isinstance(jitter, dict):
            return True  # runs written before jitter existed are exact
        return not any(jitter.get(k) for k in ("kernel_cv", "host_cv"))

    @property
    def frames(self) -> int:
        return len(self.frame_phase)

    def op_arrays(self) -> HeldOps:
        """The ops of a table held whole (the matchers and the sums read them)."""
        if self.held is None:
            raise AssertionError(f"{self.profile.source}: read in parts, its ops are not held")
        return self.held

    def frames_of(self, phase: str) -> np.ndarray:
        """Frame numbers of a phase (`all`: every frame)."""
        if phase == "all":
            return np.arange(len(self.frame_phase))
        return np.flatnonzero(np.array(self.frame_phase, dtype=object) == phase)

    def per_op(self, column: str, fill: int = -1) -> np.ndarray:
        """An integer column per op, timeline order."""
        held = self.op_arrays()
        return held.charges.tl(held.view.ints(column, fill=fill))

    def codes(self, column: str) -> tuple[np.ndarray, list[str]]:
        """Dictionary codes of a string column per op (timeline order) and the values."""
        held = self.op_arrays()
        codes, names = held.view.codes(column)
        return held.charges.tl(codes), names


def category_ns(frame_of_op: np.ndarray, category: np.ndarray, charged: np.ndarray, frames: int) -> np.ndarray:
    """frames x categories: the ops' charged time (timeline order) per frame and category."""
    k = len(CATEGORY_NAMES)
    return np.bincount(frame_of_op * k + category, weights=charged, minlength=frames * k).reshape(frames, k)


def step_frames_of(profile: Profile) -> str:
    """The step definition a profile can support: run (atbprof host frames), ProfilerStep (host frames of torch /
    torch_npu), iteration (a serving loop's, importers/kineto_steps.py), or ops (a step is the span of the kernels
    its step id names)."""
    if profile.steps is not None and profile.steps.num_rows:
        return "run"
    frames = profile.step_frames
    kinds = set(frames.column("frame").to_pylist()) if frames is not None else set()
    if "ProfilerStep" in kinds:
        return "ProfilerStep"
    return "iteration" if "iteration" in kinds else "ops"


def common_step_definition(a: Profile, b: Profile) -> str:
    """One definition for both sides of a diff: host frames when both have them (run or ProfilerStep), else the
    span of each step's kernels - a kernel_details.csv against the trace_view.json of the same capture compares
    like with like, and shows no change."""
    kinds = {step_frames_of(a), step_frames_of(b)}
    return "host frames" if kinds <= {"run", "ProfilerStep", "iteration"} else "ops"


def measure(
    profile: Profile, patterns: PatternSet, steps_as: str = "host frames", launches: tuple[bool, int] = (True, 0)
) -> Side:
    """`launches`: (blame gaps by launch records, the launch latency) - the same for both sides of a diff."""
    view = OpView.build(profile.ops)
    use, latency = launches
    if steps_as == "ops":
        ch = charge(view, None, None, latency, use)
    else:
        ch = charge(view, profile.steps, profile.step_frames, latency, use)
    if has_values(profile.ops, "role"):
        category, rule = by_roles(view), ROLES_RULE
    else:
        category, rule = by_blocks(view, patterns, detect_kernels(profile.ops, patterns, None, view=view))
    category = ch.tl(category)
    kind = "host" if profile.meta.get("host_timeline") else "inference"
    if not has_values(profile.ops, "role") and training_phases(view, patterns) is not None:
        kind = "training"
    ours = profile.kind == "atbprof-run" and has_values(profile.ops, "node_id")
    phases = [ch.phase_names[c] for c in ch.frame_phase.tolist()]
    timeline = Timeline.of(ch)
    held = HeldOps(view, OpCharges(ch.charged, ch.dur, ch.frame_starts, ch.order), category)
    per = category_ns(held.charges.frame_of_op, category, ch.charged, len(ch.frame_starts))
    return side_of(profile, timeline, phases, per, rule, profile.ops.num_rows, ours, held, kind)


def side_of(
    profile: Profile,
    timeline: Timeline,
    phases: list[str],
    per_category: np.ndarray,
    rule: str,
    ops: int,
    ours: bool,
    held: HeldOps | None,
    kind: str = "inference",
) -> Side:
    """A Side of its frames (their phases, their ops' charged time per category): the frames' overhead counted in
    `other`, and the tokens each produced."""
    per_category[:, OTHER] += timeline.overhead
    tokens = np.ones(len(phases), dtype=np.float64)
    known = False
    if profile.steps is not None and profile.steps.num_rows and "tokens" in profile.steps.column_names:
        s_step = int_column(profile.steps, "step")
        s_tok = int_column(profile.steps, "tokens", 1)
        at = np.minimum(np.searchsorted(s_step, timeline.frame_step), len(s_step) - 1)
        ok = s_step[at] == timeline.frame_step
        batch = _batch(profile)
        # a prefill step yields one token per sequence; a decode step processes (and yields) one per sequence
        per_step = np.where(np.array(phases, dtype=object) == "prefill", batch, s_tok[at])
        tokens = np.where(ok, per_step, 1).astype(np.float64)
        known = bool(ok.all())
    return Side(profile, timeline, rule, phases, tokens, per_category, known, ops, ours, held, kind)


def _batch(profile: Profile) -> int:
    cfg = profile.meta.get("config")
    if isinstance(cfg, dict):
        workload = cfg.get("workload")
        if isinstance(workload, dict) and isinstance(workload.get("batch_size"), int):
            return int(workload["batch_size"])
    return 1
