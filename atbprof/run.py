"""`atbprof run` as a library call: simulate a config and write the run directory atomically."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import pyarrow as pa

from atbprof.config.models import RunConfig
from atbprof.errors import AtbprofError, ConfigError
from atbprof.inputs import read_bytes
from atbprof.numerics.report import NumericsReport
from atbprof.optable.schema import SCHEMA_VERSION
from atbprof.outputs import MARKER, check_output_dir, staged_dir
from atbprof.sim.parallel_summary import parallel_summary
from atbprof.sim.simulate import Simulation
from atbprof.sim.summary import LatencySummary, NearMissRow, RunSummary, SummaryBuilder, latency
from atbprof.version import __version__
from atbprof.writers.background import BackgroundWriter
from atbprof.writers.base import TraceMeta
from atbprof.writers.chrome import ChromeTraceWriter
from atbprof.writers.parquet import ParquetOpsWriter
from atbprof.writers.perfetto import PerfettoTraceWriter
from atbprof.writers.selection import MAX_TRACE_RANKS, TraceSelection, compact_ranges, parse_ranges, select_trace

if TYPE_CHECKING:
    from atbprof.serving.run import ServingResult

Progress = Callable[[int, int], None]
"""Ranks one trace may show (a process group each, sharing output.trace_max_mb)."""


RUN_SUMMARY_SCHEMA_VERSION = "1"
"""`atbprof run --format json`: schema_version, name, out_dir, files, device, notes, next_commands, summary and
numerics (numerics runs only)."""


@dataclass(frozen=True)
class RunResult:
    out_dir: Path
    files: tuple[str, ...]
    summary: RunSummary
    config: RunConfig
    device_name: str
    notes: tuple[str, ...]
    numerics: NumericsReport | None = None

    def next_commands(self) -> list[tuple[str, str]]:
        """What to do with the run, as (command, why): analyze it, open its trace, run the other fusion side, diff.
        Each command is shell-quoted, so it works pasted."""
        from atbprof.hints import command
        from atbprof.trace_files import RUN_TRACE_FILES

        out = Path(self.out_dir)
        cmds = [(command("atbprof", "analyze", out), "unfused norms, latency breakdown, what fusing saves")]
        page = out.with_name(out.name + ".html")
        cmds.append((command("atbprof", "report", out, "--out", page), "one page: summary, figures and tables"))
        trace = next((name for name in RUN_TRACE_FILES if name in self.files), None)
        if trace:
            cmds.append((command("atbprof", "open", out), f"loads {trace} in the Perfetto UI"))
        unfused = self.config.fusion.strategy == "none" and not self.config.fusion.enable
        other, twin = (
            ("default", out.with_name(out.name + "-fused"))
            if unfused
            else ("none", out.with_name(out.name + "-unfused"))
        )
        # the run directory is its own config: the other side keeps every --set this run was made with
        again = command("atbprof", "run", "--config", out, "--fusion", other, "--out", twin)
        cmds.append((again, "the other side"))
        base, new = (out, twin) if unfused else (twin, out)
        cmds.append((command("atbprof", "diff", base, new), "what fusion changed, with statistics"))
        return cmds

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract of `atbprof run --format json`."""
        from atbprof.hints import shown

        doc: dict[str, Any] = {
            "schema_version": RUN_SUMMARY_SCHEMA_VERSION,
            "name": self.config.name,
            "out_dir": shown(self.out_dir),
            "files": list(self.files),
            "device": self.device_name,
            "notes": list(self.notes),
            "next_commands": [cmd for cmd, _ in self.next_commands()],
            "summary": self.summary.model_dump(mode="json"),
        }
        if self.numerics is not None:
            doc["numerics"] = self.numerics.model_dump(mode="json")
        return doc

    def to_arrow(self) -> pa.Table:
        """The run's op table (ops.parquet: every rank's kernels, schema atbprof.optable)."""
        import pyarrow.parquet as pq

        return pq.read_table(Path(self.out_dir) / "ops.parquet")


def _fusion_report(sim: Simulation) -> dict[str, Any]:
    """What the fusion passes did per step of the deployment (every pipeline stage's graph, one pass each)."""
    fired: dict[str, dict[str, int]] = {}
    disabled = {}
    rows: dict[tuple[str, str, str], NearMissRow] = {}
    for phase, pm in ((p, pm) for st in sim.stages for p, pm in st.phases.items()):
        fired.setdefault(phase, {})
        for rule, count in pm.fusion.fired.items():
            fired[phase][rule] = fired[phase].get(rule, 0) + count
        for rule, why in pm.fusion.disabled.items():
            disabled[f"{rule} ({phase})"] = why
        for nm in pm.fusion.near_misses:
            key = (nm.rule, nm.phase, nm.reason)
            if key in rows:
                rows[key].count += 1
            else:
                rows[key] = NearMissRow(rule=nm.rule, phase=nm.phase, reason=nm.reason, count=1, first_layer=nm.layer)
    return {"fusion_fired": fired, "fusion_disabled": disabled, "near_misses": list(rows.values())}


