"""The device timeline cut into steps, each op charged the time the timeline advanced while it ran.

Each op is charged the idle gap before it (the device waited for it - charged to the op waited for) plus the part
of its duration no earlier op on any stream already covered, so within a step the charges add up to first-start ..
last-end. Where the profile records host launches, an op is charged only the part of the gap its own launch
explains: the device waited for its launch call (plus the launch latency), for at most that call's cost; the rest
of the gap - the host reaching the call late (a dataloader, a sync, Python between steps) - is idle time no kernel
is blamed for: the step's idle time (a profile's `idle:` rows by cause, idle_causes.py; a run's `other`).
A step's wall is that device span, or for runs of ours the host frame (host start .. token synced) when longer;
the difference is the step's `overhead` (host lead-in, token sync, unexplained idle).

A profile with ProfilerStep frames (torch / torch_npu), or a serving loop's iterations (importers/kineto_steps.py),
is cut by those frames instead, so its steps partition its
timeline: a step is its host frame, and holds the ops that start inside it, whichever step launched them (a GPU that
lags the host runs step k's kernels during frame k+1); an op is charged only what falls inside its frame (a kernel
running past the frame's end leaves the rest to the next frame, as idle no op owns). Ops outside every frame, and the
time between and around the frames, are the `outside` bucket, not a step. Shared by `attribute` (where the time
went) and `atbprof diff` (what changed, step by step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.analyze.view import OpView, dict_codes, has_values, int_column, running_max_in_groups

PARTITIONING_FRAMES = ("ProfilerStep", "iteration")
"""step_frames kinds that partition a profile's timeline: ProfilerStep#N host frames, and a serving loop's
iterations (device-time windows, importers/kineto_steps.py)."""


@dataclass(frozen=True)
class Charges:
    """Per op (timeline order: by step, then start, across streams) and per step frame; read-only arrays."""

    order: np.ndarray | None  # timeline position -> view position (None: the view already is in timeline order)
    step: np.ndarray
    gap: np.ndarray  # device idle before the op (int ns)
    prev_end: np.ndarray
    charged: np.ndarray  # float ns; sums to the step's device span
    dur: np.ndarray  # float ns
    op_phase: np.ndarray  # phase code of the op's frame
    frame_starts: np.ndarray  # timeline position of each frame's first op
    frame_step: np.ndarray
    frame_phase: np.ndarray  # code into phase_names
    device_span: np.ndarray  # int ns
    wall: np.ndarray  # float ns
    phase_names: list[str]
    framed_by: str = "ops"  # "ops" (a step = its ops' span), "run" (our host frames), "ProfilerStep" / "iteration"
    # (frames that partition the timeline)
    outside_ns: float = 0.0  # timeline outside every step (ProfilerStep profiles: before, between, after frames)
    outside_ops: int = 0  # ops that start outside every step
    empty_frames: int = 0  # ProfilerStep frames with no device op in them (their time is in `outside_ns`)
    covered_lo: np.ndarray | None = None  # per op: the timeline interval its charge covers (int ns)
    covered_hi: np.ndarray | None = None
    frame_lo: np.ndarray | None = None  # per frame: its window on the device timeline (None: runs of ours)
    frame_hi: np.ndarray | None = None

    def idle_intervals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(lo, hi, frame) of every stretch of a frame's window no op's charge covers - the frames' `overhead`,
        as intervals; None where the windows are not device time (runs of ours: host frames)."""
        if self.covered_lo is None or self.covered_hi is None or self.frame_lo is None or self.frame_hi is None:
            return None
        n = len(self.covered_lo)
        frame = self.frame_of_op
        first = np.zeros(n, dtype=bool)
        first[self.frame_starts[self.frame_starts < n]] = True
        hi = self.covered_hi
        prev_hi = np.empty(n, np.int64)
        if n:
            prev_hi[1:] = running_max_in_groups(hi, first)[:-1]
            prev_hi[first] = self.frame_lo[frame[first]]
        before_lo = np.maximum(prev_hi, self.frame_lo[frame]) if n else prev_hi
        last = np.append(self.frame_starts[1:], n) - 1
        has_ops = last >= self.frame_starts
        tail_lo = np.full(len(self.frame_lo), 0, np.int64)
        if n:
            reach = running_max_in_groups(hi, first)
            tail_lo[has_ops] = reach[last[has_ops]]
        tail_lo = np.where(has_ops, np.maximum(tail_lo, self.frame_lo), self.frame_lo)
        lo = np.concatenate([before_lo, tail_lo])
        up = np.concatenate([np.minimum(self.covered_lo, self.frame_hi[frame]) if n else prev_hi, self.frame_hi])
        fr = np.concatenate([frame, np.arange(len(self.frame_lo))])
        keep = up > lo
        return lo[keep], up[keep], fr[keep]

    def tl(self, view_order: np.ndarray) -> np.ndarray:
        """A per-op array in view order, in timeline order."""
        return view_order if self.order is None else view_order[self.order]

    @property
    def overhead(self) -> np.ndarray:
        """Per frame, the wall no op is charged: host lead-in and token sync (runs of ours), and device idle no
        launch explains (the host reaching the call late) - so the ops' charges and the overhead add up to the
        wall exactly, whatever framed the steps."""
        if not len(self.frame_starts):
            return self.wall - self.device_span
        return frame_overhead(self.wall, self.charged, self.frame_starts)

    @property
    def frame_of_op(self) -> np.ndarray:
        """Frame number (index into the frame arrays) of every op, timeline order."""
        return frame_of_ops(self.frame_starts, len(self.step))


