"""A report as a list of sections (a line of text or a table of strings), drawn by rich or written as Markdown.

Every report's terminal and Markdown forms come from one list, so they can not drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich loads only for the terminal form (the JSON and Markdown twins start faster without it)
    from rich.console import Console


@dataclass
class Section:
    title: str
    headers: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # plain text (no table)
    numeric: set[int] = field(default_factory=set)  # right-aligned columns
    row_styles: list[str] = field(default_factory=list)  # rich style per row ("" = none), terminal only


def render_sections(sections: list[Section], console: Console, quiet_titles: tuple[str, ...] = ("source",)) -> None:
    """`summary` is printed bold, `next` as `next: ...` lines, tables with their title."""
    from rich.markup import escape
    from rich.table import Table

    for sec in sections:
        if sec.title == "summary":
            console.print(f"[bold]{escape(sec.lines[0])}[/bold]")
            continue
        if sec.title == "next":
            for line in sec.lines:
                console.print(f"next: {escape(line)}")
            continue
        if sec.rows and not _fits(sec, console.width):
            _render_cards(sec, console)
        elif sec.rows:
            table = Table(title=sec.title, title_justify="left")
            for i, h in enumerate(sec.headers):
                if i in sec.numeric:  # a number is never broken across lines: the prose columns give way
                    table.add_column(h, justify="right", no_wrap=True)
                else:
                    table.add_column(h, justify="left", overflow="fold")
            for i, row in enumerate(sec.rows):
                style = sec.row_styles[i] if i < len(sec.row_styles) else ""
                table.add_row(*(escape(c) for c in row), style=style or None)
            console.print(table)
        elif sec.headers or sec.title not in quiet_titles:
            console.print(f"[bold]{escape(sec.title)}[/bold]")
        for line in sec.lines:
            console.print(escape(line))


PROSE_MIN = 14
"""A text column narrower than this reads badly: such a table is drawn as one block per row instead."""


def _fits(sec: Section, width: int) -> bool:
    """Whether the table fits `width` with whole numbers and text columns of at least PROSE_MIN characters."""
    need = 3 * len(sec.headers) + 1  # borders and padding
    for i, h in enumerate(sec.headers):
        cells = [h, *(row[i] for row in sec.rows if i < len(row))]
        widest = max(len(c) for c in cells)
        need += widest if i in sec.numeric else min(widest, PROSE_MIN)
    return need <= width


def _render_cards(sec: Section, console: Console) -> None:
    """A table too wide for the terminal: its title, then per row `header: value` lines (numbers stay whole)."""
    from rich.markup import escape

    console.print(f"[bold]{escape(sec.title)}[/bold]")
    for i, row in enumerate(sec.rows):
        style = sec.row_styles[i] if i < len(sec.row_styles) else ""
        head = escape(sec.headers[0]) if sec.headers else ""
        first = (f"{head}: {escape(row[0])}" if head else escape(row[0])) if row else ""
        console.print(f"- {first}", style=style or None)
        for h, cell in zip(sec.headers[1:], row[1:], strict=False):
            if cell:
                console.print(f"  {escape(h)}: {escape(cell)}")


def sections_markdown(sections: list[Section], heading: str) -> str:
    out: list[str] = []
    for sec in sections:
        if sec.title == "summary":
            out += [f"# {heading}", "", f"**{sec.lines[0]}**", ""]
            continue
        out += [f"## {sec.title}", ""]
        if sec.rows:
            out.append("| " + " | ".join(sec.headers) + " |")
            out.append("|" + "|".join("---:" if i in sec.numeric else "---" for i in range(len(sec.headers))) + "|")
            out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in sec.rows]
            out.append("")
        if sec.title == "next":
            out += ["```", *sec.lines, "```", ""]
        elif sec.lines:
            out += [*sec.lines, ""]
    return "\n".join(out)
