"""The engine overview: throughput, latencies, swaps, the lock and the probe's own health.

Every panel is split by ``kv_lock``, so a baseline (``ipc``) and a lockless (``none``) engine
feeding the same Prometheus are compared on the same axes.
"""

from __future__ import annotations

from fdprof.dashboards import grafana as G
from fdprof.dashboards.promql import filter_variables, legend, quantile, rate, ratio
from fdprof.probe import metric_names as M

UID = "fdprof-engine-overview"
QUANTILES = (0.5, 0.9, 0.99)
PROM = G.ds_ref("datasource", "prometheus")


def _quantiles(metric: M.Metric, by: tuple[str, ...] = ()) -> tuple[G.Prom, ...]:
    return tuple(
        G.Prom(quantile(q, metric, by), legend(*by, prefix=f"p{round(q * 100)}")) for q in QUANTILES
    )


def _panels() -> list[tuple[str, list[G.Panel]]]:
    tokens = G.Prom(rate(M.GENERATED_TOKENS), legend())
    throughput = [
        G.Panel(
            "Tokens/s",
            "Generated tokens per second, summed over DP ranks.",
            (tokens,),
            unit="suffix: tok/s",
            width=16,
        ),
        G.Panel(
            "Mean tokens/s by kv_lock",
            "Mean throughput over the time range, one bar per lock mode.",
            (tokens,),
            kind="bargauge",
            unit="suffix: tok/s",
            width=8,
            min=0,
            options={
                "orientation": "horizontal",
                "displayMode": "basic",
                "reduceOptions": {"calcs": ["mean"], "fields": "", "values": False},
            },
        ),
        G.Panel(
            "Step latency",
            "Scheduler step duration quantiles, from the histogram buckets.",
            _quantiles(M.STEP_DURATION),
            unit="s",
        ),
        G.Panel(
            "execute_model latency",
            "Worker execute_model duration quantiles.",
            _quantiles(M.EXECUTE_MODEL_DURATION),
            unit="s",
        ),
    ]
    swaps = [
        G.Panel(
            "Swap latency by direction",
            "Swap task duration quantiles; to_cpu evicts, to_gpu loads prefix-cache blocks.",
            _quantiles(M.SWAP_DURATION, ("direction",)),
            unit="s",
        ),
        G.Panel(
            "Swapped blocks/s by direction",
            "KV blocks copied per second by the transfer process.",
            (G.Prom(rate(M.SWAPPED_BLOCKS, ("direction",)), legend("direction")),),
            unit="suffix: blocks/s",
        ),
        G.Panel(
            "Swap time overlapped with execute_model",
            "Share of swap time during which execute_model ran: near 0 under the lock, "
            "the point of removing it.",
            (G.Prom(ratio(M.SWAP_OVERLAP, M.SWAP_TIME), legend()),),
            unit="percentunit",
            min=0,
            max=1,
        ),
        G.Panel(
            "Steps/s",
            "Scheduler steps per second.",
            (G.Prom(rate(M.STEP_DURATION, suffix="_count"), legend()),),
            unit="suffix: steps/s",
        ),
    ]
    health = [
        G.Panel(
            "Lock wait by holder",
            "Time spent waiting for the KV lock, by the role that held it (baseline only).",
            _quantiles(M.LOCK_WAIT, ("holder",)),
            unit="s",
        ),
        G.Panel(
            "Lock wait seconds per second by holder",
            "Seconds spent waiting for the lock per second of wall time, summed over waiters: "
            "a ratio (100% = one process waiting all the time).",
            (G.Prom(rate(M.LOCK_WAIT, ("holder",), suffix="_sum"), legend("holder")),),
            unit="percentunit",
            min=0,
        ),
        G.Panel(
            "Dropped spans/s by sink",
            "Records a sink dropped (exporter down, queue full); should stay at 0.",
            (G.Prom(rate(M.DROPPED_RECORDS, ("sink",)), legend("sink")),),
            unit="suffix: /s",
            width=24,
        ),
    ]
    return [("Throughput and latency", throughput), ("Swaps", swaps), ("Lock and probe", health)]


def build() -> dict:
    rows = [(title, [(p, PROM) for p in panels]) for title, panels in _panels()]
    variables = [
        G.datasource_variable("datasource", "prometheus", "Prometheus"),
        *filter_variables(PROM),
    ]
    return G.dashboard(
        UID,
        "fdprof / Engine overview",
        "Lock vs lockless KV-cache swaps: throughput, latencies, swap overlap, lock wait.",
        variables,
        G.layout(rows),
        links=[G.dashboards_link()],
    )
