"""The engine overview: lock vs lockless at a glance, then the run's safety, throughput,
request latencies, swaps, the lock and the probe's own health.

Every panel but the ratio is split by ``kv_lock``, so a baseline (``ipc``) and a lockless
(``none``) engine feeding the same Prometheus are compared on the same axes; the ratio divides
the mode chosen as ``candidate`` by the one chosen as ``baseline``. Each run is an annotation.
"""

from __future__ import annotations

from fdprof import metric_names as M
from fdprof.dashboards import grafana as G
from fdprof.dashboards.promql import (
    active,
    filter_variables,
    legend,
    mode_ratio,
    mode_variable,
    quantile,
    rate,
    ratio,
    run_total,
    runs,
)
from fdprof.semconv import LockMode

UID = "fdprof-engine-overview"
QUANTILES = (0.5, 0.9, 0.99)
PROM = G.ds_ref("datasource", "prometheus")


def _quantiles(metric: M.Metric, by: tuple[str, ...] = ()) -> tuple[G.Prom, ...]:
    return tuple(
        G.Prom(quantile(q, metric, by), legend(*by, prefix=f"p{round(q * 100)}")) for q in QUANTILES
    )


#: the modes the throughput ratio compares, by default: the lockless engine over the lock
BASELINE, CANDIDATE = LockMode.IPC, LockMode.NONE
_STAT = {
    "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
    "colorMode": "value",
    "graphMode": "none",
    "textMode": "value_and_name",
    "justifyMode": "auto",
    "orientation": "auto",
}


def _count(title: str, description: str, target: G.Prom, width: int, red: bool) -> G.Panel:
    """A stat of whole counts; ``red``: anything from 1 up is an alarm."""
    return G.Panel(title, description, (target,), kind="stat", unit="none", decimals=0,
                   red_from=1 if red else None, width=width, options=_STAT)  # fmt: skip


def _at_a_glance(tokens: G.Prom) -> list[G.Panel]:
    return [
        G.Panel(
            "Throughput, $candidate over $baseline",
            "Mean tokens/s while the candidate mode served, over the same for the baseline, "
            "across the time range: >1 means the candidate is faster. A point estimate from "
            "what ran in the range (see Runs); fdprof ab gives the gain with its 95% CI.",
            (G.Prom(mode_ratio(M.GENERATED_TOKENS, "candidate", "baseline"), "ratio"),),
            kind="stat",
            unit="suffix: ×",
            decimals=3,
            width=6,
            options={**_STAT, "textMode": "value"},
        ),
        _count(
            "Runs by kv_lock",
            "Runs that served within the time range, per lock mode: how much the ratio rests on.",
            G.Prom(runs(M.RUN_ACTIVE), legend()),
            width=6,
            red=False,
        ),
        G.Panel(
            "Mean tokens/s by kv_lock",
            "Mean throughput over the time range, one bar per lock mode.",
            (tokens,),
            kind="bargauge",
            unit="suffix: tok/s",
            width=12,
            min=0,
            options={
                "orientation": "horizontal",
                "displayMode": "basic",
                "reduceOptions": {"calcs": ["mean"], "fields": "", "values": False},
            },
        ),
    ]


def _safety() -> list[G.Panel]:
    return [
        _count(
            "Races and lifetime violations",
            "What fdprof hazards finds in each run's records at its end, summed over the runs "
            "in the time range: races (overlapped / latent), accesses outside a block's "
            "lifetime, locks that did not exclude. Anything but 0 is a bug; broken_lock on the "
            "ipc baseline is FastDeploy's own (threads of one process share the lock), and "
            "races there are judged without that lock's edges.",
            G.Prom(run_total(M.HAZARDS, ("finding",)), legend("finding")),
            width=16,
            red=True,
        ),
        _count(
            "Integrity mismatches",
            "KV blocks whose content differed from what was written, over the runs in the "
            "time range (the engine's own checks). Anything but 0 is corrupted KV.",
            G.Prom(run_total(M.KV_MISMATCHES), legend()),
            width=8,
            red=True,
        ),
    ]


def _requests() -> list[G.Panel]:
    return [
        G.Panel(
            title,
            f"{what}: quantiles over the requests finished in each interval.",
            _quantiles(metric),
            unit="s",
            width=8,
        )
        for title, what, metric in (
            ("Time to first token", "Arrival to first output token", M.TIME_TO_FIRST_TOKEN),
            ("Time per output token", "Decode time per token after the first",
             M.TIME_PER_OUTPUT_TOKEN),
            ("Request latency", "Arrival to last token (end to end)", M.REQUEST_DURATION),
        )
    ]  # fmt: skip


def _panels() -> list[tuple[str, list[G.Panel]]]:
    tokens = G.Prom(rate(M.GENERATED_TOKENS), legend())
    throughput = [
        G.Panel(
            "Tokens/s",
            "Generated tokens per second, summed over DP ranks.",
            (tokens,),
            unit="suffix: tok/s",
            width=24,
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
    return [
        ("Lock vs lockless", _at_a_glance(tokens)),
        ("Safety", _safety()),
        ("Throughput and step latency", throughput),
        ("Requests", _requests()),
        ("Swaps", swaps),
        ("Lock and probe", health),
    ]


def build() -> dict:
    rows = [(title, [(p, PROM) for p in panels]) for title, panels in _panels()]
    variables = [
        G.datasource_variable("datasource", "prometheus", "Prometheus"),
        *filter_variables(PROM),
        mode_variable("baseline", PROM, BASELINE),
        mode_variable("candidate", PROM, CANDIDATE),
    ]
    run_marks = G.Annotation(
        "Runs",
        active(M.RUN_ACTIVE),
        title="run ({{kv_lock}})",
        text="{{run}}",
        tags=("kv_lock",),
    )
    return G.dashboard(
        UID,
        "fdprof / Engine overview",
        "Lock vs lockless KV-cache swaps: throughput, latencies, swap overlap, lock wait.",
        variables,
        G.layout(rows),
        links=[G.dashboards_link()],
        annotations=[(run_marks, PROM)],
    )
