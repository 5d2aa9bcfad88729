"""The traces dashboard: Tempo searches for slow swaps, steps and lock waits, and latency
panels whose exemplars open the trace of the very swap or step they measured.

Exemplar links need nothing here: the provisioned Prometheus datasource maps the exemplar's
``trace_id`` label to the Tempo datasource (``dashboards/provisioning/datasources``).
"""

from __future__ import annotations

from fdprof import metric_names as M
from fdprof import semconv as S
from fdprof.dashboards import grafana as G
from fdprof.dashboards.promql import filter_variables, legend, quantile

UID = "fdprof-traces"
PROM = G.ds_ref("datasource", "prometheus")
TEMPO = G.ds_ref("traces", "tempo")
#: dashboard variable → resource attribute every fdprof process reports (``ProbeConfig.resource``)
RESOURCE_FILTERS = {"kv_lock": "resource.fd.kv_lock", "dp_rank": "resource.fd.dp_rank"}


def search(span: str, threshold_variable: str) -> str:
    """TraceQL: spans of one name slower than a threshold, in the selected lock modes and ranks."""
    filters = "".join(f' && {attr} =~ "${var}"' for var, attr in RESOURCE_FILTERS.items())
    return f'{{ name = "{span}" && duration > ${threshold_variable}{filters} }}'


def _panels() -> list[tuple[str, list[tuple[G.Panel, dict]]]]:
    def table(title: str, description: str, query: str) -> tuple[G.Panel, dict]:
        return G.Panel(title, description, (G.TraceQL(query),), kind="table"), TEMPO

    def exemplars(title: str, metric: M.Metric, by: tuple[str, ...]) -> tuple[G.Panel, dict]:
        target = G.Prom(quantile(0.99, metric, by), legend(*by, prefix="p99"), exemplar=True)
        description = "p99 with exemplars: click a dot to open that trace in Tempo."
        return G.Panel(title, description, (target,), unit="s"), PROM

    searches = [
        table(
            "Slow swaps (transfer process)",
            "The copy itself, by the transfer process: swap spans over the threshold.",
            search(S.SWAP, "swap_min"),
        ),
        table(
            "Slow issue_swap_task (cache manager)",
            "From the call to the swap's completion, as the cache manager saw it.",
            search(S.ISSUE_SWAP_TASK, "swap_min"),
        ),
        table(
            "Slow steps",
            "Scheduler steps over the threshold; their links lead to the requests served.",
            search(S.STEP, "step_min"),
        ),
        table(
            "Long lock waits",
            "Waits for the KV lock over the swap threshold (baseline engine only).",
            search(S.LOCK_WAIT, "swap_min"),
        ),
    ]
    latency = [
        exemplars("Swap latency p99 with exemplars", M.SWAP_DURATION, ("direction",)),
        exemplars("Step latency p99 with exemplars", M.STEP_DURATION, ()),
    ]
    return [("Trace searches", searches), ("From metrics to traces", latency)]


def build() -> dict:
    variables = [
        G.datasource_variable("traces", "tempo", "Tempo"),
        G.datasource_variable("datasource", "prometheus", "Prometheus"),
        *filter_variables(PROM),
        G.textbox_variable("swap_min", "Slow swap over", "20ms"),
        G.textbox_variable("step_min", "Slow step over", "100ms"),
    ]
    return G.dashboard(
        UID,
        "fdprof / Traces",
        "Slow swaps and steps in Tempo, and exemplars from latency histograms to traces.",
        variables,
        G.layout(_panels()),
        links=[G.dashboards_link()],
    )
