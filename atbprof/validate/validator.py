"""`validate_trace`: one parse, NumPy columns, then Perfetto's JSON importer rules (see the package docstring)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import numpy.typing as npt

from atbprof.arrays import distinct
from atbprof.gc_pause import gc_paused
from atbprof.validate import flows as flowmod
from atbprof.validate.columns import MISSING_VALUE, EventTable, build_table
from atbprof.validate.load import LoadedTrace, load_trace
from atbprof.validate.nesting import PH_B, PH_E, PH_INSTANT, PH_X, SweepResult, sort_key, sweep
from atbprof.validate.report import TraceSummary, ValidationReport
from atbprof.validate.rules import (
    Collector,
    Survivors,
    by_ph,
    check_async,
    check_counters,
    check_fields,
    check_metadata,
    dense_tracks,
    ph_mask,
)


def validate_trace(path: Path | str) -> ValidationReport:
    """Check a Chrome/Perfetto JSON trace (.json / .json.gz, or a run directory) against Perfetto's importer.

    Raises `InputError` for a missing, truncated, corrupt or non-trace file. Never writes anything.
    """
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    with gc_paused():  # millions of small containers: a full GC pass would cost more than the checks
        loaded = load_trace(Path(path))
        timings["parse"] = time.perf_counter() - t0
        table = build_table(loaded.events)
        timings["columns"] = time.perf_counter() - t0 - timings["parse"]
        out = Collector()
        summary = _check(table, loaded, out, timings)
        del table
        loaded.events = []
    elapsed = time.perf_counter() - t0
    return ValidationReport(
        path=str(loaded.path),
        container=loaded.container,
        summary=summary,
        findings=out.findings(),
        elapsed_s=elapsed,
        timings_s=timings,
    )


def _file_level(loaded: LoadedTrace, table: EventTable, out: Collector) -> None:
    for rule in loaded.tolerated:
        out.add(rule, count=1)
    if loaded.display_time_unit is not None:
        out.add("display_time_unit_ignored", count=1, detail=f'"displayTimeUnit": "{loaded.display_time_unit}"')
    if loaded.has_system_trace:
        out.add("system_trace_events", count=1)
    if table.n == 0 and not loaded.has_system_trace:
        out.add("empty_array_refused" if loaded.container == "array" else "empty_trace", count=1)


def _check(table: EventTable, loaded: LoadedTrace, out: Collector, timings: dict[str, float]) -> TraceSummary:
    t = time.perf_counter()
    _file_level(loaded, table, out)
    surv = check_fields(table, out, loaded.container)
    counters, counter_tracks = check_counters(table, surv.alive, out)
    check_metadata(table, surv.alive, out)
    async_slices = check_async(table, surv.alive, out)
    timings["field_rules"] = time.perf_counter() - t

    t = time.perf_counter()
    track = _thread_tracks(table, surv.thread_scoped)
    swept, flow_links = _sweep_and_flows(table, surv, track, out)
    timings["nesting_and_flows"] = time.perf_counter() - t

    alive = surv.alive
    threads = len(distinct(track[surv.thread_scoped])) if surv.thread_scoped.any() else 0
    return TraceSummary(
        events=table.n,
        events_by_ph=by_ph(table),
        slices=swept.slices + async_slices + int(surv.instants_other.sum()),
        counters=counters,
        counter_tracks=counter_tracks,
        flows=flow_links,
        processes=len(distinct(table.pid[alive])) if alive.any() else 0,
        threads=threads,
    )


def _thread_tracks(table: EventTable, thread_scoped: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    """A dense id per (pid, tid) thread track for thread-scoped events (−1 elsewhere)."""
    track = np.full(table.n, -1, dtype=np.int64)
    rows = np.flatnonzero(thread_scoped)
    track[rows] = dense_tracks(table.pid[rows], table.tid[rows])
    return track


def _flow_flags(
    table: EventTable, surv: Survivors, v1_rows: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
    """(f events with "bp": "e", slices carrying a v2 bind_id, those slices' indices)."""
    ph = table.ph
    bind_enclosing = np.zeros(table.n, dtype=np.bool_)
    f_rows = v1_rows[ph[v1_rows] == ord("f")]
    if "bp" in table.keys and len(f_rows):
        bind_enclosing[f_rows] = np.array([b == "e" for b in table.sparse("bp", f_rows)], dtype=np.bool_)
    has_v2 = np.zeros(table.n, dtype=np.bool_)
    v2_rows = np.zeros(0, dtype=np.int64)
    if "bind_id" in table.keys:  # v2 flows on b/n async slices are not followed (async tracks are not swept)
        cand = np.flatnonzero(surv.thread_scoped & ((ph == PH_X) | (ph == PH_B)))
        present = np.array([v is not MISSING_VALUE for v in table.sparse("bind_id", cand)], dtype=np.bool_)
        v2_rows = cand[present] if len(cand) else v2_rows
        has_v2[v2_rows] = True
    return bind_enclosing, has_v2, v2_rows


def _sweep_and_flows(
    table: EventTable, surv: Survivors, track: npt.NDArray[np.int64], out: Collector
) -> tuple[SweepResult, int]:
    ph = table.ph
    x_rows = surv.thread_scoped & (ph == PH_X)
    be_rows = surv.thread_scoped & ((ph == PH_B) | (ph == PH_E))
    v1 = surv.thread_scoped & ph_mask(table, "stf")
    v1_rows = np.flatnonzero(v1)
    ph_eff = np.where(surv.instants_thread, np.uint8(PH_INSTANT), ph).astype(np.uint8)
    dur = np.where(x_rows, table.dur, 0)
    key = sort_key(ph_eff, dur)
    bind_enclosing, has_v2, v2_rows = _flow_flags(table, surv, v1_rows)

    rows = np.flatnonzero(x_rows | be_rows | surv.instants_thread | v1)
    order = rows[np.lexsort((key[rows], table.ts[rows], track[rows]))]  # stable: file order breaks the last ties
    exact = {int(v) for v in distinct(track[be_rows | (x_rows & (table.dur < 0))]).tolist()}
    swept = sweep(order, track, ph_eff, table.ts, dur, table.name, table.cat, bind_enclosing, has_v2, exact)
    _report_sweep(table, swept, int(x_rows.sum()), out)

    # the importer's global order (ts, key, index), needed only among flow events and the slices pending f bind to
    targets = np.fromiter(swept.pending_bound.values(), dtype=np.int64, count=len(swept.pending_bound))
    relevant = distinct(np.r_[v1_rows, v2_rows, targets])
    rank = np.full(table.n, -1, dtype=np.int64)
    rank[relevant[np.lexsort((key[relevant], table.ts[relevant]))]] = np.arange(len(relevant))
    v2_values = list(zip(*(table.sparse(k, v2_rows) for k in ("bind_id", "flow_in", "flow_out")), strict=True))
    events, res = flowmod.collect(
        v1_rows, ph, table.sparse("id", v1_rows), table.cat, table.name, bind_enclosing, v2_rows, v2_values,
        swept.bound, swept.pending_bound, rank,
    )  # fmt: skip
    flowmod.resolve(events, res)
    _report_flows(res, swept, out)
    return swept, res.links


def _report_flows(res: flowmod.FlowResult, swept: SweepResult, out: Collector) -> None:
    out.add("flow_invalid_id", res.invalid_id)
    out.add("flow_no_enclosing_slice", res.no_enclosing_slice)
    out.add("flow_end_without_start", res.end_without_start)
    out.add("flow_end_from_first_slice", res.bogus_source)
    out.add("flow_step_without_start", res.step_without_start)
    out.add("flow_duplicate_id", res.duplicate_id)
    out.add("flow_end_unbound", res.unbound_end)
    out.add("flow_without_direction", res.without_direction)
    invalid = set(res.invalid_id)
    out.add("flow_bound_to_ended_slice", [i for i in swept.stale if i not in invalid])


def _count(rows: list[int]) -> str:
    return f"{len(rows):,}"


def _report_sweep(table: EventTable, swept: SweepResult, n_x: int, out: Collector) -> None:
    if swept.overlaps:
        first, other = min(swept.overlaps)
        a_end, b_end = table.ts[first] + table.dur[first], table.ts[other] + table.dur[other]
        detail = (
            f"{_count([o for o, _ in swept.overlaps])} of {n_x:,} X; e.g. #{first} {table.name_of(first)!r} "
            f"[{table.ts[first]:,}, {a_end:,}] ns starts inside #{other} {table.name_of(other)!r} "
            f"[{table.ts[other]:,}, {b_end:,}] ns and ends {a_end - b_end:,} ns after it"
        )
        out.add("overlapping_slices", [o for o, _ in swept.overlaps], detail)
    mismatched = sum(swept.unmatched_end_had_open)
    detail = f"{mismatched:,} of them while a B with another name/cat was open" if mismatched else ""
    out.add("unmatched_end", swept.unmatched_ends, detail)
    out.add("unclosed_begin", swept.unclosed_begins)
    out.add("misplaced_end", swept.misplaced_ends)
