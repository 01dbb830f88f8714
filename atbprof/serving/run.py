"""`atbprof run` of a serving workload: requests -> KV budget -> priced iterations -> tables, summary, trace, written
atomically as a run directory (run.json, requests.parquet, iterations.parquet, trace.json.gz)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from atbprof.config.models import RunConfig
from atbprof.errors import ConfigError
from atbprof.serving.summary import ServingSummary
from atbprof.serving.trace import MAX_ITERATIONS, MAX_REQUEST_TRACKS

SERVING_SUMMARY_SCHEMA_VERSION = "1"
"""`atbprof run --format json` of a serving workload: schema_version, kind, name, out_dir, files, device, notes,
next_commands, summary.serving."""


@dataclass(frozen=True)
class ServingResult:
    out_dir: Path
    files: tuple[str, ...]
    summary: ServingSummary
    config: RunConfig
    device_name: str
    notes: tuple[str, ...]

    def next_commands(self) -> list[tuple[str, str]]:
        from atbprof.hints import command

        out = Path(self.out_dir)
        cmds = []
        if "trace.json.gz" in self.files:
            cmds.append((command("atbprof", "open", out), "the iterations and each request in the Perfetto UI"))
        unfused = self.config.fusion.strategy == "none" and not self.config.fusion.enable
        other, twin = ("default", "-fused") if unfused else ("none", "-unfused")
        cmds.append(
            (
                command("atbprof", "run", "--config", out, "--fusion", other, "--out", out.with_name(out.name + twin)),
                "the same requests with the other fusion side",
            )
        )
        return cmds

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract of `atbprof run --format json` for a serving workload."""
        from atbprof.hints import shown

        return {
            "schema_version": SERVING_SUMMARY_SCHEMA_VERSION,
            "kind": "serving",
            "name": self.config.name,
            "out_dir": shown(self.out_dir),
            "files": list(self.files),
            "device": self.device_name,
            "notes": list(self.notes),
            "next_commands": [cmd for cmd, _ in self.next_commands()],
            "summary": {"serving": self.summary.model_dump(mode="json")},
        }


def pricing_config(cfg: RunConfig, longest_prompt: int, budget: int) -> RunConfig:
    """The batch config whose simulation prices iterations and sizes memory: one sequence whose prompt is the
    token budget (the largest iteration: its activations are what vLLM's profiling run reserves), one decode."""
    w = cfg.workload
    prompt = max(1, min(budget, max(longest_prompt, 1)))
    batch = w.model_copy(
        update={
            "kind": "batch",
            "batch_size": 1,
            "prompt_len": prompt,
            "decode_tokens": 1,
            "max_num_batched_tokens": None,
            "kv_cache": "dynamic",
            "kv_cache_len": None,
        }
    )
    engine = cfg.parallel.model_copy(update={"dp": 1})  # each replica is one engine of tp devices
    return cfg.model_copy(update={"workload": batch, "parallel": engine})


def simulate_serving(cfg: RunConfig) -> tuple[pa.Table, pa.Table, ServingSummary, str, tuple[str, ...]]:
    """(requests table, iterations table, summary, device name, notes) of a serving config, nothing written."""
    from atbprof.serving.kv_cache import kv_budget
    from atbprof.serving.pricing import IterationPricer
    from atbprof.serving.requests import request_stream
    from atbprof.serving.scheduler import DEFAULT_BATCHED_TOKENS, serve_replicas
    from atbprof.serving.summary import serving_summary
    from atbprof.serving.tables import iterations_table, requests_table
    from atbprof.sim.simulate import Simulation

    w = cfg.workload
    par = cfg.parallel
    if par.pp > 1:
        raise ConfigError(
            f"workload.kind: serving simulates tensor-parallel engines (parallel.pp = 1; dp replicas of them); this "
            f"config has pp = {par.pp}: set parallel.pp: 1 (and parallel.tp to the engine's devices)"
        )
    if par.dp > 1 and w.max_concurrency is not None:
        raise ConfigError(
            f"workload.max_concurrency with parallel.dp = {par.dp}: a client limit shared by several engine "
            "replicas is not modelled; leave max_concurrency out, or simulate one replica (dp: 1) with its share"
        )
    stream = request_stream(w, cfg.seed)
    budget = w.max_num_batched_tokens or DEFAULT_BATCHED_TOKENS
    sim = Simulation(pricing_config(cfg, int(stream.input_len.max()), budget))
    context = sim.dims.context
    total = stream.input_len + stream.output_len
    if context and int(total.max()) > context:
        worst = int(total.argmax())
        raise ConfigError(
            f"workload: request {worst} has {int(total[worst]):,} tokens (input + output), beyond "
            f"{sim.dims.name}'s context of {context:,}: shorten the requests or set model.rope_scaling_factor"
        )
    kv = kv_budget(sim, w)
    if kv.blocks <= 0:
        raise ConfigError(
            f"workload: no KV blocks fit: {kv.usable_gb:.1f} GB usable ({w.gpu_memory_utilization:.0%} of "
            f"{sim.memory.capacity_gb:.0f} GB) minus {kv.other_gb:.1f} GB of weights, activations and workspace; "
            "raise gpu_memory_utilization, lower max_num_batched_tokens or use more tensor-parallel ranks"
        )
    pricer = IterationPricer(sim)
    served = serve_replicas(stream, pricer, w, kv.blocks, par.dp)
    requests, iterations = requests_table(stream, served), iterations_table(served)
    mean_in = round(float(stream.input_len.mean()))
    mean_ctx = round(float(stream.input_len.mean() + stream.output_len.mean() / 2))
    alone = (
        pricer.mixed(np.array([mean_in]), np.array([0]), 0, 0).wall_ns / 1e6,
        pricer.decode_only(1, mean_ctx).wall_ns / 1e6,
    )
    summary = serving_summary(
        requests,
        iterations,
        rate_qps=w.rate_qps,
        lengths=stream.lengths,
        kv=(kv.blocks, kv.block_size, kv.cache_gb),
        slo=(w.slo_ttft_ms, w.slo_tpot_ms),
        alone=alone,
        replicas=par.dp,
    )
    notes = _notes(cfg, summary)
    return requests, iterations, summary, sim.device.name, notes


