"""The figure interface: a `Plot` is the aggregates it draws (JSON-able data, never per-op rows) and a function
that draws them on a matplotlib Figure in a theme; `render` turns it into PNG or SVG bytes.

Output is byte-reproducible: matplotlib's Agg backend, no pyplot state, the bundled DejaVu fonts, no dates in the
files, a fixed SVG id salt. Each file carries the SHA-256 of its data (PNG text chunk / SVG description
`atbprof-data`), so a committed figure can be checked current from its data without re-rendering it.
Two themes, light and dark, with the Okabe-Ito palette (tells colours apart for the colour-blind, reads on both).
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import orjson

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FigureFormat = Literal["png", "svg"]
DPI = 110


@dataclass(frozen=True)
class Theme:
    name: str
    fg: str
    bg: str
    grid: str
    muted: str
    palette: tuple[str, ...]
    good: str
    bad: str


_OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999")
LIGHT = Theme("light", "#1f2328", "#ffffff", "#d8dee4", "#59636e", _OKABE_ITO, "#1a7f37", "#cf222e")
DARK = Theme(
    "dark",
    "#e6edf3",
    "#0d1117",
    "#30363d",
    "#9198a1",
    ("#56B4E9", *_OKABE_ITO[1:4], "#0072B2", *_OKABE_ITO[5:]),
    "#3fb950",
    "#f85149",
)
THEMES = {"light": LIGHT, "dark": DARK}


@dataclass(frozen=True)
class Plot:
    """One figure: `name` (its file stem), a title, the data drawn, and how to draw it."""

    name: str
    title: str
    data: dict[str, Any]
    draw: Callable[[Figure, Theme, dict[str, Any]], None]
    size: tuple[float, float] = (8.0, 4.5)
    notes: list[str] = field(default_factory=list)

    def digest(self) -> str:
        doc = {"name": self.name, "title": self.title, "data": self.data}
        return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)).hexdigest()


def _matplotlib() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    matplotlib.rcParams.update(
        {
            "svg.hashsalt": "atbprof",
            "svg.fonttype": "path",
            "font.family": "DejaVu Sans",
            "font.size": 9,
            "axes.titlesize": 11,
            "path.simplify": True,
        }
    )
    return matplotlib


def new_figure(plot: Plot, theme: Theme) -> Figure:
    """A themed Figure (no pyplot: nothing global, safe in worker threads)."""
    _matplotlib()
    from matplotlib.figure import Figure

    fig = Figure(figsize=plot.size, dpi=DPI, facecolor=theme.bg, layout="constrained")
    return fig


def style_axes(ax: Any, theme: Theme) -> None:
    ax.set_facecolor(theme.bg)
    for spine in ax.spines.values():
        spine.set_color(theme.grid)
    ax.tick_params(colors=theme.fg, which="both")
    ax.xaxis.label.set_color(theme.fg)
    ax.yaxis.label.set_color(theme.fg)
    ax.title.set_color(theme.fg)
    ax.grid(True, color=theme.grid, linewidth=0.6, alpha=0.8)
    ax.set_axisbelow(True)


def legend(ax: Any, theme: Theme, **kwargs: Any) -> None:
    leg = ax.legend(frameon=True, facecolor=theme.bg, edgecolor=theme.grid, labelcolor=theme.fg, **kwargs)
    if leg is not None and leg.get_title() is not None:
        leg.get_title().set_color(theme.fg)


def render(plot: Plot, theme: Theme = LIGHT, fmt: FigureFormat = "png") -> bytes:
    """The figure's file bytes (the same plot and theme: the same bytes, so one rendering serves a sweep's plots
    directory and its report page)."""
    key = (plot.digest(), plot.size, plot.draw.__module__, plot.draw.__qualname__, theme.name, fmt)
    done = _RENDERED.get(key)
    if done is None:
        if len(_RENDERED) >= 32:
            _RENDERED.clear()
        done = _RENDERED[key] = _render(plot, theme, fmt)
    return done


_RENDERED: dict[tuple[object, ...], bytes] = {}


TITLE_PT = 11
_CHAR_WIDTH_EM = 0.6  # DejaVu Sans averages ~0.55 em a character: a little margin on top


def fitted_title(title: str, width_in: float) -> str:
    """The title wrapped to the figure's width (a long sweep or run name would otherwise run off the edge)."""
    import textwrap

    per_line = max(20, int(width_in * 72 * 0.97 / (TITLE_PT * _CHAR_WIDTH_EM)))
    return "\n".join(textwrap.wrap(title, per_line, break_long_words=True, break_on_hyphens=True)) or title


def _render(plot: Plot, theme: Theme, fmt: FigureFormat) -> bytes:
    fig = new_figure(plot, theme)
    plot.draw(fig, theme, plot.data)
    fig.suptitle(fitted_title(plot.title, plot.size[0]), color=theme.fg, fontsize=TITLE_PT, x=0.01, ha="left")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    digest = plot.digest()
    if fmt == "png":
        meta = {"Software": None, "atbprof-data": digest, "Title": plot.title}
        fig.savefig(buf, format="png", dpi=DPI, metadata=meta, facecolor=theme.bg)
    else:
        meta = {"Date": None, "Creator": None, "Description": f"atbprof-data {digest}", "Title": plot.title}
        fig.savefig(buf, format="svg", metadata=meta, facecolor=theme.bg)
    return buf.getvalue()


def png_data_digest(png: bytes) -> str | None:
    """The `atbprof-data` digest a PNG of ours carries (tEXt chunk), or None."""
    pos = 8
    while pos + 8 <= len(png):
        length = int.from_bytes(png[pos : pos + 4], "big")
        kind = png[pos + 4 : pos + 8]
        body = png[pos + 8 : pos + 8 + length]
        if kind == b"tEXt" and body.startswith(b"atbprof-data\x00"):
            return body.split(b"\x00", 1)[1].decode("latin-1")
        pos += 12 + length
    return None


def ms(x: float) -> str:
    return f"{x:,.2f}"


def figure_files(plots: list[Plot], fmt: FigureFormat, theme: str = "light") -> dict[str, bytes]:
    """File name -> bytes of each plot."""
    return {f"{p.name}.{fmt}": render(p, THEMES[theme], fmt) for p in plots}
