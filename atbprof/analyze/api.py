"""`analyze(profile)`: detect unfused norms, attribute the measured time, estimate what fusing them saves."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.analyze.attribute import attribute
from atbprof.analyze.categories import norm_symbols
from atbprof.analyze.charges import launch_latency_ns
from atbprof.analyze.detect import detect_framework, detect_kernels
from atbprof.analyze.digest import FindingsDigest
from atbprof.analyze.graph_edges import edges_for_run, run_config
from atbprof.analyze.group_sums import GroupSums, group_sums
from atbprof.analyze.patterns import KINDS, OPPORTUNITY_KINDS, PatternSet, load_patterns
from atbprof.analyze.report import AnalysisReport, Breakdown, Finding, Occurrence, PhaseCount, Source, WhatIf
from atbprof.analyze.view import OpView, RowsOf, has_values, int_column
from atbprof.analyze.whatif import resimulate, whatif_device_model, whatif_resimulated
from atbprof.arrays import distinct
from atbprof.fusion.versions import checked_release, for_release, release
from atbprof.importers.base import Profile, import_warnings
from atbprof.numerics.report import parse_report
from atbprof.optable.schema import OPS_SCHEMA

_LABEL = {
    "decomposed_rmsnorm": "decomposed RMSNorm",
    "decomposed_layernorm": "decomposed LayerNorm",
    "add_norm": "Add->Norm",
    "norm_matmul": "Norm->MatMul",
    "unfused_op": "unfused",
    "fused_norm": "fused norm",
    "fused_op": "fused op",
}
FRAMEWORK_METHOD = "host time of the calls: a fused call costs about the longest of them"
_API_HINT = {
    "decomposed_rmsnorm": "torch_npu.npu_rms_norm",
    "decomposed_layernorm": "torch.nn.functional.layer_norm (one LayerNormV3 kernel)",
    "add_norm": "torch_npu.npu_add_rms_norm / npu_add_layer_norm",
    "norm_matmul": "a fused Norm+MatMul kernel (ATB RmsNorm + Linear, graph mode)",
}


_PORTABLE = {
    "torch_npu.npu_rms_norm": "torch.nn.functional.rms_norm",
    "torch_npu.npu_add_rms_norm": "a fused add + RMSNorm kernel",
    "torch_npu.npu_add_layer_norm": "a fused add + LayerNorm kernel",
}


TypesOf = Callable[[np.ndarray], dict[int, str]]
"""op_index values -> their op types (those found): the examples' kernels, looked up in one go."""


def view_types(view: OpView) -> TypesOf:
    """The op types of op_index values, from the view of the whole table."""
    rows_of = RowsOf(view.op_index)

    def types_of(indices: np.ndarray) -> dict[int, str]:
        found = rows_of.rows(indices)
        return {int(view.op_index[f]): view.type_names[view.type_codes[f]] for f in found.tolist()}

    return types_of


def _framework_names(framework: pa.Table | None, indices: list[int]) -> list[str]:
    if framework is None:
        return ["?"] * len(indices)
    index = int_column(framework, "index", 0)
    hit = np.flatnonzero(np.isin(index, np.array(indices, dtype=np.int64)))
    names = framework.column("name").take(pa.array(hit)).to_pylist()
    by_index = {int(index[h]): str(nm) for h, nm in zip(hit.tolist(), names, strict=True)}
    return [by_index.get(i, "?") for i in indices]


def _catalogue_of(patterns: PatternSet) -> dict[str, tuple[str, str]]:
    """pattern name -> (catalogue row, the call that makes its fused kernel) for the catalogue's patterns."""
    from atbprof.fusion.catalogue import fusion_catalogue

    rows = {r.name: r for r in fusion_catalogue().fusions}
    out: dict[str, tuple[str, str]] = {}
    for level in (patterns.kernel, patterns.framework):
        for cp in level.patterns:
            row = rows.get(cp.spec.fusion)
            if row is not None:
                out[cp.spec.name] = (row.name, " / ".join(f"torch_npu.{a}" for a in row.api))
    return out


