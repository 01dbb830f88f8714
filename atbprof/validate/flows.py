"""Perfetto's FlowTracker, replayed in the importer's global order once the slice sweep knows what each flow event
binds to (`flow_tracker.cc`), vectorised per flow key.

v1 (`s`/`t`/`f`): a flow is keyed by (id, cat, name), so source and sink must agree on all three; an integer id
is used as is, a string id is parsed as hex, anything else is `flow_invalid_id`. `s` with no slice open on its
thread → `flow_no_enclosing_slice` (and the flow never starts); a second `s` with the same key →
`flow_duplicate_id`; `t`/`f` before any `s` → `flow_step_without_start` / `flow_end_without_start`. An `f` is
not closing: several `f` may follow one `s`. An `f` without `"bp": "e"` binds to the next slice that starts on
its thread and looks its source up only then — with no source it silently draws an arrow from slice 0.

v2 (`bind_id` on X/B): `flow_out` starts, `flow_in` ends, both = a step, neither = `flow_without_direction`.

Whether a flow event finds its source depends only on whether an `s` of its key that bound to a slice came
earlier in the import order, so each key's events are sorted by order and a cumulative count answers it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

_HEX = re.compile(r"\s*(0[xX])?[0-9a-fA-F]+")
_U64 = 1 << 64

KIND_START, KIND_STEP, KIND_END = 0, 1, 2
I64 = npt.NDArray[np.int64]


def flow_id(value: Any) -> int | None:
    """Perfetto's flow id of an `id`/`bind_id` value: int as uint64, string parsed as hex, else None (invalid)."""
    if type(value) is int:
        return value % _U64
    if type(value) is str and _HEX.fullmatch(value):
        return int(value, 16) % _U64
    return None


def v2_direction(flow_in: Any, flow_out: Any) -> int | None:
    """KIND_* for a v2 flow from its flow_in/flow_out (only JSON booleans count), None without a direction."""
    fin, fout = flow_in is True, flow_out is True
    if fin and fout:
        return KIND_STEP
    if fout:
        return KIND_START
    if fin:
        return KIND_END
    return None


@dataclass
class FlowEvents:
    """Flow events that reached the FlowTracker, as parallel arrays."""

    idx: I64
    rank: I64
    """Position in the global import order at which the event is resolved (a pending f: its binding slice's)."""
    kind: I64
    key: tuple[I64, I64, I64]
    """The flow key as columns: (namespace·cat, id, name); v1 = (id, cat, name), v2 = bind_id (cat/name −3)."""
    bound: I64
    """The slice event it binds to; −1 when nothing was open on its thread."""
    pending: npt.NDArray[np.bool_]


@dataclass
class FlowResult:
    links: int = 0
    no_enclosing_slice: list[int] = field(default_factory=list)
    end_without_start: list[int] = field(default_factory=list)
    step_without_start: list[int] = field(default_factory=list)
    duplicate_id: list[int] = field(default_factory=list)
    unbound_end: list[int] = field(default_factory=list)
    without_direction: list[int] = field(default_factory=list)
    invalid_id: list[int] = field(default_factory=list)
    bogus_source: list[int] = field(default_factory=list)
    """`f` without bp "e" and no source: Perfetto links it from slice 0."""


def resolve(ev: FlowEvents, res: FlowResult) -> FlowResult:
    if not len(ev.idx):
        return res
    k0, k1, k2 = ev.key
    order = np.lexsort((ev.idx, ev.rank, k2, k1, k0))
    kind, bound, pending, idx = ev.kind[order], ev.bound[order], ev.pending[order], ev.idx[order]
    starts = ((kind == KIND_START) & (bound >= 0)).astype(np.int64)
    group_start = np.ones(len(order), dtype=np.bool_)
    for col in (k0[order], k1[order], k2[order]):
        group_start[1:] &= col[1:] == col[:-1]
    group_start = ~group_start
    group_start[0] = True
    seen = np.cumsum(starts) - starts  # starts strictly before, counted across groups...
    known = (seen - np.maximum.accumulate(np.where(group_start, seen, 0))) > 0  # ...then within the group
    nowhere = bound < 0
    res.no_enclosing_slice = idx[nowhere].tolist()
    live = ~nowhere
    res.duplicate_id = idx[live & (kind == KIND_START) & known].tolist()
    res.step_without_start = idx[live & (kind == KIND_STEP) & ~known].tolist()
    res.end_without_start = idx[live & (kind == KIND_END) & ~pending & ~known].tolist()
    res.bogus_source = idx[live & pending & ~known].tolist()
    links = live & (((kind != KIND_START) & known) | pending)
    res.links = int(links.sum())
    return res


