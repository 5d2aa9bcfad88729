"""Grafana dashboards generated from code.

Metric names come only from :mod:`fdprof.metric_names`, so the probe and the dashboards
cannot drift apart silently. ``python -m fdprof.dashboards`` rewrites ``dashboards/*.json``;
the tests fail when the committed files are not what this package generates.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from fdprof.dashboards import overview, traces
from fdprof.dashboards.queries import Query, queries

#: file name in ``dashboards/`` → builder; the file is named after the dashboard's uid
BUILDERS: dict[str, Callable[[], dict]] = {
    f"{overview.UID}.json": overview.build,
    f"{traces.UID}.json": traces.build,
}


def render(dashboard: dict) -> str:
    return json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n"


def generate() -> dict[str, str]:
    """File name → JSON text of every dashboard."""
    return {name: render(build()) for name, build in BUILDERS.items()}


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in generate().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def stale(directory: Path) -> list[str]:
    """Names of the dashboard files in ``directory`` that are missing or out of date."""
    out = []
    for name, text in generate().items():
        path = directory / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            out.append(name)
    return out


def promql(window: str, range_: str | None = None) -> list[Query]:
    """Every PromQL query of every dashboard, ``$__rate_interval`` set to ``window`` and
    ``$__range`` to ``range_`` (``window`` unless given)."""
    return [
        q
        for build in BUILDERS.values()
        for q in queries(build(), window, range_)
        if q.language == "promql"
    ]