def traced_ranks(sim: Simulation) -> tuple[int, ...]:
    """Rank 0 and the ranks of output.trace_ranks (ConfigError naming one the deployment does not have)."""
    text = sim.cfg.output.trace_ranks
    if text is None:
        return (0,)
    devices = sim.parallel.devices
    ranges = parse_ranges(text, "output.trace_ranks")
    outside = [a if a >= devices else b for a, b in ranges if a >= devices or (b is not None and b >= devices)]
    if outside:
        raise ConfigError(
            f"output.trace_ranks = {text!r} names rank {outside[0]}, but the deployment has {devices} "
            f"device{'s' if devices > 1 else ''} (ranks 0-{devices - 1})"
        )
    ranks = {0}
    for a, b in ranges:
        ranks.update(range(a, (devices - 1 if b is None else b) + 1))
    if len(ranks) > MAX_TRACE_RANKS:
        raise ConfigError(
            f"output.trace_ranks = {text!r} puts {len(ranks):,} ranks in the trace, more than {MAX_TRACE_RANKS} (they "
            "share the UI's size budget, so each would keep almost nothing): choose the ranks to look at, e.g. '1-7'"
        )
    return tuple(sorted(ranks))


def _trace_selection(sim: Simulation, ranks: int = 1) -> TraceSelection:
    out = sim.cfg.output
    per_step, in_layers = [], []
    for plan in sim.plans:
        layer = sim.phases[plan.phase].layer
        per_step += [len(layer)] * len(plan.steps)
        in_layers += [int((layer >= 0).sum())] * len(plan.steps)
    return select_trace(
        per_step,
        in_layers,
        sim.dims.layers,
        sim.cfg.execution.mode,
        out.trace_steps,
        out.trace_layers,
        None if out.trace_max_mb is None else out.trace_max_mb / ranks,  # the ranks share the UI's budget
    )


def _notes(sim: Simulation, summary: RunSummary, selection: TraceSelection) -> tuple[str, ...]:
    notes = [f"{rule} switched off: {why}" for rule, why in summary.fusion_disabled.items()]
    described = selection.describe()
    if sim.cfg.output.trace and described:
        notes.append(described)
    ranks = traced_ranks(sim)
    if sim.cfg.output.trace and len(ranks) > 1:
        notes.append(
            f"the trace shows ranks {compact_ranges(np.array(ranks))} (a process group each; flows join each "
            "collective's participants to the rank they waited for, and each pipeline Send to its Receive); they "
            "share output.trace_max_mb"
        )
    m = sim.memory
    if not m.fits:  # only when device.ignore_capacity let it run
        notes.append(
            f"DOES NOT FIT: needs {m.total_gb:.1f} GB on one {sim.device.name} with {m.capacity_gb:g} GB of HBM "
            f"(at least {m.devices_needed} devices); simulated anyway because device.ignore_capacity is set"
        )
    return tuple(notes)


def _hbm_floor_ms(sim: Simulation) -> float:
    """Decode can not beat (weights + mean KV cache) / HBM bandwidth per step."""
    d = sim.dims
    w = sim.cfg.workload
    kv_per_token = 2 * d.layers * d.kv_local * d.head_dim * d.dsize
    mean_kv = w.prompt_len + (w.decode_tokens + 1) / 2
    return (d.weight_bytes(w.batch_size) + w.batch_size * kv_per_token * mean_kv) / sim.device.hbm_bytes_per_s * 1e3


def summarize(cfg: RunConfig) -> RunSummary:
    """Simulate and summarise without writing files (calibration, tests, what-if sweeps)."""
    sim = Simulation(cfg)
    builder = _summary_builder(sim)
    for batch in sim.summary_batches():
        builder.add(batch)
    return _finish(sim, builder, sim.steps_table())


def _summary_builder(sim: Simulation) -> SummaryBuilder:
    return SummaryBuilder(sim.parallel.microbatches, sim.parallel.pp, sim.prefill_steps)


def _finish(sim: Simulation, builder: SummaryBuilder, steps: pa.Table) -> RunSummary:
    summary = builder.finish(
        steps,
        sim.cfg.workload.batch_size,
        _hbm_floor_ms(sim),
        _fusion_report(sim),
        sim.memory,
        sim.device.peak_flops,
    )
    return summary.model_copy(update=parallel_summary(sim, summary.decode_steps))


def simulate_latency(cfg: RunConfig) -> LatencySummary:
    """TTFT, per-token latency and the fusion report: the timeline without building the op table (what-if)."""
    sim = Simulation(cfg)
    return LatencySummary(**latency(sim.step_walls()).model_dump(), **_fusion_report(sim))


def default_out_dir(cfg: RunConfig) -> Path:
    from atbprof.outputs.paths import default_run_dir

    return default_run_dir(cfg.output.dir, cfg.name)