def collect(
    rows_v1: I64,
    ph: npt.NDArray[np.uint8],
    ids: list[Any],
    cat: npt.NDArray[np.int32],
    name: npt.NDArray[np.int32],
    bind_enclosing: npt.NDArray[np.bool_],
    rows_v2: I64,
    v2_values: list[tuple[Any, Any, Any]],
    bound: dict[int, int],
    pending_bound: dict[int, int],
    rank: I64,
) -> tuple[FlowEvents, FlowResult]:
    """The events the FlowTracker sees, and a result holding what never reaches it (invalid, unbound, no dir)."""
    res = FlowResult()
    fids = [flow_id(v) for v in ids]
    valid = np.fromiter((f is not None for f in fids), dtype=np.bool_, count=len(fids))
    res.invalid_id = rows_v1[~valid].tolist()
    v1 = rows_v1[valid]
    v1_fid = np.array([f for f in fids if f is not None], dtype=np.uint64).view(np.int64)
    codes = {ord("s"): KIND_START, ord("t"): KIND_STEP, ord("f"): KIND_END}
    kind_v1 = np.array([codes[c] for c in ph[v1].tolist()], dtype=np.int64)
    pend = (kind_v1 == KIND_END) & ~bind_enclosing[v1]
    target = np.array([pending_bound.get(i, -1) if p else bound.get(i, -1) for i, p in zip(
        v1.tolist(), pend.tolist(), strict=True)], dtype=np.int64)  # fmt: skip
    unbound = pend & (target < 0)
    res.unbound_end = v1[unbound].tolist()
    keep = ~unbound
    v1, v1_fid, kind_v1, pend, target = v1[keep], v1_fid[keep], kind_v1[keep], pend[keep], target[keep]
    rank_v1 = np.where(pend, rank[np.maximum(target, 0)], rank[v1])

    v2_idx: list[int] = []
    v2_fid: list[int] = []
    v2_kind: list[int] = []
    for i, (bind_id, fin, fout) in zip(rows_v2.tolist(), v2_values, strict=True):
        fid = flow_id(bind_id)
        if fid is None:
            continue  # MaybeExtractFlowIdentifier: no usable bind_id, no flow (and no stat)
        direction = v2_direction(fin, fout)
        if direction is None:
            res.without_direction.append(i)
            continue
        v2_idx.append(i)
        v2_fid.append(fid)
        v2_kind.append(direction)
    v2 = np.array(v2_idx, dtype=np.int64)
    idx = np.r_[v1, v2]
    fid_all = np.r_[v1_fid, np.array(v2_fid, dtype=np.uint64).view(np.int64)]
    cat_all = np.r_[cat[v1].astype(np.int64), np.full(len(v2), -3, dtype=np.int64)]  # −3: the v2 namespace
    name_all = np.r_[name[v1].astype(np.int64), np.full(len(v2), -3, dtype=np.int64)]
    events = FlowEvents(
        idx=idx,
        rank=np.r_[rank_v1, rank[v2]] if len(v2) else rank_v1,
        kind=np.r_[kind_v1, np.array(v2_kind, dtype=np.int64)],
        key=(cat_all, fid_all, name_all),
        bound=np.r_[target, np.array([bound.get(i, -1) for i in v2_idx], dtype=np.int64)],
        pending=np.r_[pend, np.zeros(len(v2), dtype=np.bool_)],
    )
    return events, res
