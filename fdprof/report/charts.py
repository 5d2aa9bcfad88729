"""Charts of a report document as Plotly figures (JSON for plotly.js).

Plotly, not hand-built SVG: its axes pick readable 1-2-5 ticks, log axes and hover values come
with it, and one inlined copy of plotly.js draws every chart of a file offline (why Plotly is
the dependency: pyproject.toml). Only :mod:`fdprof.report.html` calls this.
"""

from __future__ import annotations

from typing import Any

from fdprof.report.document import Chart, Series

_FONT = {"family": "system-ui, sans-serif", "size": 12}


def figure(chart: Chart) -> dict[str, Any]:
    """``chart`` as a plotly.js figure: ``{"data": [...], "layout": {...}}``."""
    import plotly.graph_objects as go

    fig = go.Figure([_trace(s, go) for s in chart.series])
    x_axis: dict[str, Any] = {"title": {"text": chart.x_title}, "zeroline": False}
    if chart.log_x:
        x_axis["type"] = "log"
    if chart.integer_x:
        x_axis |= {"tick0": 0, "dtick": 1, "tickformat": "d"}
    hbar = any(s.style == "hbar" for s in chart.series)
    fig.update_layout(
        title={"text": chart.title, "x": 0.02},
        xaxis=x_axis,
        yaxis={"title": {"text": chart.y_title}, "automargin": True,
               **({"autorange": "reversed"} if hbar else {})},
        barmode="stack" if chart.stacked or hbar else "group",
        template="plotly_white",
        font=_FONT,
        height=200 + 28 * _lanes(chart) if hbar else 360,
        margin={"l": 70, "r": 20, "t": 50, "b": 55},
        legend={"orientation": "h", "y": -0.22 if not hbar else -0.5},
        hovermode="closest",
    )  # fmt: skip
    if chart.reference_y is not None:
        fig.add_hline(
            y=chart.reference_y,
            line_dash="dash",
            line_color="#555",
            annotation_text=f"{chart.reference_y:g}",
            annotation_position="right",
        )
    return fig.to_plotly_json()


def _lanes(chart: Chart) -> int:
    return len({y for s in chart.series for y in s.y})


def _trace(s: Series, go) -> Any:
    common: dict[str, Any] = {"name": s.name}
    if s.hover is not None:
        common |= {"text": list(s.hover), "hoverinfo": "text+name"}
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
