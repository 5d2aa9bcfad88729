"""A small builder for Grafana dashboard JSON (schema 39), just what fdprof's dashboards use.

Plain dicts, no Grafana SDK: the output is committed and diffed, so every key is chosen here
and nothing depends on a library's defaults. Datasources are always referenced through a
dashboard variable (``${name}``), never by a hard-coded uid.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SCHEMA_VERSION = 39
GRID_WIDTH = 24


def ds_ref(variable: str, kind: str) -> dict:
    """A datasource reference through a dashboard variable of type ``datasource``."""
    return {"type": kind, "uid": f"${{{variable}}}"}


def datasource_variable(name: str, kind: str, label: str) -> dict:
    """A variable that lists the datasources of one plugin type (``prometheus``, ``tempo``)."""
    return {
        "name": name,
        "label": label,
        "type": "datasource",
        "query": kind,
        "refresh": 1,
        "hide": 0,
        "options": [],
        "regex": "",
    }


def label_variable(
    name: str,
    label: str,
    datasource: dict,
    metric: str,
    label_name: str,
    default: str | None = None,
) -> dict:
    """A variable over one label's values: multi-select with "All" (the regex ``.*``), or with
    a ``default``, a single select at that value (one lock mode, say)."""
    choice = (
        {"multi": True, "includeAll": True, "allValue": ".*",
         "current": {"selected": True, "text": ["All"], "value": ["$__all"]}}
        if default is None
        else {"multi": False, "includeAll": False,
              "current": {"selected": True, "text": default, "value": default}}
    )  # fmt: skip
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": datasource,
        "query": f"label_values({metric}, {label_name})",
        "refresh": 2,
        **choice,
        "options": [],
        "sort": 1,
        "hide": 0,
        "regex": "",
    }


def textbox_variable(name: str, label: str, default: str) -> dict:
    """A free-text variable (thresholds such as ``50ms``), substituted as typed."""
    return {
        "name": name,
        "label": label,
        "type": "textbox",
        "query": default,
        "current": {"selected": False, "text": default, "value": default},
        "options": [{"selected": True, "text": default, "value": default}],
        "hide": 0,
    }


@dataclass(frozen=True)
class Prom:
    """One PromQL target of a panel."""

    expr: str
    legend: str
    exemplar: bool = False


@dataclass(frozen=True)
class TraceQL:
    """One Tempo TraceQL search target of a panel."""

    query: str
    limit: int = 20


@dataclass(frozen=True)
class Panel:
    """A panel before layout: its kind, title, unit and targets."""

    title: str
    description: str
    targets: tuple[Prom | TraceQL, ...]
    kind: str = "timeseries"
    unit: str = "short"
    width: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None
    decimals: int | None = None
    #: red from this value up (green below): for counts that must stay 0
    red_from: float | None = None
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Annotation:
    """Regions on every time axis where a PromQL query has samples (a run, say)."""

    name: str
    expr: str
    title: str
    text: str
    tags: tuple[str, ...] = ()
    color: str = "blue"
    step: str = "5s"


def _target(target: Prom | TraceQL, ref: str, datasource: dict) -> dict:
    if isinstance(target, Prom):
        return {
            "datasource": datasource,
            "refId": ref,
            "expr": target.expr,
            "legendFormat": target.legend,
            "range": True,
            "exemplar": target.exemplar,
        }
    return {
        "datasource": datasource,
        "refId": ref,
        "queryType": "traceql",
        "query": target.query,
        "limit": target.limit,
        "tableType": "traces",
    }


def _panel_json(panel: Panel, pid: int, pos: dict, datasource: dict) -> dict:
    defaults: dict = {"unit": panel.unit}
    if panel.min is not None:
        defaults["min"] = panel.min
    if panel.max is not None:
        defaults["max"] = panel.max
    if panel.decimals is not None:
        defaults["decimals"] = panel.decimals
    if panel.red_from is not None:
        defaults["color"] = {"mode": "thresholds"}
        defaults["thresholds"] = {
            "mode": "absolute",
            "steps": [{"color": "green", "value": None}, {"color": "red", "value": panel.red_from}],
        }
    return {
        "id": pid,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": datasource,
        "gridPos": pos,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": panel.options,
        "targets": [_target(t, chr(ord("A") + i), datasource) for i, t in enumerate(panel.targets)],
    }


def _row_json(title: str, pid: int, y: int) -> dict:
    return {
        "id": pid,
        "type": "row",
        "title": title,
        "collapsed": False,
        "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y},
        "panels": [],
    }


def layout(rows: list[tuple[str, list[tuple[Panel, dict]]]]) -> list[dict]:
    """Place rows of (panel, datasource) left to right, wrapping at the grid width."""
    out: list[dict] = []
    pid, y = 1, 0
    for title, panels in rows:
        out.append(_row_json(title, pid, y))
        pid, y = pid + 1, y + 1
        x, row_height = 0, 0
        for panel, datasource in panels:
            if x + panel.width > GRID_WIDTH:
                x, y, row_height = 0, y + row_height, 0
            pos = {"h": panel.height, "w": panel.width, "x": x, "y": y}
            out.append(_panel_json(panel, pid, pos, datasource))
            pid, x, row_height = pid + 1, x + panel.width, max(row_height, panel.height)
        y += row_height
    return out


def dashboard(
    uid: str,
    title: str,
    description: str,
    variables: list[dict],
    panels: list[dict],
    links: list[dict] | None = None,
    annotations: list[tuple[Annotation, dict]] | None = None,
) -> dict:
    """A whole dashboard, tagged ``fdprof`` so the dashboards link to one another."""
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["fdprof"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "5s",
        "time": {"from": "now-15m", "to": "now"},
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "links": links or [],
        "annotations": {"list": [_annotation_json(a, ds) for a, ds in annotations or []]},
        "templating": {"list": variables},
        "panels": panels,
    }


def _annotation_json(annotation: Annotation, datasource: dict) -> dict:
    """A Prometheus annotation: the query in ``target``, the title, text and tag formats beside
    it, where Grafana's Prometheus plugin reads them."""
    return {
        "name": annotation.name,
        "datasource": datasource,
        "enable": True,
        "hide": False,
        "iconColor": annotation.color,
        "target": {"refId": "Anno", "expr": annotation.expr, "interval": annotation.step},
        "step": annotation.step,
        "titleFormat": annotation.title,
        "textFormat": annotation.text,
        "tagKeys": ",".join(annotation.tags),
        "useValueForTime": False,
    }


def dashboards_link() -> dict:
    """A dropdown of every dashboard tagged ``fdprof``."""
    return {
        "type": "dashboards",
        "title": "fdprof",
        "tags": ["fdprof"],
        "asDropdown": True,
        "includeVars": True,
        "keepTime": True,
        "icon": "external link",
        "targetBlank": False,
        "tooltip": "",
    }