def _findings(
    sums: list[GroupSums],
    types_of: TypesOf,
    framework: pa.Table | None,
    method: str,
    patterns: PatternSet,
    release: tuple[int, int] | None = None,
) -> list[Finding]:
    if not sums:
        return []
    catalogue = _catalogue_of(patterns)
    # the op types of the kernel-level examples' kernels in one lookup
    members = [i for s in sums if s.level == "kernel" for r in s.examples for i in r["op_indices"]]
    kernel_types = types_of(distinct(np.asarray(members, np.int64)))
    out = []
    for s in sums:
        by_phase = {
            ph: PhaseCount(
                count=count,
                steps=n_steps,
                per_step=round(count / n_steps, 3),
                time_us=round(time / 1e3, 3),
                est_saving_us=round(saved / 1e3, 3),
            )
            for ph, count, n_steps, time, saved in s.by_phase
        }
        examples = []
        for r in s.examples:
            ix = r["op_indices"]
            types = [kernel_types.get(i, "?") for i in ix] if s.level == "kernel" else _framework_names(framework, ix)
            examples.append(
                Occurrence(
                    step=r["step"],
                    phase=r["phase"],
                    stream_id=r["stream_id"],
                    layer=r["layer"],
                    role=r["role"],
                    start_us=round(r["start_ns"] / 1e3, 3),
                    op_indices=ix,
                    op_types=types,
                    time_us=round(r["time_ns"] / 1e3, 3),
                    est_saving_us=None if r["est_saving_ns"] is None else round(r["est_saving_ns"] / 1e3, 3),
                )
            )
        kind, level, pattern, fused_as = s.kind, s.level, s.pattern, s.fused_as
        call = catalogue[pattern][1] if pattern in catalogue else _API_HINT.get(kind)
        if kind in OPPORTUNITY_KINDS and level == "kernel":  # the names the profile's CANN release uses
            fused_as, call = for_release(fused_as, call, release)
        out.append(
            Finding(
                kind=kind,  # type: ignore[arg-type]  # the detector's names: Finding checks them
                level=level,  # type: ignore[arg-type]
                pattern=pattern,
                fused_as=fused_as,
                rule=s.rule,
                fusion=catalogue[pattern][0] if pattern in catalogue else None,
                api=call if kind in OPPORTUNITY_KINDS else None,
                opportunity=kind in OPPORTUNITY_KINDS,
                count=s.count,
                time_us=round(s.time_ns / 1e3, 3),
                # framework level: the device time of the kernels the calls launched, the host time apart
                kernel_us=round(s.kernel_ns / 1e3, 3),
                host_us=round(s.host_ns / 1e3, 3) if level == "framework" else None,
                device_kernels=s.device_kernels,
                wait_us=round(s.wait_ns / 1e3, 3),
                launch_us=round(s.launch_ns / 1e3, 3) if s.launch_ns is not None else None,
                est_saving_us=round(s.saving_ns / 1e3, 3) if s.saving_ns is not None else None,
                est_method=(
                    (method if level == "kernel" or method.startswith("measured") else FRAMEWORK_METHOD)
                    if s.estimated
                    else "not estimated: no device model of this device, and the trace alone does not say"
                )
                if kind in OPPORTUNITY_KINDS
                else "already fused",
                evidence=s.evidence,
                by_phase=by_phase,
                examples=examples,
            )
        )
    out.sort(key=lambda f: (not f.opportunity, f.level != "kernel", KINDS.index(f.kind), -f.time_us))
    return out


