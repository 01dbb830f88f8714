"""The `atbprof run` summary of a serving workload: the terminal view, the report page's sections (one list of
sections for both) and its JSON twin (ServingResult.to_dict)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from atbprof.hints import shown
from atbprof.render.sections import Section, render_sections
from atbprof.serving.summary import ServingSummary

if TYPE_CHECKING:
    from rich.console import Console

    from atbprof.serving.run import ServingResult


def serving_sections(s: ServingSummary, name: str) -> list[Section]:
    lat = Section(f"{name}: latency (ms) over {s.requests:,} requests", headers=["", "mean", "p50", "p90", "p99"])
    lat.numeric = {1, 2, 3, 4}
    for label, p in (("TTFT", s.ttft_ms), ("TPOT", s.tpot_ms), ("E2E", s.e2e_ms), ("queued", s.queue_ms)):
        if p is not None:
            lat.rows.append([label, *(f"{v:,.2f}" for v in (p.mean, p.p50, p.p90, p.p99))])
    several = s.replicas > 1
    engines = f"the engines ({s.replicas} replicas)" if several else "the engine"
    each = " per replica" if several else ""
    facts = Section(f"{name}: {engines}", headers=["", ""], numeric={1})
    rate = "all at t = 0" if s.rate_qps == 0 else f"{s.rate_qps:g} requests/s asked, {s.arrival_rate_qps:g} came"
    facts.rows += [
        ["requests", f"{s.requests:,} ({rate}; {s.lengths}; mean {s.input_len_mean:g} in, {s.output_len_mean:g} out)"],
        ["throughput", f"{s.requests_per_s:.2f} requests/s, {s.output_tokens_per_s:,.0f} output tokens/s"],
    ]
    if s.goodput is not None:
        g = s.goodput
        slo = ", ".join(f"{k} <= {v:g} ms" for k, v in (("TTFT", g.slo_ttft_ms), ("TPOT", g.slo_tpot_ms)) if v)
        facts.rows.append(["goodput", f"{g.requests_per_s:.2f} requests/s ({g.share:.1%} meet {slo})"])
    facts.rows += [
        ["alone on the engine", f"TTFT {s.alone_ttft_ms:.2f} ms, TPOT {s.alone_tpot_ms:.2f} ms"],
        ["decode batch", f"{s.decode_batch_mean:.1f} sequences (mean); device busy {s.device_busy:.1%}{each}"],
        [
            "KV cache",
            f"{s.kv_blocks:,} blocks of {s.block_size} ({s.kv_cache_gb:.1f} GB){each}; used "
            f"{s.kv_utilisation_mean:.1%} "
            f"mean, {s.kv_utilisation_peak:.1%} peak; {s.preemptions} preemption(s)",
        ],
        ["span", f"{s.duration_s:,.2f} s, {s.iterations:,} iterations"],
    ]
    return [lat, facts]


def render_serving(result: ServingResult, console: Console) -> None:
    cfg = result.config
    w = cfg.workload
    head = (
        f"{cfg.name}: {cfg.model.preset or cfg.model.hf_config} {cfg.model.dtype} on {result.device_name} (tp "
        f"{cfg.parallel.tp}{f', dp {cfg.parallel.dp}' if cfg.parallel.dp > 1 else ''}), {cfg.execution.mode}, "
        f"fusion {cfg.fusion.strategy}; {w.scheduler} scheduler, "
        f"max_num_seqs {w.max_num_seqs}, block_size {w.block_size}"
    )
    sections = [Section("summary", lines=[head]), *serving_sections(result.summary, cfg.name)]
    if result.notes:
        sections.append(Section("notes", lines=[f"note: {n}" for n in result.notes]))
    sections.append(Section("files", lines=[f"wrote {shown(result.out_dir)}/ ({', '.join(result.files)})"]))
    sections.append(Section("next", lines=[f"{cmd}   # {why}" for cmd, why in result.next_commands()]))
    render_sections(sections, console, quiet_titles=("files", "notes"))