def frame_overhead(wall: np.ndarray, charged: np.ndarray, frame_starts: np.ndarray) -> np.ndarray:
    """Per frame, its wall less the charges of its ops (`charged` in timeline order, frames starting at
    `frame_starts`)."""
    return wall - (np.add.reduceat(charged, frame_starts) if len(charged) else 0.0)


def frame_of_ops(frame_starts: np.ndarray, n: int) -> np.ndarray:
    """The frame number of each of `n` ops in timeline order, frames starting at `frame_starts`."""
    return np.repeat(np.arange(len(frame_starts)), np.diff(np.append(frame_starts, n)))


def launch_latency_ns(meta: dict[str, object]) -> int:
    """The host model's launch latency of a run of ours (0 for real profiles: their launches are measured)."""
    host_model = meta.get("host_model")
    latency = host_model.get("latency_ns") if isinstance(host_model, dict) else 0
    return int(latency) if isinstance(latency, int | float) else 0


def has_launches(ops: pa.Table) -> bool:
    """The ops carry host launch records (start and duration)."""
    return has_values(ops, "host_launch_start_ns") and has_values(ops, "host_launch_dur_ns")


def _launches(view: OpView, latency_ns: int) -> np.ndarray | None:
    """(2, n): when each op's host launch (+ latency) let it start, and the launch call's own cost (+ latency),
    view order; -1 where unknown; None without launch records."""
    start, dur = view.ints("host_launch_start_ns"), view.ints("host_launch_dur_ns")
    known = (start >= 0) & (dur >= 0)
    if not known.any():
        return None
    return np.stack([np.where(known, start + dur + latency_ns, -1), np.where(known, dur + latency_ns, -1)])


def blamed_gap(gap: np.ndarray, prev_end: np.ndarray, launch: np.ndarray | None) -> np.ndarray:
    """The part of each op's preceding idle gap its own dispatch explains: the device waited for the launch call
    (it ended after the device became free), for at most that call's cost; the host reaching the call late (a
    dataloader, Python, a sync) is not the kernel's. All of the gap where no launch is recorded."""
    if launch is None:
        return gap
    end, cost = launch
    return np.where(end >= 0, np.clip(np.minimum(end - prev_end, cost), 0, gap), gap)


def _timeline(view: OpView) -> tuple[np.ndarray | None, np.ndarray, np.ndarray, np.ndarray]:
    one_stream = not len(view) or int(view.stream.max()) == int(view.stream.min())
    order = None if one_stream else np.lexsort((view.op_index, view.start, view.step))
    step, start, end = (a if order is None else a[order] for a in (view.step, view.start, view.end))
    first = np.ones(len(step), dtype=bool)
    first[1:] = step[1:] != step[:-1]
    prev_end = np.empty_like(end)
    if len(end):
        prev_end[1:] = running_max_in_groups(end, first)[:-1]
        prev_end[first] = start[first]  # a step's first op: its lead-in is the frame's, not its own
    gap = np.maximum(start - prev_end, 0)
    charged = gap + np.maximum(end - np.maximum(start, prev_end), 0)
    return order, gap, prev_end, charged