def _summary(name: str, findings: list[Finding], breakdown: Breakdown, whatif: WhatIf) -> str:
    scope = next((p for p in breakdown.phases if p.phase == breakdown.scope), None)
    per_token = scope is not None and scope.phase == "decode"
    unit = "per decode token" if per_token else ("per step" if scope and scope.steps > 1 else "")
    # the level the total counts (whatif.counted): kernel-level opportunities if any, else framework-level ones - a
    # trace whose kernels are all fused norms may still have framework-level chains to fuse (Add -> F.rms_norm)
    # (the trace what-if of a GPU counts framework-level chains first: their calls launched the kernels, whereas
    # kernels alone include a previous step's tail whose launches the trace missed)
    prefer = ("framework", "kernel") if whatif.method == "trace" else ("kernel", "framework")
    levels = [lv for lv in prefer if any(f.opportunity and f.level == lv for f in findings)]
    level = levels[0] if levels else ("kernel" if any(f.level == "kernel" for f in findings) else "framework")

    def per_scope(f: Finding) -> float:
        """Occurrences per step of the scope (per decode token for runs of ours), else in total."""
        in_scope = f.by_phase.get(breakdown.scope)
        return in_scope.per_step if in_scope and scope and scope.steps > 1 else f.count

    def count(f: Finding) -> str:
        if f.kind == "unfused_op":
            return f"{per_scope(f):g} unfused {f.fusion or f.fused_as}"
        return f"{per_scope(f):g} {f.fused_as if f.kind in ('fused_norm', 'fused_op') else _LABEL[f.kind]}"

    opp = [f for f in findings if f.opportunity and f.level == level]
    fused = [f for f in findings if not f.opportunity and f.level == level]
    head = f"{name}: " + (
        f"{sum(per_scope(f) for f in opp):g} fusion opportunities {unit}".rstrip()
        + " ("
        + ", ".join(count(f) for f in opp)
        + ")"
        if opp
        else "no missed fusions"
    )
    parts = [head]
    if scope is not None and scope.norm.ops:
        nc = scope.norm
        what = "ms/token" if per_token else "ms"
        value = nc.per_step_ms if per_token else nc.total_us / 1e3
        total = scope.per_step_ms if per_token else scope.span_us / 1e3
        waited = "launch" if nc.launch_source == "host launch" else "wait"
        parts.append(
            f"norm-related {value:.2f} {what} = {nc.span_share:.1%} of {total:.2f} {what} "
            f"({nc.kernel_share:.0%} kernel, {nc.launch_share:.0%} {waited})"
        )
    if opp and whatif.method != "none":
        if whatif.decode_ms_per_token_after is not None and whatif.decode_ms_per_token_before:
            b, a = whatif.decode_ms_per_token_before, whatif.decode_ms_per_token_after
            parts.append(f"fusing them: {b:.2f} -> {a:.2f} ms/token ({(a - b) / b:+.1%}, {whatif.method})")
        else:
            if whatif.method == "trace":
                how = "measured from the trace: host time removed, capped by what the device gives"
            elif level == "kernel":
                how = f"{whatif.method} on {whatif.device}"
            else:
                how = "host time of the framework calls"
            parts.append(
                f"fusing them saves ~{whatif.total_saving_us / 1e3:.2f} ms ({whatif.saving_share:.1%} of "
                f"the span, {how})"
            )
    if fused:
        parts.append("already fused: " + ", ".join(count(f) for f in fused))
    return "; ".join(parts)


def framework_timeline(framework: pa.Table) -> pa.Table:
    """Top-level framework ops (depth 0) as an op table, for profiles that recorded no device kernels."""
    top = framework.filter(pc.equal(framework.column("depth"), 0))
    names = top.column("name").cast(pa.string())
    cols: dict[str, pa.Array | pa.ChunkedArray] = {
        "op_index": pa.array(range(top.num_rows), pa.int64()),
        "step": top.column("step"),
        "op_name": names.dictionary_encode(),
        "op_type": names.dictionary_encode(),
        "task_start_ns": top.column("start_ns"),
        "task_dur_ns": top.column("dur_ns"),
        "input_shapes": top.column("input_shapes").dictionary_encode(),
    }
    arrays = [cols[f.name].cast(f.type) if f.name in cols else pa.nulls(top.num_rows, f.type) for f in OPS_SCHEMA]
    table = pa.Table.from_arrays(arrays, schema=OPS_SCHEMA)
    return table.sort_by("task_start_ns")


def _not_estimated(why: str, span_us: float) -> WhatIf:
    return WhatIf(
        method="none",
        device=None,
        assumption=why,
        span_us=span_us,
        total_saving_us=0.0,
        span_after_us=span_us,
        saving_share=0.0,
        decode_ms_per_token_before=None,
        decode_ms_per_token_after=None,
        steps=[],
    )


