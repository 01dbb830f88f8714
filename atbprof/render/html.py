"""One self-contained HTML page: a report's sections (the terminal view's tables and lines) and its figures inline
(PNG data URIs, a light and a dark rendering chosen by the reader's colour scheme), no script, no external request.
The first bytes carry atbprof's signature, so `--force` can tell a report of ours from the user's own page."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from atbprof.plots.base import DARK, LIGHT, Plot, render
from atbprof.version import __version__

if TYPE_CHECKING:
    from atbprof.render.sections import Section


@dataclass(frozen=True)
class Page:
    """What a page shows: made by the caller from a typed result (its figures and its terminal view's sections)."""

    kind: str  # run | diff | cluster | sweep | profile
    name: str
    paths: list[Path]
    plots: list[Plot]
    sections: list[Section]


_CSS = """
:root { color-scheme: light dark; --fg: #1f2328; --bg: #ffffff; --muted: #59636e; --line: #d8dee4;
  --head: #f6f8fa; --accent: #0969da; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6edf3; --bg: #0d1117; --muted: #9198a1; --line: #30363d;
  --head: #161b22; --accent: #4493f8; } }
body { margin: 0 auto; max-width: 1180px; padding: 24px; font: 14px/1.5 system-ui, -apple-system, "Segoe UI",
  sans-serif; color: var(--fg); background: var(--bg); }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 28px 0 8px; border-bottom: 1px solid var(--line);
  padding-bottom: 4px; }
.summary { font-weight: 600; } .muted, footer { color: var(--muted); font-size: 12px; }
table { border-collapse: collapse; margin: 6px 0 10px; font-size: 13px; }
.wide { max-width: 100%; overflow-x: auto; }
h1, p, td, figcaption { overflow-wrap: anywhere; }
th, td { border: 1px solid var(--line); padding: 3px 8px; vertical-align: top; }
th { background: var(--head); text-align: left; } td.num { text-align: right; font-variant-numeric: tabular-nums;
  white-space: nowrap; }
figure { margin: 12px 0 22px; } figure img { max-width: 100%; height: auto; border: 1px solid var(--line);
  border-radius: 6px; } figcaption { color: var(--muted); font-size: 12px; }
pre { background: var(--head); padding: 8px; border-radius: 6px; white-space: pre-wrap; overflow-wrap: anywhere; }
nav { display: flex; flex-wrap: wrap; gap: 4px 12px; } nav a { color: var(--accent); }
"""


def _uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _figure(plot: Plot) -> str:
    light, dark = render(plot, LIGHT, "png"), render(plot, DARK, "png")
    notes = "".join(f"<figcaption>{html.escape(n)}</figcaption>" for n in plot.notes)
    return (
        f'<figure id="fig-{html.escape(plot.name)}"><picture>'
        f'<source srcset="{_uri(dark)}" media="(prefers-color-scheme: dark)">'
        f'<img src="{_uri(light)}" alt="{html.escape(plot.title)}" data-figure="{html.escape(plot.name)}">'
        f"</picture>{notes}</figure>"
    )


def _section(sec: Section) -> str:
    out = []
    if sec.title == "summary":
        return f'<p class="summary">{html.escape(sec.lines[0])}</p>' if sec.lines else ""
    out.append(f"<h2>{html.escape(sec.title)}</h2>")
    if sec.rows:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in sec.headers)
        body = []
        for row in sec.rows:
            cells = "".join(
                f'<td class="num">{html.escape(c)}</td>' if i in sec.numeric else f"<td>{html.escape(c)}</td>"
                for i, c in enumerate(row)
            )
            body.append(f"<tr>{cells}</tr>")
        # a wide table scrolls in its own box: the page itself never scrolls sideways
        out.append(
            f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'
        )
    if sec.title == "next" and sec.lines:
        out.append("<pre>" + html.escape("\n".join(sec.lines)) + "</pre>")
    else:
        out += [f"<p>{html.escape(line)}</p>" for line in sec.lines]
    return "".join(out)


def _page(title: str, kind: str, body: list[str]) -> bytes:
    sig = orjson.dumps({"generator": "atbprof", "kind": kind, "atbprof_version": __version__}).decode()
    head = (
        f'<!-- {sig} -->\n<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:; '
        "style-src 'unsafe-inline'\">"
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"
    )
    foot = f"<footer>atbprof {html.escape(__version__)}</footer></body></html>\n"
    return (head + "\n".join(body) + foot).encode()


def report_page(target: Page) -> bytes:
    """The report of a target: its summary, figures, then the tables of its terminal view."""
    sections = target.sections
    summary = [s for s in sections if s.title == "summary"]
    rest = [s for s in sections if s.title != "summary"]
    body = [
        f"<h1>{html.escape(target.name)}</h1>",
        f'<p class="muted">atbprof report of a {target.kind}: '
        f"{html.escape(', '.join(str(p) for p in target.paths))}</p>",
    ]
    body += [_section(s) for s in summary]
    if target.plots:
        body.append("<nav>" + "".join(f'<a href="#fig-{p.name}">{html.escape(p.title)}</a>' for p in target.plots))
        body.append("</nav>")
        body += [_figure(p) for p in target.plots]
    body += [_section(s) for s in rest]
    return _page(f"atbprof: {target.name}", "report", body)


def figures_page(target: Page) -> bytes:
    """Only the figures (`atbprof plot --format html`)."""
    body = [f"<h1>{html.escape(target.name)}</h1>", *(_figure(p) for p in target.plots)]
    return _page(f"atbprof figures: {target.name}", "figures", body)