def charge(
    view: OpView,
    steps: pa.Table | None,
    frames: pa.Table | None = None,
    launch_latency_ns: int = 0,
    use_launches: bool = True,
) -> Charges:
    """Charges of the ops of `view`; `use_launches=False` charges every gap to the op after it, as for a profile
    without launch records (a diff compares like with like). `steps` (STEPS_SCHEMA, runs of ours) frames each step
    with its host lead-in and sync and names its phase. Without it, `frames` (STEP_FRAMES_SCHEMA) of kind
    ProfilerStep - the host's iteration range in torch / torch_npu profiles - cut the timeline into steps."""
    n = len(view)
    launch = _launches(view, launch_latency_ns) if use_launches else None
    if steps is None and frames is not None:
        host = frames.filter(pc.is_in(frames.column("frame"), pa.array(PARTITIONING_FRAMES)))
        if host.num_rows:
            kinds = set(host.column("frame").to_pylist())
            return _partition(view, host, launch, "ProfilerStep" if "ProfilerStep" in kinds else "iteration")
    order, gap, prev_end, charged_i = _timeline(view)

    def tl(a: np.ndarray) -> np.ndarray:
        return a if order is None else a[order]

    blamed = blamed_gap(gap, prev_end, launch[:, order] if launch is not None and order is not None else launch)
    charged_i = charged_i - (gap - blamed)
    gap = blamed

    step, start, end = tl(view.step), tl(view.start), tl(view.end)
    frame_first = np.ones(n, dtype=bool)
    frame_first[1:] = step[1:] != step[:-1]
    frame_starts = np.flatnonzero(frame_first)
    frame_step = step[frame_starts]
    device_span = (np.maximum.reduceat(end, frame_starts) - start[frame_starts]) if n else np.zeros(0, np.int64)
    wall = device_span.astype(np.float64)
    # phase of each frame as a code into `phase_names` (object arrays of a million strings are slow to compare)
    phase_codes, phase_names = view.codes("phase")
    phase_names = [*phase_names, "all"]
    first_codes = tl(phase_codes)[frame_starts]
    frame_phase = np.where(first_codes >= 0, first_codes, len(phase_names) - 1)
    if steps is not None and steps.num_rows and n:
        # runs of ours: the measured wall per step runs from the host starting it to the token synced
        s_step = int_column(steps, "step")
        s_wall = int_column(steps, "sync_end_ns", 0) - int_column(steps, "host_start_ns", 0)
        at = np.minimum(np.searchsorted(s_step, frame_step), len(s_step) - 1)
        ok = s_step[at] == frame_step
        wall = np.where(ok, np.maximum(s_wall[at], device_span), device_span).astype(float)
        if ok.all():
            s_codes, phase_names = dict_codes(steps.column("phase"))
            frame_phase = s_codes[at]
    op_phase = np.repeat(frame_phase, np.diff(np.append(frame_starts, n))) if n else np.zeros(0, np.int64)
    covered_hi = np.maximum(end, prev_end)
    ours = steps is not None and steps.num_rows
    return Charges(
        order=order,
        step=step,
        gap=gap,
        prev_end=prev_end,
        charged=charged_i.astype(np.float64),
        dur=tl(view.dur).astype(np.float64),
        op_phase=op_phase,
        frame_starts=frame_starts,
        frame_step=frame_step,
        frame_phase=frame_phase,
        device_span=device_span,
        wall=wall,
        phase_names=phase_names,
        framed_by="run" if ours else "ops",
        covered_lo=covered_hi - charged_i.astype(np.int64),
        covered_hi=covered_hi,
        frame_lo=None if ours else start[frame_starts],
        frame_hi=None if ours else start[frame_starts] + device_span,
    )


