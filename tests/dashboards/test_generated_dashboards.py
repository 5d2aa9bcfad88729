"""The committed dashboards are what the generator produces, and follow Grafana's conventions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fdprof import dashboards
from fdprof import metric_names as M
from fdprof.dashboards import __main__ as cli
from fdprof.dashboards import overview, traces
from fdprof.dashboards.queries import queries, substitute

DIR = Path(__file__).resolve().parents[2] / "dashboards"
ALL = {name: build() for name, build in dashboards.BUILDERS.items()}


def test_committed_dashboards_are_current():
    assert dashboards.stale(DIR) == [], "run: .venv/bin/python -m fdprof.dashboards"


def test_check_flags_a_stale_file_and_regenerating_fixes_it(tmp_path, capsys):
    assert cli.main(["--dir", str(tmp_path)]) == 0
    assert cli.main(["--dir", str(tmp_path), "--check"]) == 0
    stale = tmp_path / f"{overview.UID}.json"
    stale.write_text(stale.read_text().replace(M.STEP_DURATION.prom_name, "fd_step_seconds"))
    assert cli.main(["--dir", str(tmp_path), "--check"]) == 1
    assert f"{overview.UID}.json" in capsys.readouterr().out


def test_uids_are_stable_and_files_are_named_after_them():
    assert {d["uid"] for d in ALL.values()} == {overview.UID, traces.UID}
    for name, dashboard in ALL.items():
        assert name == f"{dashboard['uid']}.json"
        assert re.fullmatch(r"[a-z0-9-]{1,40}", dashboard["uid"])


def _datasource_refs(node):
    if isinstance(node, dict):
        if isinstance(node.get("datasource"), dict):
            yield node["datasource"]
        for value in node.values():
            yield from _datasource_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _datasource_refs(value)


@pytest.mark.parametrize("name", sorted(ALL))
def test_datasources_only_through_variables(name):
    dashboard = ALL[name]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    refs = list(_datasource_refs(dashboard))
    assert refs
    for ref in refs:
        match = re.fullmatch(r"\$\{(\w+)\}", ref["uid"])
        assert match, f"hard-coded datasource uid {ref['uid']!r}"
        variable = variables[match.group(1)]
        assert variable["type"] == "datasource" and variable["query"] == ref["type"]


@pytest.mark.parametrize("name", sorted(ALL))
def test_panels_have_units_unique_ids_and_no_overlap(name):
    panels = ALL[name]["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = set()
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        new = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & new, f"{panel['title']} overlaps another panel"
        cells |= new
        if panel["type"] in ("timeseries", "bargauge"):
            assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]


def test_promql_conventions():
    promql = [
        q
        for d in ALL.values()
        for q in queries(d, "$__rate_interval", "$__range")
        if q.language == "promql"
    ]
    assert promql
    for query in promql:
        for window in re.findall(r"\[([^\]]+)\]", query.text):
            # rates over the rate interval; totals and means over the dashboard's range
            assert window in ("$__rate_interval", "$__range", "$__range:"), query
        if "histogram_quantile" in query.text:
            assert "_bucket{" in query.text and "le)" in query.text, query
        groups = re.findall(r"(?:sum|max|count) by \(([^)]*)\)", query.text)
        if "$candidate" in query.panel:  # the one comparison: each side pinned to one mode
            modes = re.findall(r'kv_lock=~"([^"]*)"', query.text)
            assert modes == [overview.CANDIDATE, overview.BASELINE], query
        else:
            assert groups and all("kv_lock" in g for g in groups), f"not split by kv_lock: {query}"


def test_every_probe_metric_has_a_panel():
    text = json.dumps(ALL[f"{overview.UID}.json"])
    for metric in M.ALL:
        assert metric.prom_name in text, f"{metric.prom_name} is on no overview panel"


def test_metric_names_come_from_the_probe_module():
    names = {m.prom_name for m in M.ALL}
    for dashboard in ALL.values():
        for query in queries(dashboard):
            for series in re.findall(r"\b(fd_\w+?)(?:_bucket|_sum|_count)?\{", query.text):
                assert series in names, f"{series} is not in metric_names: {query}"


def test_traces_dashboard_searches_tempo_and_links_exemplars():
    dashboard = ALL[f"{traces.UID}.json"]
    traceql = [q for q in queries(dashboard) if q.language == "traceql"]
    spans = {re.search(r'name = "(\w+)"', q.text).group(1) for q in traceql}
    assert {"swap", "issue_swap_task", "step"} <= spans
    for query in traceql:
        assert query.text.startswith("{") and query.text.endswith("}") and "$" not in query.text
    exemplar_targets = [
        t for p in dashboard["panels"] for t in p.get("targets", []) if t.get("exemplar")
    ]
    assert exemplar_targets


def test_overview_answers_lock_vs_lockless_at_a_glance():
    dashboard = ALL[f"{overview.UID}.json"]
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows[:2] == ["Lock vs lockless", "Safety"] and "Requests" in rows
    by_title = {p["title"]: p for p in dashboard["panels"]}
    ratio = by_title["Throughput, $candidate over $baseline"]
    assert ratio["type"] == "stat" and M.GENERATED_TOKENS.prom_name in ratio["targets"][0]["expr"]
    modes = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert modes["baseline"]["current"]["value"] == "ipc"
    assert modes["candidate"]["current"]["value"] == "none"
    for title in ("Races and lifetime violations", "Integrity mismatches"):
        steps = by_title[title]["fieldConfig"]["defaults"]["thresholds"]["steps"]
        assert steps == [{"color": "green", "value": None}, {"color": "red", "value": 1}]
    for title in ("Time to first token", "Time per output token", "Request latency"):
        assert by_title[title]["fieldConfig"]["defaults"]["unit"] == "s"
    (runs,) = dashboard["annotations"]["list"]
    assert M.RUN_ACTIVE.prom_name in runs["target"]["expr"] and runs["textFormat"] == "{{run}}"
    ratio_query = next(q for q in queries(dashboard, "1m", "1h") if q.panel == ratio["title"])
    assert "[1h:]" in ratio_query.text and 'kv_lock=~"none"' in ratio_query.text


def test_substitute_rejects_an_unknown_variable():
    with pytest.raises(ValueError, match=r"\$nope"):
        substitute("rate(x[$nope])", {"__rate_interval": "1m"})
