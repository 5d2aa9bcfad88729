"""Swaps against compute on host lanes and on device lanes, and the breakdown on device time:
a baseline whose lock keeps the host calls apart while the device runs them together."""

from __future__ import annotations

from fdprof import semconv as S
from fdprof.analysis.breakdown import device_breakdown, steps
from fdprof.analysis.device_time import device_overlap, host_overlap
from fdprof.analysis.diff import diff_traces

from .builder import TraceBuilder

HOST_W, HOST_T = "1/1", "2/1"
COMPUTE = S.device_lane(1, S.DEVICE_CPU, 0, 1)
COPY = S.device_lane(2, S.DEVICE_CPU, 0, 1)


def lock_serialised_host_overlapping_device(steps: int = 12) -> TraceBuilder:
    """Each 100-ns step: execute_model's call [0, 10) then the swap's call [10, 20) on the host,
    one after the other; the forward pass runs [10, 60) on the compute stream and the copy
    [30, 70) on the copy stream: 30 ns of the copy's 40 under compute."""
    b = TraceBuilder()
    for i in range(steps):
        t = 100 * i
        b.span(HOST_W, S.STEP, t, t + 100, step=i)
        b.span(HOST_W, S.EXECUTE_MODEL, t, t + 10, step=i, attrs={S.BATCH_TOKENS: 4})
        b.span(HOST_T, S.SWAP, t + 10, t + 20)
        b.span(COMPUTE, S.FORWARD, t + 10, t + 60)
        b.span(COPY, S.SWAP_COPY, t + 30, t + 70)
    return b


def test_host_calls_apart_device_work_together():
    spans = lock_serialised_host_overlapping_device().build().spans
    assert host_overlap(spans).ratio == 0  # what the host-side ranges show
    assert device_overlap(spans).ratio == 0.75  # what the device did: 30 of 40 ns


def test_breakdown_on_device_time_knows_the_probes_device_spans():
    """The forward pass is compute, a swap's copies memcpy (painted after compute: 10 of their
    40 ns), event records and waits no work at all."""
    b = lock_serialised_host_overlapping_device(3)
    for i in range(3):
        b.span(COPY, S.DEVICE_EVENT_WAIT, 100 * i + 75, 100 * i + 90)
    trace = b.build()
    parts = device_breakdown(trace, steps(trace))
    got = parts[["gpu_compute", "gpu_memcpy", "gpu_idle"]].to_numpy().tolist()
    assert got[:2] == [[50, 10, 40], [50, 10, 40]]  # windows tile: first start to next first


def test_a_trace_without_device_spans_has_no_device_side():
    b = TraceBuilder()
    b.span(HOST_W, S.STEP, 0, 100, step=0)
    b.span(HOST_W, S.EXECUTE_MODEL, 0, 50, step=0)
    b.span(HOST_T, S.SWAP, 20, 70)
    trace = b.build()
    assert host_overlap(trace.spans).ratio == 0.6 and device_overlap(trace.spans) is None
    assert device_breakdown(trace, steps(trace)) is None


def test_diff_reports_both_sides():
    base = lock_serialised_host_overlapping_device().build()
    d = diff_traces(base, base).to_json()["base"]
    assert d["swap_overlap"] == 0 and d["device_swap_overlap"] == 0.75
    assert d["gpu_ns"]["gpu_compute"]["mean"] == 50
