"""The device timeline cut into steps, each op charged the time the timeline advanced while it ran.

Each op is charged the idle gap before it (the device waited for it - charged to the op waited for) plus the part
of its duration no earlier op on any stream already covered, so within a step the charges add up to first-start ..
last-end. A step's wall is that device span, or for runs of ours the host frame (host start .. token synced) when
longer; the difference is the step's `overhead` (host lead-in and token sync). Shared by `attribute` (where the
time went) and `atbprof diff` (what changed, step by step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.analyze.view import OpView, dict_codes, int_column, running_max_in_groups


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

    def tl(self, view_order: np.ndarray) -> np.ndarray:
        """A per-op array in view order, in timeline order."""
        return view_order if self.order is None else view_order[self.order]

    @property
    def overhead(self) -> np.ndarray:
        return self.wall - self.device_span

    @property
    def frame_of_op(self) -> np.ndarray:
        """Frame number (index into the frame arrays) of every op, timeline order."""
        n = len(self.step)
        return np.repeat(np.arange(len(self.frame_starts)), np.diff(np.append(self.frame_starts, n)))


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


def charge(view: OpView, steps: pa.Table | None, frames: pa.Table | None = None) -> Charges:
    """Charges of the ops of `view`; `steps` (STEPS_SCHEMA, runs of ours) frames each step with its host lead-in
    and sync and names its phase. Without it, `frames` (STEP_FRAMES_SCHEMA) of kind ProfilerStep - the host's
    iteration range in torch / torch_npu profiles - give the wall of their steps the same way."""
    n = len(view)
    order, gap, prev_end, charged_i = _timeline(view)

    def tl(a: np.ndarray) -> np.ndarray:
        return a if order is None else a[order]

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
    elif frames is not None and frames.num_rows and n:
        host = frames.filter(pc.equal(frames.column("frame"), "ProfilerStep"))
        if host.num_rows:
            f_step = int_column(host, "step")
            order_f = np.argsort(f_step, kind="stable")
            f_step, f_dur = f_step[order_f], int_column(host, "dur_ns", 0)[order_f]
            at = np.minimum(np.searchsorted(f_step, frame_step), len(f_step) - 1)
            ok = f_step[at] == frame_step
            wall = np.where(ok, np.maximum(f_dur[at], device_span), device_span).astype(float)
    op_phase = np.repeat(frame_phase, np.diff(np.append(frame_starts, n))) if n else np.zeros(0, np.int64)
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
    )
