"""Metric names: the one source of truth shared by the probe and the generated dashboards.

Names follow OpenTelemetry conventions (dots, unit suffix in the unit, not the name); the
Prometheus names are what the OTLP→Prometheus translation and the scrape endpoint expose
(dots → underscores, ``_seconds``/``_total`` suffixes). Rename one here and the dashboards
test against a real Prometheus breaks, as it should.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from fdprof import semconv as S


@dataclass(frozen=True)
class Metric:
    otel_name: str
    prom_name: str
    kind: str  # "histogram" | "counter" | "gauge"
    unit: str
    description: str
    labels: tuple[str, ...] = ()


SWAP_DURATION = Metric(
    "fd.swap.duration",
    "fd_swap_duration_seconds",
    "histogram",
    "s",
    "Duration of a KV swap task, by direction",
    ("direction",),
)
EXECUTE_MODEL_DURATION = Metric(
    "fd.execute_model.duration",
    "fd_execute_model_duration_seconds",
    "histogram",
    "s",
    "Duration of execute_model in the worker",
)
LOCK_WAIT = Metric(
    "fd.lock.wait",
    "fd_lock_wait_seconds",
    "histogram",
    "s",
    "Time spent waiting for the KV lock, by holder role",
    ("holder",),
)
STEP_DURATION = Metric(
    "fd.step.duration",
    "fd_step_duration_seconds",
    "histogram",
    "s",
    "Scheduler step duration",
)
SWAP_OVERLAP = Metric(
    "fd.swap.overlap",
    "fd_swap_overlap_seconds_total",
    "counter",
    "s",
    "Swap time that overlapped execute_model",
)
SWAP_TIME = Metric(
    "fd.swap.time",
    "fd_swap_time_seconds_total",
    "counter",
    "s",
    "Total swap time (denominator of the overlapped share)",
)
GENERATED_TOKENS = Metric(
    "fd.generated_tokens",
    "fd_generated_tokens_total",
    "counter",
    "{token}",
    "Generated tokens",
)
SWAPPED_BLOCKS = Metric(
    "fd.swapped_blocks",
    "fd_swapped_blocks_total",
    "counter",
    "{block}",
    "KV blocks swapped, by direction",
    ("direction",),
)
DROPPED_RECORDS = Metric(
    "fd.probe.dropped",
    "fd_probe_dropped_total",
    "counter",
    "{record}",
    "Spans or records dropped by a sink (exporter down or queue full), by sink",
    ("sink",),
)

# Serving latencies per request, under OpenTelemetry's GenAI server metric names (the ones
# engines' dashboards already use), from the engine's ``request`` spans
REQUEST_DURATION = Metric(
    "gen_ai.server.request.duration",
    "gen_ai_server_request_duration_seconds",
    "histogram",
    "s",
    "End-to-end request latency: arrival to last token",
)
TIME_TO_FIRST_TOKEN = Metric(
    "gen_ai.server.time_to_first_token",
    "gen_ai_server_time_to_first_token_seconds",
    "histogram",
    "s",
    "Time from a request's arrival to its first output token",
)
TIME_PER_OUTPUT_TOKEN = Metric(
    "gen_ai.server.time_per_output_token",
    "gen_ai_server_time_per_output_token_seconds",
    "histogram",
    "s",
    "Time per output token after the first (decode)",
)
# The run itself: which runs fed the series (annotations), and its safety verdict. ``run``
# (the run directory) tells the runs of one mode apart, so totals over several runs add up
# exactly instead of reading as one counter that reset.
RUN_ACTIVE = Metric(
    "fd.run.active",
    "fd_run_active",
    "gauge",
    "{run}",
    "1 while a run serves, 0 once it has ended",
    ("run",),
)
KV_MISMATCHES = Metric(
    "fd.kv.mismatches",
    "fd_kv_mismatches_total",
    "counter",
    "{block}",
    "KV blocks whose content did not match what was written (integrity checks)",
    ("run",),
)
HAZARDS = Metric(
    "fd.hazards",
    "fd_hazards_total",
    "counter",
    "{finding}",
    "The run's happens-before check at its end, by finding (see Finding)",
    ("run", "finding"),
)


class Finding(StrEnum):
    """``finding`` values of :data:`HAZARDS`: races whose spans overlapped in time, latent
    races (unordered, but apart this run), accesses outside their block's lifetime, locks that
    did not exclude. A new kind of finding is one line here."""

    RACE = "race"
    LATENT_RACE = "latent_race"
    LIFETIME = "lifetime"
    BROKEN_LOCK = "broken_lock"


ALL: tuple[Metric, ...] = (
    SWAP_DURATION,
    EXECUTE_MODEL_DURATION,
    LOCK_WAIT,
    STEP_DURATION,
    SWAP_OVERLAP,
    SWAP_TIME,
    GENERATED_TOKENS,
    SWAPPED_BLOCKS,
    DROPPED_RECORDS,
    REQUEST_DURATION,
    TIME_TO_FIRST_TOKEN,
    TIME_PER_OUTPUT_TOKEN,
    RUN_ACTIVE,
    KV_MISMATCHES,
    HAZARDS,
)
#: labels on every series, from the process's resource
COMMON_LABELS = ("kv_lock", "dp_rank", "role")
#: values of a label known before any span: every counter starts at 0 for each of them (and a
#: histogram's series exist, empty, on the scrape endpoint), from the first scrape, so a panel
#: reads 0 rather than "no data" until something happens. ``sink``: the sinks that can drop
#: spans (0 also when none is configured: nothing was dropped); ``holder``: the roles that hold
#: the KV lock (fdprof.engine.server, fdprof.engine.worker)
KNOWN_VALUES = {
    "direction": (S.TO_CPU, S.TO_GPU),
    "finding": tuple(Finding),
    "sink": ("otlp",),
    "holder": (S.ROLE_CACHE_MANAGER, S.ROLE_WORKER),
}
