"""Metric names: the one source of truth shared by the probe and the generated dashboards.

Names follow OpenTelemetry conventions (dots, unit suffix in the unit, not the name); the
Prometheus names are what the OTLP→Prometheus translation and the scrape endpoint expose
(dots → underscores, ``_seconds``/``_total`` suffixes). Rename one here and the dashboards
test against a real Prometheus breaks, as it should.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    otel_name: str
    prom_name: str
    kind: str  # "histogram" | "counter"
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
)
#: labels on every series, from the process's resource
COMMON_LABELS = ("kv_lock", "dp_rank", "role")
