"""``report.html`` of an A/B session: one self-contained file (inline CSS and SVG, no scripts)."""

from __future__ import annotations

import json
from html import escape

import numpy as np

from fdprof.ab.session import LABELS, MODES, TIMELINE_SPANS, ABResult
from fdprof.analysis.breakdown import PARTS
from fdprof.report import svg
from fdprof.report.ab_markdown import (
    MODE_HEADER,
    RUN_HEADER,
    breakdown_rows,
    mode_rows,
    run_rows,
)
from fdprof.report.ab_text import headline

_CSS = """
body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}
.charts{display:flex;flex-wrap:wrap;gap:12px}
.verdict{padding:.6em 1em;border-radius:4px;font-size:15px}
.verdict.safe{background:#e6f4ea;color:#1e6b34}
.verdict.unsafe{background:#fde8e8;color:#b00020;border:2px solid #b00020}
pre{background:#f6f6f6;padding:1em;font-size:12px;overflow:auto}
"""


def _table(header: list[str], rows: list[list[object]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _cdf(values: np.ndarray) -> tuple[list[float], list[float]]:
    v = np.sort(values)
    return v.tolist(), (np.arange(1, len(v) + 1) / max(len(v), 1)).tolist()


def charts(result: ABResult) -> list[str]:
    throughput = svg.line_chart(
        "Throughput per run",
        {LABELS[m]: ([r.index for r in result.of(m)], result.tokens_per_s(m)) for m in MODES},
        "run (paired by seed)",
        "tokens/s",
        markers=True,
    )
    cdf = svg.line_chart(
        "Step latency CDF",
        {LABELS[m]: _cdf(result.step_ms(m)) for m in MODES},
        "step duration (ms)",
        "fraction of steps",
    )
    bars = svg.stacked_bars(
        "Mean step time by part",
        [LABELS[m] for m in MODES],
        {p: [result.breakdown_ms(m)[p] for m in MODES] for p in PARTS},
        "ms per step",
    )
    timelines = []
    for mode in MODES:
        run = result.of(mode)[0]
        t0, t1 = run.timeline_window
        timelines.append(
            svg.timeline(
                f"Timeline excerpt, {LABELS[mode]} (run {run.index})",
                run.timeline,
                t0,
                t1,
                list(TIMELINE_SPANS),
            )
        )
    return [throughput, cdf, bars, *timelines]


def render(result: ABResult) -> str:
    v = result.verdict
    kinds = "".join(f"<li>{escape(line)}</li>" for line in v.kind_lines())
    verdict = (
        f"<div class='verdict {'safe' if v.safe else 'unsafe'}'><b>{escape(v.line)}</b>"
        + (f"<ul>{kinds}</ul>" if kinds else "")
        + "</div>"
    )
    findings = "".join(f"<li>{escape(line)}</li>" for line in headline(result))
    return "".join(
        [
            "<!doctype html><html><head><meta charset='utf-8'>",
            "<title>fdprof A/B report</title>",
            f"<style>{_CSS}</style></head><body>",
            verdict,
            "<h1>fdprof A/B: KV-cache lock (baseline) vs lockless</h1>",
            f"<ul>{findings}</ul>",
            f"<div class='charts'>{''.join(charts(result))}</div>",
            "<h2>Throughput and step latency</h2>",
            _table(MODE_HEADER, mode_rows(result)),
            "<h2>Where the time went (mean ms per step)</h2>",
            _table(["mode", *PARTS], breakdown_rows(result)),
            "<h2>Every run</h2>",
            _table(RUN_HEADER, run_rows(result)),
            "<h2>Configuration</h2>",
            f"<pre>{escape(json.dumps(result.config, indent=2, sort_keys=True))}</pre>",
            "</body></html>",
        ]
    )
