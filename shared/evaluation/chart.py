"""The history of a workspace's recall evaluations as a chart: server-rendered SVG, no script
(issue 34). Used by the administration's evaluation page and the explorer.

One line per mode and case source (r@3 of each finished run, oldest left), a marker per run, a
red ring around a run that regressed, the runs' dates under the axis, and a legend. The SVG has
a ``viewBox`` and scales to its container's width; its text is at least 12 px at 900 px wide.
"""

from __future__ import annotations

from datetime import datetime
from html import escape
from typing import Any

#: line colours by mode and source (colour-blind safe: Okabe & Ito's palette)
COLOURS = {("solved", "derived"): "#0072B2", ("search", "derived"): "#E69F00",
           ("rules", "derived"): "#009E73", ("solved", "curated"): "#56B4E9",
           ("search", "curated"): "#D55E00", ("rules", "curated"): "#CC79A7",
           ("search", "title"): "#000000", ("rules", "title"): "#777777"}
WIDTH, HEIGHT = 900, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 180, 16, 48
#: the most runs a chart shows (the newest)
MAX_RUNS = 30


def _x(i: int, n: int) -> float:
    span = WIDTH - LEFT - RIGHT
    return LEFT + (span / 2 if n == 1 else span * i / (n - 1))


def _y(v: float) -> float:
    return TOP + (HEIGHT - TOP - BOTTOM) * (1 - v)


def history_svg(runs: list[dict[str, Any]], metric: str = "r3") -> str:
    """An SVG chart of ``metric`` (``r1``, ``r3``, ``r5`` or ``mrr``) over the finished runs of
    ``runs`` (:class:`shared.archive.evaluations.EvaluationRun` as builtins, any order), at most
    the newest :data:`MAX_RUNS`; a sentence instead of a chart when fewer than one run finished.
    """
    done = sorted((r for r in runs if r["status"] == "done"),
                  key=lambda r: (str(r["finished_at"]), r["id"]))[-MAX_RUNS:]
    label = {"r1": "r@1", "r3": "r@3", "r5": "r@5", "mrr": "MRR"}[metric]
    if not done:
        return '<p class="memarc-hint">No finished evaluation yet: the chart appears after the first run.</p>'
    n = len(done)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
           f'width="100%" role="img" aria-labelledby="chart-title" class="memarc-chart" '
           f'style="max-width: {WIDTH}px; font-family: sans-serif;">',
           f'<title id="chart-title">{label} of the last {n} evaluation run{"s" if n != 1 else ""},'
           ' by mode and case source</title>']
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        y = _y(tick)
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
                   'stroke="#ddd" stroke-width="1"/>')
        out.append(f'<text x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end" font-size="13" '
                   f'fill="#333">{tick:.2f}</text>')
    out.append(f'<text x="14" y="{_y(0.5):.1f}" font-size="13" fill="#333" '
               f'transform="rotate(-90 14 {_y(0.5):.1f})" text-anchor="middle">{label}</text>')
    step = max(1, n // 8)
    for i, run in enumerate(done):
        x = _x(i, n)
        if i % step == 0 or i == n - 1:
            when = run["finished_at"]
            text = when.strftime("%b %d %H:%M") if isinstance(when, datetime) else str(when)[5:16]
            out.append(f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 20}" text-anchor="middle" '
                       f'font-size="12" fill="#333">{escape(text)}</text>')
        if run.get("regression"):
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}" '
                       'stroke="#c00" stroke-width="1" stroke-dasharray="4 3"/>')
            out.append(f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 38}" text-anchor="middle" '
                       'font-size="12" fill="#c00">regression</text>')
    series: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for i, run in enumerate(done):
        for f in run.get("figures", []):
            series.setdefault((f["mode"], f["source"]), []).append((i, float(f[metric])))
    for row, (key, points) in enumerate(sorted(series.items(), key=lambda kv: list(COLOURS).index(kv[0])
                                                if kv[0] in COLOURS else 99)):
        colour = COLOURS.get(key, "#555")
        coords = " ".join(f"{_x(i, n):.1f},{_y(v):.1f}" for i, v in points)
        if len(points) > 1:
            out.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" '
                       'stroke-width="2.5"/>')
        for i, v in points:
            out.append(f'<circle cx="{_x(i, n):.1f}" cy="{_y(v):.1f}" r="4" fill="{colour}">'
                       f'<title>{escape(key[0])} {escape(key[1])}: {label} {v:.3f}</title></circle>')
        ly = TOP + 10 + row * 22
        lx = WIDTH - RIGHT + 16
        out.append(f'<line x1="{lx}" x2="{lx + 22}" y1="{ly}" y2="{ly}" stroke="{colour}" '
                   'stroke-width="3"/>')
        out.append(f'<text x="{lx + 28}" y="{ly + 4}" font-size="13" fill="#222">'
                   f'{escape(key[0])} · {escape(key[1])}</text>')
    out.append("</svg>")
    return "".join(out)
