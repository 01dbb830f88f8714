"""The gain a sweep compares (its `compare:`: e.g. fusion seed000-baseline -> seed000-lnfused), in % of the base
figure, against the first numeric swept key, one line per combination of the other keys; published claims
(`reference:`) drawn at their points as diamonds with their range."""

from __future__ import annotations

from typing import Any

from atbprof.plots.base import Plot, Theme, legend, style_axes
from atbprof.plots.sweep_data import MAX_SERIES, label_of


def sweep_gain_plot(
    gains: list[dict[str, Any]], claims: list[dict[str, Any]], keys: list[str], axis: str, what: str, name: str
) -> Plot | None:
    """`gains`: rows {at: {key: value}, gain_pct}; `claims`: {label, at, claimed_pct: [lo, hi], model_pct}."""
    others = [k for k in keys if k != axis]
    numeric = [
        k
        for k in others
        if len({str(g["at"].get(k)) for g in gains}) > 1
        and all(isinstance(g["at"].get(k), int | float) and not isinstance(g["at"].get(k), bool) for g in gains)
    ]
    if not gains:
        return None
    x = numeric[0] if numeric else None
    rest = [k for k in others if k != x and len({str(g["at"].get(k)) for g in gains}) > 1]
    series: dict[tuple[str, ...], dict[str, Any]] = {}
    for g in gains:
        key = tuple(str(g["at"].get(k)) for k in rest)
        entry = series.setdefault(
            key,
            {
                "label": ", ".join(label_of(k, g["at"].get(k)) for k in rest) or "gain",
                "points": [],
                "at": {k: g["at"].get(k) for k in rest},
            },
        )
        entry["points"].append([g["at"].get(x) if x else 0, g["gain_pct"]])
    lines = list(series.values())
    for ln in lines:
        ln["points"].sort(key=lambda p: p[0])
    refs = []
    for c in claims:
        match = next(
            (i for i, ln in enumerate(lines) if all(str(c["at"].get(k, v)) == str(v) for k, v in ln["at"].items())),
            None,
        )
        refs.append(
            {
                "label": c["label"],
                "x": c["at"].get(x) if x else 0,
                "lo": c["claimed_pct"][0],
                "hi": c["claimed_pct"][1],
                "series": match,
            }
        )
    data = {"x": x, "what": what, "series": lines[:MAX_SERIES], "claims": refs}
    return Plot("sweep-gain", f"{name}: gain of {what}", data, _draw, size=(8.6, 4.8))


def _draw(fig: Any, theme: Theme, data: dict[str, Any]) -> None:
    ax = fig.add_subplot()
    style_axes(ax, theme)
    for i, ln in enumerate(data["series"]):
        pts = ln["points"]
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker="o",
            markersize=4,
            linewidth=1.4,
            color=theme.palette[i % len(theme.palette)],
            label=f"model: {ln['label']}",
        )
    for c in data["claims"]:
        color = theme.palette[c["series"] % len(theme.palette)] if c["series"] is not None else theme.fg
        mid = (c["lo"] + c["hi"]) / 2
        ax.errorbar(
            [c["x"]],
            [mid],
            yerr=[[mid - c["lo"]], [c["hi"] - mid]],
            fmt="D",
            markersize=7,
            capsize=4,
            color=color,
            markeredgecolor=theme.fg,
            label=c["label"],
        )
    ax.axhline(0, color=theme.muted, linewidth=0.8)
    ax.set_xlabel(data["x"] or "")
    ax.set_ylabel("gain (%): (base - new) / base")
    values = sorted({p[0] for ln in data["series"] for p in ln["points"] if p[0] is not None})
    if values and values[0] > 0 and values[-1] / values[0] >= 16:
        ax.set_xscale("log", base=2)
        ax.set_xticks(values, [f"{v:g}" for v in values])
        ax.minorticks_off()
    legend(ax, theme, fontsize=7, loc="best")
