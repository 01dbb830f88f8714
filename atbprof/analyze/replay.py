"""What fusing some chains saves an eager profile, from its own timeline replayed without them.

In eager mode a kernel starts when the kernel before it on its stream has finished and when its launch call has
ended, whichever is later. When the host is the bottleneck (decode: 5-20 us kernels behind 20-50 us launches),
the device idles between kernels, and the idle is not always right before the chain that a fusion shortens: the
host ran ahead during a long MatMul, launched the chain's kernels into the queue, and the idle shows up later.
Summing a chain's own waits then under-counts what removing its launches saves (by half on a host-bound decode).

So the timeline is replayed: each chain keeps its first kernel, which becomes the fused kernel (its modelled
duration), and loses the others; every launch after the chain's last one moves earlier by the host time the
chain's launches took beyond one launch call; a kernel that was waiting for its launch (the launch ended after the
kernel before it finished) starts at its moved launch, one held by anything else (another stream, a
synchronisation) starts when it did. The end of each step, over its streams, gives the step's saving, shared by
the step's chains in proportion to what each alone removes (device time, or host time where that is larger).
Pure: arrays in, arrays out.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from atbprof.analyze.view import OpView, RowsOf
from atbprof.arrays import distinct
from atbprof.importers.optypes import is_hccl_type

_MISSING = np.iinfo(np.int64).min


def _group_ends(ready: np.ndarray, dur: np.ndarray, first: np.ndarray) -> np.ndarray:
    """End of the last kernel of each group (groups start where `first` is set): kernel i starts at the later of
    `ready[i]` and the end of the kernel before it, so the group ends at max_i(ready_i + the durations from i on)."""
    starts = np.flatnonzero(first)
    csum = np.cumsum(dur)
    before = csum - dur  # durations before i (from the table's start)
    total = np.add.reduceat(dur, starts) if len(starts) else np.zeros(0)
    group_base = before[starts]  # durations before each group
    # ready_i + (durations of i..end of its group) = ready_i - (before_i - base) + total
    base = np.repeat(group_base, np.diff(np.append(starts, len(dur))))
    value = ready - (before - base)
    return np.maximum.reduceat(value, starts) + total if len(starts) else np.zeros(0)


def _shifts(step: np.ndarray, at: np.ndarray, e_step: np.ndarray, e_at: np.ndarray, e_shift: np.ndarray) -> np.ndarray:
    """How much earlier each launch (step, call start `at`) happens: the shifts of the chains of its own step whose
    last launch ended before it (a step's saving is its own; the next step starts when the host gets to it)."""
    if not len(e_at):
        return np.zeros(len(step))
    steps = distinct(np.concatenate([step, e_step]))
    lo = int(min(at.min(), e_at.min()))
    width = int(max(at.max(), e_at.max())) - lo + 2
    # one int64 key per (step, time); steps x width stays far below 2**63 for any real profile
    key = np.searchsorted(steps, step).astype(np.int64) * width + (at - lo)
    e_key = np.searchsorted(steps, e_step).astype(np.int64) * width + (e_at - lo)
    order = np.argsort(e_key, kind="stable")
    e_key, e_shift, e_rank = e_key[order], e_shift[order], np.searchsorted(steps, e_step[order])
    total = np.cumsum(e_shift)
    # the running sum restarts at each step: subtract what the steps before had
    first_of_step = np.searchsorted(e_rank, e_rank, side="left")
    before_step = np.where(first_of_step > 0, total[first_of_step - 1], 0.0)
    running = total - before_step
    hit = np.searchsorted(e_key, key, side="right") - 1
    same = (hit >= 0) & (e_rank[np.maximum(hit, 0)] == np.searchsorted(steps, step))
    return np.where(same, running[np.maximum(hit, 0)], 0.0)


def replay_savings(
    view: OpView,
    findings: pa.Table,
    rows: np.ndarray,
    fused_ns: np.ndarray,
    order: list[int] | None = None,
    folds: dict[int, list[int]] | None = None,
    calls: np.ndarray | None = None,
) -> np.ndarray | None:
    """Per finding (NaN where `rows` is not set): its share of what replaying the timeline without the chains of
    `rows` (each chain one kernel of `fused_ns`) saves its step. None when the profile records no launches.

    Chains are applied in `order` (default: row order); one that shares kernels with an earlier one keeps the
    first of its kernels still there (the Add of an Add->Norm after the decomposed norm it ends with became one
    kernel); `folds`: row -> op_index of kernels an earlier chain left that this one's fused kernel takes in too
    (a Norm->MatMul folding the AddRmsNorm an Add->Norm finding made); `calls`: per finding, the kernels its fused
    form launches (default one; a MoE layer's experts become five), which keep their launches."""
    at = view.ints("host_launch_start_ns", fill=_MISSING)
    known = at != _MISSING
    if not len(view) or not known.any() or not rows.any():
        return None
    cost = view.ints("host_launch_dur_ns", fill=0)
    launched = np.where(known, at + cost, _MISSING)
    by_launch, delay = _waited_for_launch(view, known, launched)
    # when each kernel was held back in the profile: a kernel that waited started when it could (its start); one
    # queued behind the kernel before it (no gap) only follows that one
    held = np.where(view.gap > 0, view.start, -np.inf)
    held[view.group_first] = view.start[view.group_first]
    held = held.astype(float)

    k = findings.num_rows
    rows_of = RowsOf(view.op_index)
    # HCCL tasks: an MC2 kernel's call costs an aclnn launch, not its collective's (the AllGather of an
    # AllGatherMatmul comes first)
    hccl = np.array([is_hccl_type(n) for n in view.type_names] + [False])[view.type_codes]
    members = findings.column("op_indices").to_pylist()
    dur_new = view.dur.astype(float)
    gone = np.zeros(len(view), bool)
    event_step: list[int] = []
    event_at: list[int] = []
    event_shift: list[float] = []
    alone = np.zeros(k)
    removed = np.zeros(len(view))  # host time the chains applied so far removed, at the kernel each left
    chosen = set(np.flatnonzero(rows).tolist())
    for i in [r for r in order if r in chosen] if order is not None else sorted(chosen):
        pos = np.concatenate([rows_of.rows(members[i]), rows_of.rows((folds or {}).get(i, []))])
        pos = distinct(pos[~gone[pos]])
        if not len(pos):
            continue
        pos = pos[np.argsort(view.start[pos], kind="stable")]  # the first to start becomes the fused kernel
        kernels = float(dur_new[pos].sum())
        dur_new[pos[0]] = fused_ns[i]
        dur_new[pos[1:]] = 0.0
        gone[pos[1:]] = True
        shift = 0.0
        if known[pos].all():
            # the fused call costs what the chain's first aclnn call did (not an HCCL collective's launch);
            # host time an earlier chain already removed inside this span (a kernel it left, taken in) is not
            # removed twice
            prior = float(removed[pos].sum())
            span = float(launched[pos].max()) - float(at[pos].min())
            keep = float(calls[i]) if calls is not None else 1.0
            own = pos[~hccl[pos]]  # the fused call is an aclnn launch: its first non-collective member's
            shift = max(span - keep * float(cost[own[0] if len(own) else pos[0]]) - prior, 0.0)
            removed[pos] = 0.0
            removed[pos[0]] = prior + shift
            event_step.append(int(view.step[pos[0]]))
            event_at.append(int(launched[pos].max()))
            event_shift.append(shift)
        alone[i] = max(kernels - fused_ns[i], shift, 0.0)
    shift_of = _shifts(
        view.step, np.where(known, at, 0), np.array(event_step), np.array(event_at), np.array(event_shift)
    )
    # every kernel still waits for its (moved) launch plus the device's usual delay after one, which a kernel that
    # was queued behind others may now meet (never later than it started before: no chain, no change)
    after_call = np.where(known, launched + np.minimum(delay, view.start - launched), -np.inf).astype(float)
    ready_old = held
    ready_new = np.maximum(np.where(by_launch, -np.inf, held), after_call - shift_of)
    ready_new[gone] = -np.inf
    old_end = _group_ends(ready_old, view.dur.astype(float), view.group_first)
    new_end = _group_ends(ready_new, dur_new, view.group_first)
    group_step = view.step[view.group_first]
    steps, inverse = np.unique(group_step, return_inverse=True)
    old_step = np.full(len(steps), -np.inf)
    new_step = np.full(len(steps), -np.inf)
    np.maximum.at(old_step, inverse, old_end)
    np.maximum.at(new_step, inverse, new_end)
    saved = np.maximum(old_step - new_step, 0.0)
    step_of = findings.column("step").fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    out = np.full(k, np.nan)
    sel = np.flatnonzero(rows)
    out[sel] = _shared(steps, saved, step_of[sel], alone[sel])
    return out


def _waited_for_launch(view: OpView, known: np.ndarray, launched: np.ndarray) -> tuple[np.ndarray, float]:
    """Which kernels waited for their launch, and the device's usual delay from a launch call's end to its kernel's
    start (the median over those)."""
    prev_end = view.start - view.gap
    # it waited, and its launch ended after the kernel before it had finished
    by_launch = known & ~view.group_first & (view.gap > 0) & (launched > prev_end)
    delay = float(np.median((view.start - launched)[by_launch])) if by_launch.any() else 0.0
    # a group's first kernel waited for its launch when it started within that delay (+1 us) of it; so did a kernel
    # that waited and started that soon after its launch ended, even if the launch ended just before the kernel in
    # front of it finished (a 2 us RoPE launched 2 us before a 43 us MatMul ended, started 5 us after its launch)
    soon = known & (view.start - launched <= delay + 1000)
    by_launch |= soon & (view.group_first | (view.gap > 0))
    return by_launch, delay


def _shared(steps: np.ndarray, saved: np.ndarray, step_of: np.ndarray, alone: np.ndarray) -> np.ndarray:
    """Each chain's share of its step's saving, in proportion to what it alone removes (a chain in a step the
    timeline does not know keeps that)."""
    where = np.clip(np.searchsorted(steps, step_of), 0, max(len(steps) - 1, 0))
    found = steps[where] == step_of if len(steps) else np.zeros(len(step_of), bool)
    weight_sum = np.zeros(len(steps))
    np.add.at(weight_sum, where[found], alone[found])
    share = np.where(weight_sum[where] > 0, alone / np.maximum(weight_sum[where], 1e-9), 0.0)
    return np.where(found, saved[where] * share, alone)
