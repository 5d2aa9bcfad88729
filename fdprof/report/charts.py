"""Charts of a report document as Plotly figures (JSON for plotly.js).

Plotly, not hand-built SVG: its axes pick readable 1-2-5 ticks, log axes and hover values come
with it, and one inlined copy of plotly.js draws every chart of a file offline (why Plotly is
the dependency: pyproject.toml). Only :mod:`fdprof.report.html` calls this.
"""

from __future__ import annotations

import math
from typing import Any

from fdprof.report.document import Chart, Series

_FONT = {"family": "system-ui, sans-serif", "size": 12}


def figure(chart: Chart) -> dict[str, Any]:
    """``chart`` as a plotly.js figure: ``{"data": [...], "layout": {...}}``."""
    import plotly.graph_objects as go

    fig = go.Figure([_trace(s, go) for s in chart.series])
    x_axis: dict[str, Any] = {"title": {"text": chart.x_title}, "zeroline": False}
    y_axis: dict[str, Any] = {"title": {"text": chart.y_title}, "automargin": True}
    if chart.log_x:
        x_axis |= _log_axis([x for s in chart.series for x in s.x])
    if chart.log_y:
        reference = [] if chart.reference_y is None else [chart.reference_y]
        y_axis |= _log_axis(_y_extent(chart) + reference)
    if chart.integer_x:
        x_axis |= {"tick0": 0, "dtick": 1, "tickformat": "d"}
    hbar = any(s.style == "hbar" for s in chart.series)
    fig.update_layout(
        title={"text": chart.title, "x": 0.02},
        xaxis=x_axis,
        yaxis=y_axis | ({"autorange": "reversed"} if hbar else {}),
        barmode="stack" if chart.stacked or hbar else "group",
        template="plotly_white",
        font=_FONT,
        height=200 + 28 * _lanes(chart) if hbar else 360,
        margin={"l": 70, "r": 20, "t": 50, "b": 55},
        legend={"orientation": "h", "y": -0.22 if not hbar else -0.5},
        hovermode="closest",
    )  # fmt: skip
    if chart.reference_y is not None:
        fig.add_hline(y=chart.reference_y, line_dash="dash", line_color="#555")
    return fig.to_plotly_json()


def _y_extent(chart: Chart) -> list[float]:
    """Every y a chart shows, error bars' ends included."""
    out = []
    for s in chart.series:
        out += list(s.y)
        if s.error is not None:
            out += [y - m for y, m in zip(s.y, s.error[0], strict=True)]
            out += [y + p for y, p in zip(s.y, s.error[1], strict=True)]
    return out


def _log_axis(values: list[float]) -> dict[str, Any]:
    """A log axis over ``values`` with a margin, so no marker sits on its edge, and ticks
    labelled in full: 1-2-5 per decade (0.5, 1, 2, 5, 10, ...) where the values span a factor
    of 4 or more, else evenly spaced 1-2-5 steps (0.9, 1, 1.1, ...), where a decade's ticks
    would leave one label or none."""
    positive = [float(v) for v in values if v is not None and float(v) > 0]
    if not positive:
        return {"type": "log"}
    low, high = min(positive), max(positive)
    margin = max(0.08 * math.log10(high / low), 0.02)
    shown = (math.log10(low) - margin, math.log10(high) + margin)
    bottom, top = 10 ** shown[0], 10 ** shown[1]
    if high / low >= 4:
        decades = range(math.floor(shown[0]) - 1, math.ceil(shown[1]) + 1)
        ticks = [m * 10.0**k for k in decades for m in (1, 2, 5)]
    else:
        step = _nice_step((top - bottom) / 6)
        ticks = [k * step for k in range(math.ceil(bottom / step), math.floor(top / step) + 1)]
    ticks = [round(t, 12) for t in ticks if bottom <= t <= top]
    return {"type": "log", "range": list(shown), "tickvals": ticks,
            "ticktext": [f"{t:g}" for t in ticks]}  # fmt: skip


def _nice_step(rough: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at least ``rough``."""
    power = 10.0 ** math.floor(math.log10(rough))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= rough)


def _lanes(chart: Chart) -> int:
    return len({y for s in chart.series for y in s.y})


def _trace(s: Series, go) -> Any:
    common: dict[str, Any] = {"name": s.name}
    if s.hover is not None:
        common |= {"hovertext": list(s.hover), "hoverinfo": "text+name"}
    if s.style == "hbar":
        return go.Bar(x=list(s.x), y=list(s.y), base=list(s.base or ()), orientation="h",
                      marker_color=s.color, width=0.7, **common)  # fmt: skip
    error = None
    if s.error is not None:
        minus, plus = s.error
        error = {"type": "data", "symmetric": False, "array": list(plus),
                 "arrayminus": list(minus), "thickness": 2, "width": 8}  # fmt: skip
    if s.style == "bar":
        return go.Bar(x=list(s.x), y=list(s.y), marker_color=s.color, error_y=error, **common)
    line = {"color": s.color, "width": 2} if s.color else {"width": 2}
    return go.Scatter(x=list(s.x), y=list(s.y), mode=s.style, line=line,
                      marker={"size": 9, "color": s.color}, error_y=error, **common)  # fmt: skip
