"""The queries of a generated dashboard, with its variables substituted, ready to run.

This is what the tests run against a real Prometheus (every PromQL target of every panel)
and what ``python -m fdprof.dashboards --verify URL`` runs against a live stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


@dataclass(frozen=True)
class Query:
    dashboard: str
    panel: str
    ref: str
    language: str  # "promql" | "traceql"
    text: str
    #: Grafana shows this target's exemplars (links to traces)
    exemplar: bool = False

    def __str__(self) -> str:
        return f"{self.dashboard} / {self.panel} / {self.ref}: {self.text}"


def variable_values(dashboard: dict, window: str, range_: str | None = None) -> dict[str, str]:
    """What Grafana substitutes with every multi-select at "All", single selects and textboxes
    at their default.

    ``window`` stands for ``$__rate_interval`` and ``$__interval``, ``range_`` (``window``
    unless given) for ``$__range``, the dashboard's time range.
    """
    values = {"__rate_interval": window, "__interval": window, "__range": range_ or window}
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query" and var.get("includeAll"):
            values[var["name"]] = var["allValue"]
        elif var["type"] == "query":
            values[var["name"]] = var["current"]["value"]
        elif var["type"] == "textbox":
            values[var["name"]] = var["query"]
    return values


def substitute(text: str, values: dict[str, str]) -> str:
    def one(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise ValueError(f"unknown dashboard variable ${name} in {text!r}")
        return values[name]

    return _VARIABLE.sub(one, text)


def queries(dashboard: dict, window: str = "30s", range_: str | None = None) -> list[Query]:
    """Every target of every panel, PromQL (``expr``) and TraceQL (``query``), and every
    annotation's query (as panel ``annotation: NAME``), substituted."""
    values = variable_values(dashboard, window, range_)
    out = [
        Query(dashboard["uid"], f"annotation: {a['name']}", a["target"]["refId"], "promql",
              substitute(a["target"]["expr"], values))
        for a in dashboard["annotations"]["list"]
    ]  # fmt: skip
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            language, text = (
                ("promql", target["expr"]) if "expr" in target else ("traceql", target["query"])
            )
            out.append(
                Query(
                    dashboard["uid"],
                    panel["title"],
                    target["refId"],
                    language,
                    substitute(text, values),
                    bool(target.get("exemplar")),
                )
            )
    return out
