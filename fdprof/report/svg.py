"""Inline SVG charts for self-contained reports: no plotting library, no scripts, no network.

Each function takes plain numbers and returns an ``<svg>`` string. Analyses never call these;
renderers do.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3")
_W, _H = 640, 300
_PAD_L, _PAD_R, _PAD_T, _PAD_B = 64, 16, 28, 44


def _scale(lo: float, hi: float, a: float, b: float):
    span = (hi - lo) or 1.0
    return lambda v: a + (v - lo) / span * (b - a)


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


def _frame(title: str, x_label: str, y_label: str, body: list[str], legend: Sequence[str]) -> str:
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" width="{_W}" '
        f'height="{_H}" font-family="sans-serif" font-size="11">',
        f'<text x="{_W / 2}" y="16" text-anchor="middle" font-size="13">{escape(title)}</text>',
        f'<text x="{_W / 2}" y="{_H - 6}" text-anchor="middle">{escape(x_label)}</text>',
        f'<text x="14" y="{_H / 2}" text-anchor="middle" transform="rotate(-90 14 {_H / 2})">'
        f"{escape(y_label)}</text>",
        *body,
    ]
    parts.extend(_legend(legend, _PAD_L + 10, 150))
    parts.append("</svg>")
    return "".join(parts)


def _legend(labels: Sequence[str], x0: float, step: float) -> list[str]:
    out = []
    for i, label in enumerate(labels):
        x, color = x0 + i * step, PALETTE[i % len(PALETTE)]
        out.append(
            f'<rect x="{x}" y="{_PAD_T}" width="10" height="10" fill="{color}"/>'
            f'<text x="{x + 14}" y="{_PAD_T + 9}">{escape(label)}</text>'
        )
    return out


def _axes(
    xlo: float, xhi: float, ylo: float, yhi: float, x_ticks: bool = True
) -> tuple[list[str], object, object]:
    sx = _scale(xlo, xhi, _PAD_L, _W - _PAD_R)
    sy = _scale(ylo, yhi, _H - _PAD_B, _PAD_T + 16)
    body = [
        f'<line x1="{_PAD_L}" y1="{_H - _PAD_B}" x2="{_W - _PAD_R}" y2="{_H - _PAD_B}" '
        'stroke="#333"/>',
        f'<line x1="{_PAD_L}" y1="{_PAD_T + 16}" x2="{_PAD_L}" y2="{_H - _PAD_B}" stroke="#333"/>',
    ]
    for t in _ticks(ylo, yhi):
        y = sy(t)
        body.append(
            f'<line x1="{_PAD_L - 3}" y1="{y:.1f}" x2="{_W - _PAD_R}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text x="{_PAD_L - 5}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>'
        )
    for t in _ticks(xlo, xhi) if x_ticks else ():
        x = sx(t)
        body.append(
            f'<text x="{x:.1f}" y="{_H - _PAD_B + 14}" text-anchor="middle">{_fmt(t)}</text>'
        )
    return body, sx, sy


def line_chart(
    title: str,
    series: dict[str, tuple[Sequence[float], Sequence[float]]],
    x_label: str,
    y_label: str,
    markers: bool = False,
) -> str:
    """One polyline (or points with ``markers``) per series, on shared axes."""
    xs = [x for xv, _ in series.values() for x in xv] or [0.0]
    ys = [y for _, yv in series.values() for y in yv] or [0.0]
    ylo = min(0.0, min(ys))
    body, sx, sy = _axes(min(xs), max(xs), ylo, max(ys) * 1.05 or 1.0)
    for i, (xv, yv) in enumerate(series.values()):
        color = PALETTE[i % len(PALETTE)]
        points = [(sx(x), sy(y)) for x, y in zip(xv, yv, strict=True)]
        if markers:
            body.extend(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"/>' for x, y in points
            )
        elif points:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
            body.append(
                f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>'
            )
    return _frame(title, x_label, y_label, body, list(series))


def stacked_bars(
    title: str, categories: Sequence[str], parts: dict[str, Sequence[float]], y_label: str
) -> str:
    """One vertical bar per category, stacked from ``parts`` (part name -> value per category)."""
    totals = [sum(v[i] for v in parts.values()) for i in range(len(categories))]
    body, _, sy = _axes(0, 1, 0, (max(totals) if totals else 1.0) * 1.1 or 1.0, x_ticks=False)
    slot = (_W - _PAD_L - _PAD_R) / max(len(categories), 1)
    for ci, category in enumerate(categories):
        x = _PAD_L + ci * slot + slot * 0.25
        base = 0.0
        for pi, values in enumerate(parts.values()):
            y0, y1 = sy(base), sy(base + values[ci])
            body.append(
                f'<rect x="{x:.1f}" y="{y1:.1f}" width="{slot * 0.5:.1f}" '
                f'height="{max(y0 - y1, 0):.1f}" fill="{PALETTE[pi % len(PALETTE)]}"/>'
            )
            base += values[ci]
        body.append(
            f'<text x="{x + slot * 0.25:.1f}" y="{_H - _PAD_B + 14}" text-anchor="middle">'
            f"{escape(category)}</text>"
        )
    return _frame(title, "", y_label, body, list(parts))


def timeline(
    title: str,
    lanes: Sequence[tuple[str, Sequence[tuple[float, float, int]]]],
    t0: float,
    t1: float,
    kinds: Sequence[str],
) -> str:
    """Horizontal lanes of ``(start, end, kind index)`` boxes between ``t0`` and ``t1`` (ms)."""
    height = _PAD_T + 24 + 22 * len(lanes) + _PAD_B
    label_w = 150
    sx = _scale(t0, t1, label_w, _W - _PAD_R)
    body = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {height}" width="{_W}" '
        f'height="{height}" font-family="sans-serif" font-size="11">',
        f'<text x="{_W / 2}" y="16" text-anchor="middle" font-size="13">{escape(title)}</text>',
    ]
    body.extend(_legend(kinds, label_w, 130))
    for li, (label, boxes) in enumerate(lanes):
        y = _PAD_T + 24 + li * 22
        body.append(f'<text x="4" y="{y + 13}">{escape(label)}</text>')
        body.append(
            f'<line x1="{label_w}" y1="{y + 18}" x2="{_W - _PAD_R}" y2="{y + 18}" stroke="#eee"/>'
        )
        for start, end, kind in boxes:
            a, b = sx(max(start, t0)), sx(min(end, t1))
            if b <= a:
                continue
            body.append(
                f'<rect x="{a:.1f}" y="{y}" width="{max(b - a, 0.5):.1f}" height="16" '
                f'fill="{PALETTE[kind % len(PALETTE)]}"/>'
            )
    axis_y = _PAD_T + 24 + 22 * len(lanes) + 14
    for t in _ticks(t0, t1):
        body.append(
            f'<text x="{sx(t):.1f}" y="{axis_y}" text-anchor="middle">{_fmt(t - t0)}</text>'
        )
    body.append(f'<text x="{_W / 2}" y="{axis_y + 16}" text-anchor="middle">ms</text></svg>')
    return "".join(body)
