"""Server-side SVG line charts for the console's history (throughput, lag).

:func:`line_chart` draws series of (unix time, value) points: a title, a y axis with
"nice" ticks (1, 2 or 5 times a power of ten) and the unit, an x axis with at most five time
ticks (UTC, HH:MM:SS; MM-DD HH:MM over a day or more) spaced so their labels never overlap
and never two in the same second, one polyline per series (at most
:data:`MAX_SERIES`, the largest last values first) and a legend laid out in columns below the
plot, names shortened to fit their column. Every text is XML-escaped. Pure functions.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
MAX_SERIES = len(PALETTE)
WIDTH = 640
PLOT_HEIGHT = 200
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 28, 34
LEGEND_COLUMN = 200
LEGEND_ROW = 18
CHAR_W = 6.6  # average width of a 11px sans-serif character


def nice_step(span: float, ticks: int = 5) -> float:
    """A step of 1, 2 or 5 times a power of ten giving about ``ticks`` ticks over ``span``."""
    if span <= 0:
        return 1.0
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * power >= raw:
            return float(m * power)
    return float(10 * power)


def format_value(v: float) -> str:
    """A tick value in at most 5 characters: 0.25, 1500, 25k, 3M, 1.5G, 20T."""
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{suffix}"
    if abs(v) >= 10_000:
        return f"{v / 1000:g}k"
    return f"{v:g}" if v == int(v) else f"{v:.2g}"


def _shorten(name: str, width_px: float) -> str:
    room = max(int(width_px / CHAR_W), 4)
    return name if len(name) <= room else name[: room - 1] + "\u2026"


def line_chart(series: Mapping[str, Sequence[tuple[float, float]]], title: str, unit: str) -> str:
    """The SVG markup of the chart (a note instead of lines while there are < 2 points)."""
    chosen = sorted(
        ((n, list(p)) for n, p in series.items() if p),
        key=lambda item: (-item[1][-1][1], item[0]),
    )[:MAX_SERIES]
    columns = max(int((WIDTH - LEFT) // LEGEND_COLUMN), 1)
    legend_rows = math.ceil(len(chosen) / columns) if chosen else 0
    height = TOP + PLOT_HEIGHT + BOTTOM + legend_rows * LEGEND_ROW + 6
    plot_w = WIDTH - LEFT - RIGHT
    parts = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<text x="{LEFT}" y="16" class="chart-title">{escape(title)}</text>',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{PLOT_HEIGHT}" class="plot"/>',
    ]
    points = [pt for _n, p in chosen for pt in p]
    if len(points) < 2:
        parts.append(
            f'<text x="{LEFT + plot_w / 2}" y="{TOP + PLOT_HEIGHT / 2}" text-anchor="middle" '
            'class="chart-note">collecting samples\u2026</text></svg>'
        )
        return "".join(parts)
    t0 = min(t for t, _ in points)
    t1 = max(t for t, _ in points)
    if t1 <= t0:
        t1 = t0 + 1
    top = max(v for _, v in points)
    step = nice_step(top if top > 0 else 1)
    y_max = step * math.ceil((top if top > 0 else 1) / step)

    def x_of(t: float) -> float:
        return LEFT + (t - t0) / (t1 - t0) * plot_w

    def y_of(v: float) -> float:
        return TOP + PLOT_HEIGHT - v / y_max * PLOT_HEIGHT

    tick = 0.0
    while tick <= y_max + step / 2:
        y = y_of(tick)
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}" class="grid"/>'
        )
        parts.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">'
            f"{escape(format_value(tick))}</text>"
        )
        tick += step
    parts.append(
        f'<text x="14" y="{TOP + PLOT_HEIGHT / 2}" class="axis-label" text-anchor="middle" '
        f'transform="rotate(-90 14 {TOP + PLOT_HEIGHT / 2})">{escape(unit)}</text>'
    )
    fmt = "%H:%M:%S" if t1 - t0 < 86_400 else "%m-%d %H:%M"
    label_w = len(time.strftime(fmt, time.gmtime(t0))) * CHAR_W + 12
    # at most 5, never closer than a label's width, never two in the same second
    ticks = max(min(5, int(plot_w // label_w), int(t1 - t0) + 1), 2)
    for i in range(ticks):
        t = t0 + (t1 - t0) * i / (ticks - 1)
        x = x_of(t)
        anchor = "start" if i == 0 else ("end" if i == ticks - 1 else "middle")
        parts.append(
            f'<text x="{x:.1f}" y="{TOP + PLOT_HEIGHT + 16}" text-anchor="{anchor}" '
            f'class="tick">{time.strftime(fmt, time.gmtime(t))}</text>'
        )
    parts.append(
        f'<text x="{LEFT + plot_w}" y="{TOP + PLOT_HEIGHT + 30}" text-anchor="end" '
        'class="axis-label">time (UTC)</text>'
    )
    for i, (name, pts) in enumerate(chosen):
        color = PALETTE[i % len(PALETTE)]
        coords = " ".join(f"{x_of(t):.1f},{y_of(v):.1f}" for t, v in pts)
        parts.append(
            f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2">'
            f"<title>{escape(name)}</title></polyline>"
        )
        row, col = divmod(i, columns)
        lx = LEFT + col * LEGEND_COLUMN
        ly = TOP + PLOT_HEIGHT + BOTTOM + row * LEGEND_ROW + 10
        parts.append(f'<rect x="{lx}" y="{ly - 9}" width="12" height="4" fill="{color}"/>')
        parts.append(
            f'<text x="{lx + 16}" y="{ly - 4}" class="legend">'
            f"{escape(_shorten(name, LEGEND_COLUMN - 24))}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