def run_simulation(
    cfg: RunConfig, out_dir: Path | None = None, force: bool = False, progress: Progress | None = None
) -> RunResult | ServingResult:
    """The run directory of a config: a batch's op table and traces, or a serving workload's request and
    iteration tables (atbprof/serving/)."""
    if cfg.workload.kind == "serving":
        from atbprof.serving.run import run_serving

        if cfg.numerics.enabled:
            raise ConfigError("numerics: --numerics executes one batch's layers; a serving workload has none")
        return run_serving(cfg, out_dir, force)
    sim = Simulation(cfg)
    traced_ranks(sim)  # a bad output.trace_ranks stops the run before anything is written
    out = out_dir or default_out_dir(cfg)
    target = check_output_dir(out, "run", force=force)
    numerics = None
    if cfg.numerics.enabled:  # before any file is written: a bad checkpoint stops the run here
        from atbprof.numerics.runner import run_numerics

        numerics = run_numerics(sim)
    with staged_dir(target, "run", lambda: check_output_dir(out, "run", force=force)) as tmp:
        summary, notes = _write_run(sim, numerics, tmp, progress)
    files = tuple(sorted(p.name for p in target.iterdir() if p.name != MARKER))
    return RunResult(out, files, summary, cfg, sim.device.name, notes, numerics)


def _write_run(
    sim: Simulation, numerics: NumericsReport | None, tmp: Path, progress: Progress | None
) -> tuple[RunSummary, tuple[str, ...]]:
    """Every file of the run into the directory `tmp`."""
    cfg = sim.cfg
    ranks = traced_ranks(sim)
    meta = TraceMeta(
        run_name=cfg.name,
        device_name=sim.device.name,
        soc_version=sim.device.soc_version,
        execution_mode=cfg.execution.mode,
        streams=tuple(sorted({int(s) for pm in sim.phases.values() for s in pm.stream})),
        **_numerics_meta(numerics),
        ranks=ranks,
        tp=sim.parallel.tp,
        pp=sim.parallel.pp,
    )
    selection = _trace_selection(sim, len(ranks))
    traces: list[BackgroundWriter] = []
    if cfg.output.trace and len(selection.steps):
        if cfg.output.trace_format in ("chrome", "both"):
            traces.append(BackgroundWriter(ChromeTraceWriter()))
        if cfg.output.trace_format in ("perfetto", "both"):
            traces.append(BackgroundWriter(PerfettoTraceWriter()))
    writers = [BackgroundWriter(ParquetOpsWriter()), *traces]
    for w in writers:
        w.open(tmp, meta)
    builder = _summary_builder(sim)
    leaders = set(sim.parallel.stage_leaders())
    done = 0
    try:
        for batch in sim.batches():
            writers[0].write_batch(batch)
            done += batch.num_rows
            if progress:
                progress(done, sim.total_ops)
            rank = batch.column("rank")[0].as_py()
            if rank in leaders:  # the summary follows a token through the stages (all ranks: ops.parquet)
                builder.add(batch)
            if traces and rank in ranks:
                kept = selection.filter(batch)
                if kept.num_rows:
                    for t in traces:
                        t.write_batch(kept)
        steps = sim.steps_table()
        writers[0].close(steps)
        for t in traces:
            t.close(selection.steps_table(steps))
    except BaseException:
        for w in writers:
            w.abort()
        raise
    summary = _finish(sim, builder, steps)
    notes = _notes(sim, summary, selection)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "atbprof_version": __version__,
        "name": cfg.name,
        "seed": cfg.seed,
        "config": cfg.model_dump(mode="json", exclude=None if numerics else {"numerics"}),
        "model": sim.dims.__dict__,
        "device": sim.device.model_dump(mode="json"),
        "fusion_rules": [r.name for r in sim.rules],
        "host_model": sim.host.__dict__,
        "weights_format": "nz" if sim.weights_nz else "nd",
        "notes": list(notes),
        "summary": summary.model_dump(mode="json"),
    }
    inputs = _input_files(cfg)
    if inputs:  # absent without input files, so preset runs keep their bytes
        doc["input_files"] = inputs
    if numerics is not None:
        doc["numerics"] = numerics.model_dump(mode="json")
    (tmp / "run.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    return summary, notes


def _input_files(cfg: RunConfig) -> dict[str, dict[str, str]]:
    """The files a config names (absolute path and SHA-256): which exact file a run was made from."""
    named = {
        "model.hf_config": cfg.model.hf_config,
        "device.spec": cfg.device.spec,
        "fusion.rules_file": cfg.fusion.rules_file,
    }
    out = {}
    for key, value in named.items():
        if value:
            path = Path(value).resolve()
            out[key] = {"path": str(path), "sha256": hashlib.sha256(read_bytes(path, 1 << 24)).hexdigest()}
    return out


def _numerics_meta(numerics: NumericsReport | None) -> dict[str, Any]:
    """TraceMeta fields carrying the numerics to the writers (none without --numerics: files stay byte-identical)."""
    if numerics is None:
        return {}
    return {"op_args": numerics.kernel_args(), "numerics_json": orjson.dumps(numerics.model_dump(mode="json"))}


__all__ = ["AtbprofError", "RunResult", "default_out_dir", "run_simulation", "simulate_latency", "summarize"]
