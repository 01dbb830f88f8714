"""The `atbprof run` summary: a rich view and its JSON twin (same figures)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from atbprof.hints import shown
from atbprof.render.labels import CATEGORY_LABELS
from atbprof.render.sections import Section
from atbprof.run import RunResult
from atbprof.sim.summary import RunSummary


def run_json(result: RunResult) -> dict[str, Any]:
    """The documented JSON contract of `atbprof run --format json` (RunResult.to_dict)."""
    return result.to_dict()


def render_run(result: RunResult, console: Console) -> None:
    s = result.summary
    cfg = result.config
    w = cfg.workload
    console.print(
        f"[bold]{cfg.name}[/bold]: {cfg.model.preset or cfg.model.hf_config} {cfg.model.dtype} on "
        f"{result.device_name}, {cfg.execution.mode}, fusion {cfg.fusion.strategy}"
        f"{' (+' + ','.join(cfg.fusion.enable) + ')' if cfg.fusion.enable else ''}"
        f"{' (-' + ','.join(cfg.fusion.disable) + ')' if cfg.fusion.disable else ''}; "
        f"batch {w.batch_size}, prompt {w.prompt_len}"
        + (
            f" (chunked prefill, {w.max_num_batched_tokens:,} tokens per iteration)"
            if w.max_num_batched_tokens and w.max_num_batched_tokens < w.batch_size * w.prompt_len
            else ""
        )
        + f", {w.decode_tokens} decode steps"
    )
    par = s.parallel
    multi = par is not None and par.devices > 1
    head = Table(show_header=False, box=None, pad_edge=False)
    head.add_column(style="bold")
    head.add_column(justify="right", no_wrap=True)
    decode = s.decode_steps > 0
    head.add_row("TTFT", f"{s.ttft_ms:.2f} ms")
    head.add_row("prefill MFU", f"{s.prefill_mfu:.1%} of the dense peak")
    if decode:
        head.add_row("decode latency", f"{s.decode_ms_per_token:.2f} ms/token")
        head.add_row("throughput", f"{s.tokens_per_s:.1f} tokens/s")
        head.add_row("HBM floor", f"{s.hbm_floor_ms_per_token:.2f} ms/token")
    if multi:
        assert par is not None
        stages = ""
        if par.pp > 1:
            layers = "/".join(map(str, par.stage_layers))
            stages = f"; {par.microbatches} microbatch{'es' if par.microbatches > 1 else ''}, layers {layers}"
        head.add_row(
            "deployment",
            f"{par.devices} x {result.device_name} (tp {par.tp}, pp {par.pp}, dp {par.dp}{stages}; HCCL "
            f"{par.algorithm} over {par.transport})",
        )
        if decode:
            of = "a token's path through the stages" if par.pp > 1 else "rank 0's step"
            head.add_row(
                "communication",
                f"{s.communication_ms_per_token:.2f} ms/token ({s.communication_share:.1%} of {of})",
            )
    staged = multi and par is not None and par.pp > 1
    busy_of = " (mean over the stages)" if staged else " (rank 0)" if multi else ""
    head.add_row("device busy", f"{s.device_busy_fraction:.1%}{busy_of}")
    if decode:
        head.add_row("host-bound (device idle in decode)", f"{s.host_bound_fraction:.1%}")
        head.add_row(
            "norm-related (Add & Norm)",
            f"{s.norm_ms_per_token:.2f} ms/token ({s.norm_kernel_ms_per_token:.2f} kernel + "
            f"{s.norm_launch_ms_per_token:.2f} launch)",
        )
    if s.memory is not None:
        m = s.memory
        fits = "" if m.fits else f"  DOES NOT FIT (needs >= {m.devices_needed} devices)"
        head.add_row(
            "memory" + (f" per device (stage {m.stage}, the fullest)" if staged else " per device" if multi else ""),
            f"{m.total_gb:.1f} of {m.capacity_gb:g} GB (weights {m.weights_gb:.1f}, KV {m.kv_cache_gb:.1f}, "
            f"activations {m.activations_gb:.1f}"
            + (f", HCCL buffers {m.communication_gb:.1f}" if multi else "")
            + f"){fits}",
        )
    per_rank = f" over {par.devices} ranks" if multi and par is not None else ""
    per_step = " along a token's path" if staged else " per rank" if per_rank else ""
    head.add_row("ops", f"{s.ops_total:,}{per_rank} ({s.ops_per_decode_step} per decode step{per_step})")
    console.print(head)
    figures = s.breakdown_ms_per_token if decode else s.ttft_breakdown_ms
    total = s.decode_ms_per_token if decode else s.ttft_ms
    title = "per-token decode latency (seed 000's rows)" if decode else "time to first token (prefill only)"
    rows = Table(title=title, title_justify="left")
    rows.add_column("row")
    rows.add_column("ms/token" if decode else "ms", justify="right", no_wrap=True)
    rows.add_column("share", justify="right", no_wrap=True)
    for name in ("attention", "ffn", "other"):
        label = CATEGORY_LABELS[name]
        v = figures[name]
        rows.add_row(label, f"{v:.2f}", f"{v / total:.1%}" if total else "-")
    rows.add_row("[bold]total[/bold]", f"[bold]{total:.2f}[/bold]", "100.0%")
    console.print(rows)
    if decode:
        top = Table(title="top op types (decode, per token)", title_justify="left")
        for col in ("op type", "count", "device ms", "charged ms"):
            top.add_column(col, justify="left" if col == "op type" else "right", no_wrap=col != "op type")
        for t in s.top_op_types[:8]:
            top.add_row(
                t.op_type,
                f"{t.count_per_token:g}",
                f"{t.device_ms_per_token:.3f}",
                f"{t.attributed_ms_per_token:.3f}",
            )
        console.print(top)
    if multi and decode and (staged or len({r.slowdown for r in s.ranks}) > 1):
        console.print(_rank_table(s, staged))
    fired: dict[str, dict[str, int]] = {}
    for phase, rules in s.fusion_fired.items():
        for rule, n in rules.items():
            fired.setdefault(rule, {})[phase] = n
    if fired:
        console.print("fusion fired: " + ", ".join(f"{r} x{max(v.values())}" for r, v in fired.items()))
    if s.near_misses:
        nm = Table(title="fusion near-misses (rules that could not fire)", title_justify="left")
        for col in ("rule", "phase", "count", "why"):
            nm.add_column(col, justify="right" if col == "count" else "left", no_wrap=col == "count")
        for row in s.near_misses[:10]:
            nm.add_row(row.rule, row.phase, str(row.count), row.reason)
        console.print(nm)
    if result.numerics is not None:
        from atbprof.numerics.render import render_numerics

        render_numerics(result.numerics, console)
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    console.print(f"wrote {shown(result.out_dir)}/ ({', '.join(result.files)})")
    for k, (cmd, why) in enumerate(result.next_commands()):
        console.print(f"{'next:' if k == 0 else '':6}{cmd}   # {why}", markup=False)


def _rank_table(s: RunSummary, staged: bool) -> Table:
    """The ranks' mean decode step split; ranks alike (same stage and figures) on one row, e.g. "0-3"."""
    title = "ranks (mean decode step, µs; msprof-analyze's step split)"
    ranks = Table(title=title, title_justify="left")
    cols = ["rank", *(["stage"] if staged else []), "slowdown", "step", "computing", "comm (not overlapped)"]
    cols += [*(["bubble"] if staged else []), "waited", "free"]
    for col in cols:
        ranks.add_column(col, justify="right", no_wrap=True)
    rows: list[tuple[list[int], list[str]]] = []
    for r in s.ranks:
        cells = [
            *([str(r.stage)] if staged else []),
            f"{r.slowdown:g}",
            f"{r.step_us:,.1f}",
            f"{r.computing_us:,.1f}",
            f"{r.communication_not_overlapped_us:,.1f}",
            *([f"{r.bubble_us:,.1f}"] if staged else []),
            f"{r.communication_wait_us:,.1f}",
            f"{r.free_us:,.1f}",
        ]
        if staged and rows and rows[-1][1] == cells and rows[-1][0][-1] == r.rank - 1:
            rows[-1][0].append(r.rank)
        else:
            rows.append(([r.rank], cells))
    for members, cells in rows:
        label = str(members[0]) if len(members) == 1 else f"{members[0]}-{members[-1]}"
        ranks.add_row(label, *cells)
    return ranks


def run_section(doc: dict[str, Any]) -> Section:
    """A run.json's headline figures as the first section of its report page."""
    s = doc["summary"]
    cfg = doc.get("config", {})
    rows = [
        ["model", str((cfg.get("model") or {}).get("preset") or "")],
        ["device", str(doc.get("device", {}).get("name", ""))],
        ["mode", str((cfg.get("execution") or {}).get("mode", ""))],
        ["fusion", str((cfg.get("fusion") or {}).get("strategy", ""))],
        ["decode ms per token", f"{s['decode_ms_per_token']:,.3f}"],
        ["TTFT ms", f"{s['ttft_ms']:,.3f}"],
        ["tokens/s", f"{s['tokens_per_s']:,.1f}"],
        ["norm-related ms per token", f"{s['norm_ms_per_token']:,.3f}"],
        ["HBM floor ms per token", f"{s['hbm_floor_ms_per_token']:,.3f}"],
        ["kernels per decode step", str(s["ops_per_decode_step"])],
    ]
    return Section("run", headers=["", ""], rows=rows, numeric={1})
