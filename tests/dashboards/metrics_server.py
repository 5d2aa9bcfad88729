"""A real process serving every metric of ``fdprof.metric_names`` through
``prometheus_client``, with the probe's labels, for the Prometheus harness's own test.

    python metrics_server.py PORT SECONDS

It observes seeded values for both lock modes every 50 ms, histograms with a ``trace_id``
exemplar as the probe attaches them, and exits after SECONDS.
"""

from __future__ import annotations

import random
import sys
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from fdprof import metric_names as M

#: per-metric label values: the role that reports it and its own labels' values
ROLES = {
    M.SWAP_DURATION: ("transfer", {"direction": ("to_cpu", "to_gpu")}),
    M.EXECUTE_MODEL_DURATION: ("worker", {}),
    M.LOCK_WAIT: ("cache_manager", {"holder": ("worker", "cache_manager")}),
    M.STEP_DURATION: ("engine", {}),
    M.SWAP_OVERLAP: ("transfer", {}),
    M.SWAP_TIME: ("transfer", {}),
    M.GENERATED_TOKENS: ("engine", {}),
    M.SWAPPED_BLOCKS: ("transfer", {"direction": ("to_cpu", "to_gpu")}),
    M.DROPPED_RECORDS: ("engine", {"sink": ("otlp",)}),
    M.REQUEST_DURATION: ("engine", {}),
    M.TIME_TO_FIRST_TOKEN: ("engine", {}),
    M.TIME_PER_OUTPUT_TOKEN: ("engine", {}),
    M.RUN_ACTIVE: ("engine", {"run": ("out/run",)}),
    M.KV_MISMATCHES: ("worker", {"run": ("out/run",)}),
    M.HAZARDS: ("engine", {"run": ("out/run",), "finding": tuple(M.Finding)}),
}
#: counts that stay at 0 in a correct run
ZERO = (M.DROPPED_RECORDS, M.KV_MISMATCHES, M.HAZARDS)
KIND = {"histogram": Histogram, "counter": Counter, "gauge": Gauge}


def build(registry: CollectorRegistry) -> dict:
    instruments = {}
    for metric in M.ALL:
        names = (*M.COMMON_LABELS, *metric.labels)
        instruments[metric] = KIND[metric.kind](
            metric.prom_name, metric.description, names, registry=registry
        )
    return instruments


def tick(instruments: dict, rng: random.Random) -> None:
    for metric, instrument in instruments.items():
        role, own = ROLES[metric]
        for kv_lock in ("ipc", "none") if metric is not M.LOCK_WAIT else ("ipc",):
            for combo in _combinations(own):
                child = instrument.labels(kv_lock=kv_lock, dp_rank="0", role=role, **combo)
                if metric.kind == "histogram":
                    trace_id = f"{rng.getrandbits(128):032x}"
                    child.observe(rng.expovariate(200.0), exemplar={"trace_id": trace_id})
                elif metric.kind == "gauge":
                    child.set(1)
                elif metric not in ZERO:
                    child.inc(rng.randint(1, 8))
                else:
                    child.inc(0)


def _combinations(own: dict[str, tuple[str, ...]]) -> list[dict[str, str]]:
    combos: list[dict[str, str]] = [{}]
    for label, values in own.items():
        combos = [{**c, label: v} for c in combos for v in values]
    return combos


def main() -> None:
    port, seconds = int(sys.argv[1]), float(sys.argv[2])
    registry = CollectorRegistry()
    instruments = build(registry)
    rng = random.Random(6)
    start_http_server(port, addr="127.0.0.1", registry=registry)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        tick(instruments, rng)
        time.sleep(0.05)


if __name__ == "__main__":
    main()