def _not_ascend(profile: Profile) -> str | None:
    """What a Kineto trace with device kernels ran on when it is not an Ascend NPU (its deviceProperties), else
    None. A CPU-only trace keeps the estimate of its framework-level findings (host time of the aten calls)."""
    if profile.kind != "kineto" or not profile.ops.num_rows:
        return None
    devices = profile.meta.get("devices")
    names = [str(d) for d in devices if d] if isinstance(devices, list) else []
    if any("ascend" in n.lower() or "910" in n for n in names):
        return None
    return f"{', '.join(sorted(set(names)))} (deviceProperties)" if names else "a GPU (no deviceProperties)"


@dataclass(frozen=True)
class TableFacts:
    """What the report says of the op table itself (its Source), and how to name the examples' kernels."""

    ops: int
    streams: list[int]
    has_roles: bool
    has_launch: bool
    has_shapes: bool
    types_of: TypesOf
    view: OpView | None = None  # the whole table's view, where it is held (the device-model what-if reads it)


def analyze(
    profile: Profile,
    *,
    patterns: PatternSet | None = None,
    patterns_file: str | None = None,
    top: int = 10,
    whatif: bool = True,
    cann_version: str | None = None,
) -> AnalysisReport:
    """Analyze a profile (any importer's `Profile`). `top` bounds the rows each list of the report keeps;
    `whatif=False` skips the estimate (no re-simulation); `cann_version` (default: the one the profile records)
    names the fused kernels a missed fusion would use as that CANN release names them."""
    patterns = patterns or load_patterns(patterns_file)
    ops, meta = profile.ops, profile.meta
    notes, on_release = profile_notes(profile, cann_version)
    ours = profile.kind == "atbprof-run"
    ran_on = _not_ascend(profile)  # a GPU / MTIA trace: what it ran on
    view = OpView.build(ops)
    edges = None
    if ours and has_norm_ops(view.type_names, patterns):
        edges, why = edges_for_run(meta, ops)
        if why:
            notes.append(why)
    found = detect_kernels(ops, patterns, edges, view=view)
    if profile.framework is not None and profile.framework.num_rows:
        from atbprof.analyze.launched import with_device_time

        framework = detect_framework(profile.framework, patterns)
        if ran_on is not None:
            # the catalogue's other fusions are torch_npu calls: a GPU's eager RoPE or attention has other fused
            # forms, which the trace what-if does not price (it prices norm chains)
            framework = framework.filter(pc.invert(pc.equal(framework.column("kind"), "unfused_op")))
        found = pa.concat_tables([found, framework])
        found = with_device_time(found, profile.framework, ops)
    latency = launch_latency_ns(meta)
    timeline, timeline_view = ops, view
    if not ops.num_rows and profile.framework is not None and profile.framework.num_rows:
        # a CPU-only trace: the top-level framework ops are the timeline there is to attribute
        timeline = framework_timeline(profile.framework)
        timeline_view = OpView.build(timeline)
        notes.append("no device kernels in this profile: the breakdown covers the top-level framework ops (host)")
    breakdown = attribute(
        timeline,
        profile.steps,
        found,
        patterns,
        top,
        latency,
        view=timeline_view,
        frames=profile.step_frames,
        host_calls=profile.host_calls,
        framework=profile.framework,
    )
    if timeline is not ops:  # host ops only: no tokens, no per-token figures
        breakdown = breakdown.model_copy(update={"step_kind": "host"})
    facts = TableFacts(
        ops=ops.num_rows,
        streams=sorted({int(s) for s in distinct(view.stream).tolist() if s >= 0}),
        has_roles=has_values(ops, "role"),
        has_launch=has_values(ops, "host_launch_dur_ns"),
        has_shapes=has_values(ops, "input_shapes"),
        types_of=view_types(view),
        view=view,
    )
    return report_of(profile, patterns, found, breakdown, facts, notes, on_release, top, whatif, edges is not None)


def has_norm_ops(type_names: list[str], patterns: PatternSet) -> bool:
    """Does the table have norm kernels, or an op a decomposed norm's patterns need (its Add->Norm / Norm->MatMul
    edges are then worth confirming from the run's graph)?"""
    lut = np.append(patterns.kernel.lookup(type_names), np.uint8(0))
    chains = {
        s
        for cp in patterns.kernel.patterns
        if cp.spec.kind.startswith("decomposed")
        for t in cp.required[:1]
        for s in t
    }
    symbols = sorted(norm_symbols(patterns) | chains)
    return bool(np.isin(lut, np.array(symbols, dtype=np.uint8)).any())