_DISPATCH = {
    "shortest_queue": "the replica with the least waiting x 4 + running (vLLM's balancer)",
    "round_robin": "the replicas in turn",
}


def _notes(cfg: RunConfig, s: ServingSummary) -> tuple[str, ...]:
    notes = []
    if s.replicas > 1:
        notes.append(
            f"parallel.dp = {s.replicas}: {s.replicas} engine replicas of {cfg.parallel.tp} device(s) each, with their "
            f"own KV cache, each request sent to {_DISPATCH[cfg.workload.dispatch]}; kv_blocks and device_busy are "
            "per replica"
        )
    if cfg.execution.jitter.kernel_cv or cfg.execution.jitter.host_cv:
        notes.append("execution.jitter is not applied to serving iterations (each is priced once by its shapes)")
    if s.preemptions:
        notes.append(
            f"{s.preemptions} preemption(s): the KV cache ran out and sequences recomputed their tokens; fewer "
            "max_num_seqs, a lower rate or more memory avoids them"
        )
    if cfg.output.trace and (s.requests > MAX_REQUEST_TRACKS or s.iterations > MAX_ITERATIONS):
        notes.append(
            f"trace.json.gz draws the first {min(s.requests, MAX_REQUEST_TRACKS):,} requests and the first "
            f"{min(s.iterations, MAX_ITERATIONS):,} iterations (the tables hold every one)"
        )
    return tuple(notes)


def run_serving(cfg: RunConfig, out_dir: Path | None = None, force: bool = False) -> ServingResult:
    import pyarrow.parquet as pq

    from atbprof.optable.schema import SCHEMA_VERSION
    from atbprof.outputs import MARKER, check_output_dir, staged_dir
    from atbprof.outputs.paths import default_run_dir
    from atbprof.serving.trace import write_serving_trace
    from atbprof.version import __version__

    out = out_dir or default_run_dir(cfg.output.dir, cfg.name)
    target = check_output_dir(out, "run", force=force)
    requests, iterations, summary, device_name, notes = simulate_serving(cfg)
    with staged_dir(target, "run", lambda: check_output_dir(out, "run", force=force)) as tmp:
        pq.write_table(requests, tmp / "requests.parquet", compression="zstd")
        pq.write_table(iterations, tmp / "iterations.parquet", compression="zstd")
        if cfg.output.trace:
            write_serving_trace(tmp / "trace.json.gz", requests, iterations, cfg.name)
        doc = {
            "schema_version": SCHEMA_VERSION,
            "atbprof_version": __version__,
            "name": cfg.name,
            "seed": cfg.seed,
            "kind": "serving",
            "config": cfg.model_dump(mode="json", exclude={"numerics"}),
            "device": device_name,
            "notes": list(notes),
            "summary": {"serving": summary.model_dump(mode="json")},
        }
        (tmp / "run.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    files = tuple(sorted(p.name for p in target.iterdir() if p.name != MARKER))
    return ServingResult(out, files, summary, cfg, device_name, notes)
