"""`atbprof analyze CLUSTER`: the cluster report as sections (rich and Markdown from one list) and its JSON twin."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from atbprof.analyze.cluster_report import ClusterReport, RankRow, StageRow, link_bandwidths
from atbprof.hints import command, file_name
from atbprof.hints import shown as shown_path
from atbprof.render.sections import Section, render_sections, sections_markdown

if TYPE_CHECKING:
    from rich.console import Console


def _ms(us: float) -> str:
    return f"{us / 1e3:,.3f}"


SPLIT_HEADERS = ["step", "computing", "comm (not overlapped)", "overlapped", "free", "bubble", "preparing"]


def _split_cells(r: RankRow | StageRow) -> list[str]:
    return [
        _ms(r.stage_us),
        _ms(r.computing_us),
        _ms(r.communication_not_overlapped_us),
        _ms(r.overlapped_us),
        _ms(r.free_us),
        _ms(r.bubble_us),
        _ms(r.preparing_us),
    ]


def sections(report: ClusterReport, top: int = 10) -> list[Section]:
    src, c, comm = report.source, report.cluster, report.communication
    par = src.parallel
    out = [Section("summary", lines=[report.summary])]
    where = f"{src.path}: {len(src.ranks)} ranks"
    if par.get("world"):
        where += f" (tp {par['tp']}, pp {par['pp']}, dp {par['dp']}; world {par['world']})"
    if src.partial_ranks:
        where += f"; partial (no kernel tables): {_listed(src.partial_ranks)}"
    out.append(Section("source", lines=[where]))
    ranks = Section(
        "ranks (mean step, ms; msprof-analyze's step split)",
        headers=["rank", "stage", "complete", *SPLIT_HEADERS, "slow"],
        numeric={0, 1, *range(3, 10)},
    )
    shown = _ranks_shown(c.ranks, top)
    for r in shown:
        stage = "-" if r.stage is None else str(r.stage)
        ranks.rows.append([str(r.rank), stage, "yes" if r.complete else "no", *_split_cells(r), r.slow_reason or ""])
        ranks.row_styles.append("bold red" if r.slow else "")
    if len(shown) < len(c.ranks):
        ranks.lines.append(
            f"{len(shown)} of {len(c.ranks)} ranks: the slow ones and the longest steps "
            "(--format json lists every rank)"
        )
    out.append(ranks)
    stages = Section(
        "stages (per step the slowest rank, column by column)", headers=["stage", "ranks", *SPLIT_HEADERS, "slow"]
    )
    stages.numeric = {0, *range(2, 9)}
    for s in c.stages:
        label = "-" if s.stage is None else str(s.stage)
        stages.rows.append([label, ",".join(map(str, s.ranks)), *_split_cells(s), s.slow_reason or ""])
        stages.row_styles.append("bold red" if s.slow else "")
    out.append(stages)
    if comm.waited_for:
        out.append(
            Section(
                "waited for (collectives in which every other rank waited for this one)",
                headers=["rank", "collectives"],
                rows=[[str(w.rank), str(w.collectives)] for w in comm.waited_for],
                numeric={0, 1},
            )
        )
    ops = sorted(comm.ops, key=lambda o: -o.wait_us)[:top]
    if ops:
        sec = Section(
            f"communication: the {len(ops)} ops that waited longest",
            headers=["rank", "op", "count", "elapse ms", "transit ms", "wait ms", "bandwidth GB/s"],
            numeric={0, 2, 3, 4, 5},
        )
        for o in ops:
            bw = ", ".join(f"{t} {v:,.2f}" for t, v in o.bandwidth_gbps.items() if t != "SDMA") or "-"
            sec.rows.append(
                [str(o.rank), o.name, str(o.count), _ms(o.elapse_us), _ms(o.transit_us), _ms(o.wait_us), bw]
            )
        out.append(sec)
    if comm.matrix:
        sec = Section(
            "communication matrix (links, summed over steps)",
            headers=["src", "dst", "transport", "MB", "ms", "GB/s"],
            numeric={0, 1, 3, 4, 5},
        )
        slow = {(s.src_rank, s.dst_rank, s.transport) for s in comm.slow_links}
        for m in sorted(comm.matrix, key=lambda m: (m.src_rank, m.dst_rank))[: max(top, 16)]:
            sec.rows.append(
                [
                    str(m.src_rank),
                    str(m.dst_rank),
                    m.transport,
                    f"{m.size_mb:,.3f}",
                    f"{m.time_ms:,.3f}",
                    f"{m.bandwidth_gbps:,.2f}",
                ]
            )
            sec.row_styles.append("bold red" if (m.src_rank, m.dst_rank, m.transport) in slow else "")
        out.append(sec)
    heat = _heat_table(report)
    if heat is not None:
        out.append(heat)
    if report.findings:
        sec = Section(
            "fusion findings per complete rank",
            headers=["rank", "pattern", "fused as", "count", "est. saving ms"],
            numeric={0, 3, 4},
        )
        for f in sorted(report.findings, key=lambda f: (f.rank, -(f.est_saving_us or 0.0)))[: top * 3]:
            if f.opportunity:
                sec.rows.append(
                    [
                        str(f.rank),
                        f.pattern,
                        f.fused_as,
                        str(f.count),
                        _ms(f.est_saving_us) if f.est_saving_us is not None else "-",
                    ]
                )
        if sec.rows:
            saving = report.step_saving_us
            sec.lines.append(
                "what fusing saves the step (its slowest stage): "
                + (f"{_ms(saving)} ms" if saving is not None else "unknown: that stage's ranks have no kernel tables")
            )
            out.append(sec)
    if report.trace is not None:
        t = report.trace
        lines = [
            f"wrote {shown_path(Path(t.path))}: ranks {_listed(t.ranks)}, steps {_listed(t.steps)} ({t.events:,} "
            "events); open it "
            f"with `{command('atbprof', 'open', Path(t.path))}` or in https://ui.perfetto.dev"
        ]
        out.append(Section("trace", lines=lines + ([t.note] if t.note else [])))
    out += [Section("warning", lines=report.warnings)] if report.warnings else []
    out.append(Section("notes", lines=report.notes))
    page = Path(f"{file_name(Path(src.path).name)}-report.html")
    out.append(
        Section("next", lines=[command("atbprof", "report", Path(src.path), "--out", page, why="figures and tables")])
    )
    return out


ALL_RANKS_UP_TO = 32
"""A cluster of up to this many ranks shows every rank; a larger one its slow ranks and longest steps."""
HEAT_RANKS_UP_TO = 16
"""The matrix is drawn as a src x dst heat table up to this many ranks (beyond: `atbprof plot` draws it)."""
_SHADES = " ░▒▓█"


def _ranks_shown(ranks: list[RankRow], top: int) -> list[RankRow]:
    if len(ranks) <= ALL_RANKS_UP_TO:
        return ranks
    slow = [r for r in ranks if r.slow]
    longest = sorted((r for r in ranks if not r.slow), key=lambda r: (-r.stage_us, r.rank))[: max(top - len(slow), 0)]
    return sorted([*slow, *longest], key=lambda r: r.rank)


def _heat_table(report: ClusterReport) -> Section | None:
    """The matrix as a heat table: per src -> dst link its bandwidth over all transports (GB/s) with a shade."""
    if len(report.source.ranks) > HEAT_RANKS_UP_TO:
        return None
    bw = link_bandwidths(report.communication.matrix)
    ranks = sorted({r for pair in bw for r in pair})
    if not bw or len(ranks) > HEAT_RANKS_UP_TO:
        return None
    top = max(bw.values()) or 1.0
    sec = Section(
        "communication matrix as a heat table (GB/s over all transports; rows send, columns receive; "
        f"{_SHADES[-1]} = the fastest link)",
        headers=["src \\ dst", *map(str, ranks)],
        numeric=set(range(len(ranks) + 1)),
    )
    for src in ranks:
        cells = []
        for dst in ranks:
            v = bw.get((src, dst))
            shade = _SHADES[min(len(_SHADES) - 1, round(v / top * (len(_SHADES) - 1)))] if v is not None else ""
            cells.append("" if v is None else f"{v:,.2f} {shade}".rstrip())
        sec.rows.append([str(src), *cells])
    return sec


def _listed(values: list[int]) -> str:
    import numpy as np

    from atbprof.writers.selection import compact_ranges

    return compact_ranges(np.array(values, np.int64))


def render_cluster(report: ClusterReport, console: Console) -> None:
    render_sections(sections(report), console, quiet_titles=("source", "notes"))


def cluster_markdown(report: ClusterReport) -> str:
    return sections_markdown(sections(report), "atbprof analyze (cluster)")


def cluster_json(report: ClusterReport) -> dict[str, Any]:
    """The documented JSON contract (the result's to_dict)."""
    return report.to_dict()