def profile_notes(profile: Profile, cann_version: str | None) -> tuple[list[str], tuple[int, int] | None]:
    """The report's notes on the profile as imported, and the CANN release its fused kernels are named for."""
    notes: list[str] = import_warnings(profile)
    on_release, release_note = _release(cann_version, profile.meta.get("cann_version"))
    if release_note:
        notes.append(release_note)
    warmup = profile.meta.get("warmup_launches")
    if isinstance(warmup, dict) and warmup.get("kernels"):
        notes.append(
            f"{warmup['kernels']:,} first launch(es) of a kernel took {warmup['host_ns'] / 1e6:,.1f} ms beyond a "
            "usual launch: loading the kernel's code (warm-up), not launch overhead a fusion would remove; counted "
            "as usual launches"
        )
    graphs = profile.meta.get("graph_launches")
    if isinstance(graphs, dict) and graphs.get("kernels"):
        notes.append(
            f"{graphs['kernels']:,} kernels were replayed from {graphs['launches']:,} graph launch(es) "
            f"({graphs['host_ns'] / 1e6:,.3f} ms of host time): a launch is one host cost, shared evenly among the "
            "kernels it launched, so a kernel's launch time is its share, not the whole call"
        )
    return notes, on_release


def report_of(
    profile: Profile,
    patterns: PatternSet,
    found: pa.Table | FindingsDigest,
    breakdown: Breakdown,
    facts: TableFacts,
    notes: list[str],
    on_release: tuple[int, int] | None,
    top: int,
    whatif: bool,
    has_graph: bool,
) -> AnalysisReport:
    """The report from the findings and the breakdown of a profile's table: the findings' occurrences
    (FINDINGS_SCHEMA) of a table held whole, or the digest of those of a run analysed in parts (analyze/chunked.py,
    whose report then holds no occurrences)."""
    digest = found if isinstance(found, FindingsDigest) else None
    meta = profile.meta
    ours = profile.kind == "atbprof-run"
    ran_on = _not_ascend(profile)
    if breakdown.steps_from == "iteration" and isinstance(rule := meta.get("steps_from"), str):
        breakdown = breakdown.model_copy(update={"steps_rule": rule})
    cfg = run_config(meta) if ours else None
    summary = meta.get("summary")
    if not whatif:
        wi = _not_estimated("what-if not requested", breakdown.span_us)
    elif cfg is not None and isinstance(summary, dict):
        if digest is not None:
            wi, shares = resimulate(digest.rule_facts(), cfg, summary, breakdown.span_us)
            digest.estimated(shares)
        else:
            found, wi = whatif_resimulated(found, cfg, summary, breakdown.span_us)
    elif digest is not None:
        raise AssertionError("a run read in parts has its config and summary: it is re-simulated")
    elif ran_on is not None:
        # the device model is Ascend's: a GPU / MTIA trace's saving is measured from the trace itself instead
        from atbprof.analyze.whatif_trace import whatif_from_trace
        from atbprof.device.gpus import gpu_spec

        devices, memory = profile.meta.get("devices"), profile.meta.get("device_memory_bytes")
        gpu = gpu_spec(
            [str(d) for d in devices if d] if isinstance(devices, list) else [],
            [m for m in memory if isinstance(m, int)] if isinstance(memory, list) else None,
        )
        found, wi = whatif_from_trace(found, profile.ops, breakdown.span_us, ran_on, gpu)
    else:
        from atbprof.predict.device import infer_device

        device, clock_mhz, why = infer_device(profile.ops, meta)  # the same choice `predict` makes
        if ours:
            notes.append("run.json has no readable config/summary: the what-if uses the device model instead")
        if facts.view is None:  # a run read in parts has its config: it is re-simulated, not priced here
            raise AssertionError("the device-model what-if needs the table's view")
        found, wi = whatif_device_model(found, device, why, breakdown.span_us, clock_mhz, facts.view)
    method = {
        "resimulated": "re-simulated",
        "device-model": f"device model ({wi.device})",
        "trace": "measured from the trace (host time removed, capped by the device's idle time)",
        "none": "not estimated",
    }
    sums = digest.group_sums(breakdown) if digest is not None else group_sums(found, breakdown, top)
    findings = _findings(sums, facts.types_of, profile.framework, method[wi.method], patterns, on_release)
    if profile.kind == "kineto":  # a CPU/CUDA torch trace: name the portable fused API first
        findings = [
            f.model_copy(update={"fused_as": f"{_PORTABLE[f.fused_as]} ({f.fused_as} on Ascend)"})
            if f.fused_as in _PORTABLE
            else f
            for f in findings
        ]
    name = str(meta.get("name")) if ours and meta.get("name") else profile.source
    has_unfused = any(f.opportunity for f in findings)
    assumptions = [wi.assumption, f"categories: {breakdown.categories_heuristic}", breakdown.idle.classified_by]
    if any(f.evidence.startswith("next kernel") for f in findings):
        assumptions.append(
            "no data edges in this profile: an Add->Norm or Norm->MatMul pair is two adjacent kernels "
            "on one stream whose shapes say one reads the other (equal up to a view)"
        )
    next_commands = _next_commands(profile, findings, cfg is not None)
    for f in findings:
        if f.opportunity and f.level == "kernel" and not ours:
            notes.append(f"{f.fusion or _LABEL[f.kind]}: {f.api}")
    source = Source(
        kind=profile.kind,
        path=profile.source,
        ops=facts.ops,
        framework_ops=profile.framework.num_rows if profile.framework is not None else 0,
        steps=sum(p.steps for p in breakdown.phases),
        streams=facts.streams,
        phases=[p.phase for p in breakdown.phases],
        has_roles=facts.has_roles,
        has_launch=facts.has_launch,
        has_shapes=facts.has_shapes,
        has_graph=has_graph,
        patterns=patterns.source,
    )
    return AnalysisReport(
        source=source,
        summary=_summary(name, findings, breakdown, wi),  # of all findings; the list keeps the top ones
        has_unfused=has_unfused,
        findings=findings[: max(top, 1)],
        breakdown=breakdown,
        whatif=wi,
        assumptions=assumptions,
        notes=notes,
        next_commands=next_commands,
        numerics=parse_report(meta["numerics"], f"{profile.source}: run.json numerics")
        if ours and meta.get("numerics") is not None
        else None,
        occurrences=found if digest is None else None,
    )