def _windows(frames: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(step, start, end) of the ProfilerStep frames in time order, overlaps clipped (a frame starts where the one
    before it ended), so they never share a nanosecond."""
    start = int_column(frames, "start_ns", 0)
    order = np.argsort(start, kind="stable")
    step, start = int_column(frames, "step")[order], start[order]
    end = start + np.maximum(int_column(frames, "dur_ns", 0)[order], 0)
    if len(start) > 1:
        start[1:] = np.maximum(start[1:], np.maximum.accumulate(end)[:-1])
        end = np.maximum(end, start)
    return step, start, end


def _partition(view: OpView, frames: pa.Table, launch: np.ndarray | None, framed_by: str) -> Charges:
    """Charges of a profile cut by its ProfilerStep frames (see the module docstring); `launch` as `_launches`."""
    w_step, w_start, w_end = _windows(frames)
    order_all = np.lexsort((view.op_index, view.start))
    start, end = view.start[order_all], view.end[order_all]
    prev_all = np.empty_like(end)
    if len(end):
        prev_all[0] = start[0]
        prev_all[1:] = np.maximum.accumulate(end)[:-1]
    # the frame an op starts in (-1: none)
    w = np.searchsorted(w_start, start, side="right") - 1
    inside = (w >= 0) & (start < w_end[np.clip(w, 0, None)])
    w = np.where(inside, w, -1)
    ws, we = w_start[np.clip(w, 0, None)], w_end[np.clip(w, 0, None)]
    # each op is charged from where the timeline stood (the running max of earlier ends) to its end, within its
    # frame; the first op of a frame is not charged the idle before it (the frame's host lead-in, as in a step)
    first_in_frame = np.ones(len(w), dtype=bool)
    first_in_frame[1:] = w[1:] != w[:-1]
    lo = np.maximum(np.where(first_in_frame, np.maximum(prev_all, start), prev_all), ws)
    hi = np.minimum(np.maximum(end, prev_all), we)
    gap_all = np.maximum(np.minimum(start, hi) - lo, 0)
    unblamed = gap_all - blamed_gap(gap_all, lo, launch[:, order_all] if launch is not None else None)
    lo = lo + unblamed  # the unexplained idle is nobody's charge: the frame's `other`
    keep = np.flatnonzero(inside)
    op_w = w[keep]
    frame_starts = np.flatnonzero(np.append(True, op_w[1:] != op_w[:-1])) if len(keep) else np.zeros(0, np.int64)
    charged = np.maximum(hi - lo, 0)[keep].astype(np.float64)
    if len(keep):
        frame_windows = op_w[frame_starts]
        device_span = np.add.reduceat(charged, frame_starts)
    else:  # no device op in any frame (a CPU-only trace): every frame is a step of host time alone
        frame_windows = np.arange(len(w_step))
        frame_starts = np.zeros(len(w_step), np.int64)
        device_span = np.zeros(len(w_step))
    wall = (w_end - w_start)[frame_windows].astype(np.float64)
    order = order_all[keep]
    phase_codes, phase_names = view.codes("phase")
    phase_names = [*phase_names, "all"]
    first_codes = phase_codes[order][frame_starts] if len(keep) else np.full(len(frame_windows), -1)
    frame_phase = np.where(first_codes >= 0, first_codes, len(phase_names) - 1)
    op_phase = np.repeat(frame_phase, np.diff(np.append(frame_starts, len(keep)))) if len(keep) else op_w
    extent = (min(int(w_start[0]), int(start.min())), max(int(w_end[-1]), int(end.max()))) if len(end) else None
    extent = extent or (int(w_start[0]), int(w_end[-1]))
    return Charges(
        order=order,
        step=w_step[op_w],
        gap=(gap_all - unblamed)[keep],
        prev_end=prev_all[keep],
        charged=charged,
        dur=(end - start)[keep].astype(np.float64),
        op_phase=op_phase,
        frame_starts=frame_starts,
        frame_step=w_step[frame_windows],
        frame_phase=frame_phase,
        device_span=device_span,
        wall=wall,
        phase_names=phase_names,
        framed_by=framed_by,
        outside_ns=max(float(extent[1] - extent[0]) - float(wall.sum()), 0.0),
        outside_ops=int(len(start) - len(keep)),
        empty_frames=int(len(w_step) - len(frame_windows)),
        covered_lo=lo[keep],
        covered_hi=np.maximum(hi, lo)[keep],
        frame_lo=w_start[frame_windows] if len(keep) else None,
        frame_hi=w_end[frame_windows] if len(keep) else None,
    )
