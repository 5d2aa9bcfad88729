"""The harness against a real metrics process: every PromQL query of every dashboard returns
data, and a renamed metric does not (so the engine test can fail for the right reason);
exemplar panels get exemplars under the label the datasource links to Tempo."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from fdprof import dashboards
from fdprof import metric_names as M
from fdprof.dashboards import __main__ as cli

SERVER = Path(__file__).with_name("metrics_server.py")

#: $__rate_interval as Grafana computes it for a 1 s scrape interval (4 scrapes)
WINDOW = "4s"


def test_every_panel_query_returns_data_from_a_real_metrics_process(
    prometheus, metrics_port, trace_id_label, capsys
):
    server = subprocess.Popen([sys.executable, str(SERVER), str(metrics_port), "60"])
    try:
        start = time.time()
        prom = prometheus([f"127.0.0.1:{metrics_port}"])
        all_queries = dashboards.promql(WINDOW)
        missing = prom.wait_for_data(all_queries, start, timeout_s=45)
        assert not missing, "no data for:\n" + "\n".join(map(str, missing))

        name = M.GENERATED_TOKENS.prom_name
        tokens = next(q for q in all_queries if name in q.text)
        renamed = replace(tokens, text=tokens.text.replace(name, "fd_tokens_generated_total"))
        assert prom.empty([renamed], start) == [renamed]

        exemplar_queries = [q for q in all_queries if q.exemplar]
        assert exemplar_queries
        missing = prom.wait(
            lambda: prom.without_exemplars(exemplar_queries, start, trace_id_label), 20
        )
        assert not missing, "no trace_id exemplars for:\n" + "\n".join(map(str, missing))

        assert cli.main(["--verify", prom.url, "--minutes", "2", "--window", WINDOW]) == 0
        assert "0 of the dashboards' PromQL queries returned no data" in capsys.readouterr().out
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_verify_against_no_prometheus_is_one_line_exit_2(metrics_port, capsys):
    assert cli.main(["--verify", f"http://127.0.0.1:{metrics_port}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fdprof.dashboards: cannot reach Prometheus") and err.count("\n") == 1