def _release(given: str | None, recorded: object) -> tuple[tuple[int, int] | None, str | None]:
    """The CANN release the findings name kernels for: `given` (--cann-version; ConfigError when it is not a
    version), else the profile's recorded one; and a note saying which, or that the recorded one was not read."""
    if given is not None:
        return checked_release(given, "--cann-version"), f"fused kernels named as CANN {given} names them"
    if isinstance(recorded, str):
        found = release(recorded)
        if found is None:
            return None, f"the profile's cann_version {recorded!r} is not a CANN version: fused kernels by their names"
        return found, f"fused kernels named as CANN {recorded} (recorded in the profile) names them"
    return None, None


def _next_commands(profile: Profile, findings: list[Finding], ours: bool) -> list[str]:
    """Shell-quoted commands to run next (each works pasted; the reason is a shell comment)."""
    from atbprof.hints import command, file_name

    path = Path(profile.source)
    rules = list(dict.fromkeys(f.rule for f in findings if f.opportunity and f.rule and f.level == "kernel"))
    fused = path.with_name(path.name + "-fused")
    if ours and rules:
        # --set, not --fusion: `--fusion X` replaces the whole fusion section, dropping an enable list
        return [
            command(
                "atbprof",
                "run",
                "--config",
                path,
                "--set",
                f"fusion.enable=[{', '.join(rules)}]",
                "--out",
                fused,
                why="this run again, with those rules: --config takes a run directory",
            ),
            command("atbprof", "analyze", fused),
        ]
    page = Path(f"{file_name(path.name)}-report.html")
    report = command("atbprof", "report", path, "--out", page, why="one page: summary, figures, tables")
    if ours:
        return [command("atbprof", "open", path, why="the trace in https://ui.perfetto.dev"), report]
    as_md = (
        command("atbprof", "analyze", path, "--format", "md") + " > norm-analysis.md   # the same report as Markdown"
    )
    return [as_md, report]
