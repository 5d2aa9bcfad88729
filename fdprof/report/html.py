"""HTML rendering of a report document: one file that opens offline.

The verdict leads (red when not ok, with its details), then the blocks; charts are drawn by
plotly.js, inlined once in the head (zoom and hover on every chart, no network).
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from fdprof.report import document as D
from fdprof.report.tables import as_document

_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:1.5em auto;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.6em 0;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}
th{background:#f3f3f3}
caption{text-align:left;font-weight:600;padding:4px 0}
.chart{width:100%;min-height:200px;margin:.4em 0 1em}
.verdict{padding:.7em 1em;border-radius:6px;font-size:16px;margin-bottom:1em}
.verdict.ok{background:#e6f4ea;color:#1e6b34;border:2px solid #1e6b34}
.verdict.alarm{background:#fde8e8;color:#b00020;border:2px solid #b00020}
.verdict ul{margin:.4em 0 0;font-size:14px}
pre{background:#f6f6f6;padding:.8em;font-size:12px;overflow:auto}
.note{color:#666;font-size:12px}
"""
#: what plotly.js is told for every chart: no logo, no network (no "edit in Chart Studio")
_PLOT_CONFIG = {"displaylogo": False, "responsive": True, "showLink": False}


def render(result: Any) -> str:
    """A document, or any analysis result (hazards, what-if, diff), as one HTML page."""
    doc = as_document(result)
    head = ["<!doctype html><html><head><meta charset='utf-8'>",
            f"<title>{escape(doc.title)}</title><style>{_CSS}</style>"]  # fmt: skip
    if doc.charts:
        from plotly.offline import get_plotlyjs

        head.append(f"<script>{get_plotlyjs()}</script>")
    body = [_verdict(doc.verdict)] if doc.verdict is not None else []
    body.append(f"<h1>{escape(doc.title)}</h1>")
    charts = 0
    for block in doc.blocks:
        if isinstance(block, D.Chart):
            body.append(_chart(block, f"chart-{charts}"))
            charts += 1
        else:
            body.append(_block(block))
    return "".join([*head, "</head><body>", *body, "</body></html>\n"])


def _verdict(v: D.Verdict) -> str:
    details = "".join(f"<li>{escape(d)}</li>" for d in v.details)
    return (
        f"<div class='verdict {'ok' if v.ok else 'alarm'}' id='verdict'><b>{escape(v.line)}</b>"
        + (f"<ul>{details}</ul>" if details else "")
        + "</div>"
    )


def _block(block: D.Block) -> str:
    return D.draw(block, _DRAWERS, "HTML")


def _links(block: D.Links) -> str:
    items = "".join(f"<li><a href='{escape(href)}'>{escape(text)}</a></li>"
                    for text, href in block.items)  # fmt: skip
    return f"<h3>{escape(block.title)}</h3><ul>{items}</ul>"


def _anchor(text: str) -> str:
    """A heading's id, so each section can be linked to: ``Where the time went`` ->
    ``where-the-time-went``."""
    return "-".join("".join(c if c.isalnum() else " " for c in text.lower()).split())


def _table(t: D.Table) -> str:
    notes = "".join(f"<p class='note'>{escape(n)}</p>" for n in t.notes)
    if not t.rows:
        return f"<h3>{escape(t.title)}</h3>{notes}"
    head = "".join(f"<th>{escape(h)}</th>" for h in t.headers)
    rows = "".join(
        "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in t.rows
    )
    return f"<table><caption>{escape(t.title)}</caption><tr>{head}</tr>{rows}</table>{notes}"


def _chart(chart: D.Chart, element_id: str) -> str:
    from plotly.utils import PlotlyJSONEncoder

    from fdprof.report.charts import figure

    fig = figure(chart)
    args = ", ".join(
        json.dumps(part, cls=PlotlyJSONEncoder).replace("</", "<\\/")
        for part in (fig["data"], fig["layout"], _PLOT_CONFIG)
    )
    return (
        f"<div class='chart' id='{element_id}' data-title='{escape(chart.title)}'></div>"
        f"<script>Plotly.newPlot('{element_id}', {args});</script>"
    )


_DRAWERS = {
    D.Heading: lambda b: f"<h2 id='{_anchor(b.text)}'>{escape(b.text)}</h2>",
    D.Paragraph: lambda b: f"<p>{escape(b.text)}</p>",
    D.Bullets: lambda b: "<ul>" + "".join(f"<li>{escape(i)}</li>" for i in b.items) + "</ul>",
    D.Table: _table,
    D.Links: _links,
    D.Code: lambda b: f"<h3>{escape(b.title)}</h3><pre>{escape(b.text)}</pre>",
}
