"""What `validate_trace` returns, and its two renderings: a rich view and the `--format json` twin.

A `Finding` is one rule violated by one or more events (aggregated: the first few event indices and a total count,
so a million-event trace does not print a million lines). The verdict `loses_data` is true when any finding has
severity `error` (Perfetto does not import the event, or the whole trace) or `data_loss` (it imports it, but drops,
moves, merges or mis-links something).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rich.console import Console
from rich.markup import escape
from rich.table import Table

Severity = Literal["error", "data_loss", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "data_loss", "warning", "info")
LOSSY: frozenset[str] = frozenset({"error", "data_loss"})
MAX_INDICES = 5
"""Event indices kept per finding (the count is always the total)."""

_STYLE = {"error": "bold red", "data_loss": "red", "warning": "yellow", "info": "dim"}


@dataclass(frozen=True)
class Finding:
    severity: Severity
    rule: str
    count: int
    message: str
    fix_hint: str
    event_indices: tuple[int, ...] = ()
    """The first few offending events (0-based positions in the trace's event array); empty for file-level rules."""

    @property
    def event_index(self) -> int | None:
        return self.event_indices[0] if self.event_indices else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "rule": self.rule,
            "count": self.count,
            "event_index": self.event_index,
            "event_indices": list(self.event_indices),
            "message": self.message,
            "fix_hint": self.fix_hint,
        }


@dataclass(frozen=True)
class TraceSummary:
    """What Perfetto's trace_processor would import (its `slice`, `counter`, `flow`, process and thread tables)."""

    events: int
    events_by_ph: dict[str, int]
    slices: int
    """Rows of the slice table: X kept after the nesting check, B, instants, async b/n."""
    counters: int
    """Counter samples (one per numeric arg of each C event)."""
    counter_tracks: int
    flows: int
    """Flow arrows (rows of the flow table), including mis-linked ones."""
    processes: int
    threads: int


@dataclass(frozen=True)
class ValidationReport:
    path: str
    container: Literal["array", "object"]
    """`[...]` (bare event array) or `{"traceEvents": [...]}`."""
    summary: TraceSummary
    findings: tuple[Finding, ...]
    elapsed_s: float
    timings_s: dict[str, float] = field(default_factory=dict)

    @property
    def loses_data(self) -> bool:
        return any(f.severity in LOSSY for f in self.findings)

    def count(self, severity: Severity) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    def by_rule(self) -> dict[str, Finding]:
        return {f.rule: f for f in self.findings}


def validation_json(report: ValidationReport) -> dict[str, Any]:
    s = report.summary
    return {
        "path": report.path,
        "container": report.container,
        "loses_data": report.loses_data,
        "counts": {sev: report.count(sev) for sev in SEVERITIES},
        "summary": {
            "events": s.events,
            "events_by_ph": dict(s.events_by_ph),
            "slices": s.slices,
            "counters": s.counters,
            "counter_tracks": s.counter_tracks,
            "flows": s.flows,
            "processes": s.processes,
            "threads": s.threads,
        },
        "findings": [f.to_dict() for f in report.findings],
        "elapsed_s": round(report.elapsed_s, 4),
        "timings_s": {k: round(v, 4) for k, v in report.timings_s.items()},
    }


def _indices(f: Finding) -> str:
    if not f.event_indices:
        return "-"
    shown = ", ".join(f"#{i}" for i in f.event_indices)
    return shown + (", …" if f.count > len(f.event_indices) else "")


def render_validation(report: ValidationReport, console: Console) -> None:
    s = report.summary
    if report.loses_data:
        verdict = "[bold red]Perfetto would lose or mangle data[/bold red]"
    elif report.count("warning"):
        verdict = "[yellow]imports cleanly in Perfetto (with warnings)[/yellow]"
    else:
        verdict = "[green]imports cleanly in Perfetto[/green]"
    console.print(f"[bold]{escape(report.path)}[/bold]: {verdict}")
    phs = ", ".join(f"{ph} {n:,}" for ph, n in sorted(s.events_by_ph.items(), key=lambda kv: -kv[1]))
    console.print(
        f"{s.events:,} events ({phs}) in a {'bare array' if report.container == 'array' else 'traceEvents object'}: "
        f"{s.slices:,} slices, {s.counters:,} counter samples on {s.counter_tracks:,} tracks, {s.flows:,} flows, "
        f"{s.processes:,} processes, {s.threads:,} threads; checked in {report.elapsed_s:.2f} s"
    )
    if not report.findings:
        console.print("no findings")
        return
    table = Table(title="findings", title_justify="left", show_lines=False)
    table.add_column("severity")
    table.add_column("rule")
    table.add_column("events", justify="right", no_wrap=True)
    table.add_column("first", overflow="fold")
    table.add_column("what happens in Perfetto", overflow="fold")
    for f in report.findings:
        table.add_row(f"[{_STYLE[f.severity]}]{f.severity}[/]", f.rule, f"{f.count:,}", _indices(f), escape(f.message))
    console.print(table)
    lossy = [f for f in report.findings if f.severity in LOSSY or f.severity == "warning"]
    if lossy:
        console.print("[bold]how to fix[/bold]")
        for f in lossy:
            console.print(f"  [{_STYLE[f.severity]}]{f.rule}[/]: {escape(f.fix_hint)}")
