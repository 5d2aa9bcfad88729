"""The engine's swap protocol as hand-built traces: one correct exchange, and the same
exchange with each seeded fault. Times are ns; lanes are ``pid/tid`` of the engine's roles."""

from __future__ import annotations

from fdprof.trace.model import Trace

from .builder import TraceBuilder

ENGINE, CACHE_MANAGER, TRANSFER, WORKER = "100/1", "100/2", "200/1", "300/1"


def swap_in_then_execute(
    *,
    wait_for: int | None = 1,
    ack_inside_copy: bool = False,
    lock: bool = False,
    worker_delay: int = 0,
    skew_worker: int = 0,
) -> Trace:
    """Swap task 1 copies cpu block 4 into gpu block 7; the scheduler waits for
    ``signal:swap_done`` generation ``wait_for`` (None: it does not wait), then dispatches
    step 1, whose ``execute_model`` reads gpu block 7. ``lock``: the baseline, where the
    cache manager (its own thread) holds ``lock:kv`` from the issue to the swap's completion
    and the worker holds it around ``execute_model``."""
    b = TraceBuilder()
    b.release("signal:swap_done", 1, TRANSFER, seq=0)  # an earlier swap's completion
    issuer = CACHE_MANAGER if lock else ENGINE
    if lock:
        b.acquire("lock:kv", 5, CACHE_MANAGER)
    b.span(issuer, "issue_swap_task", 8, 52, role="cache_manager", step=1)
    b.release("queue:swap", 10, issuer, seq=1)
    b.acquire("queue:swap", 12, TRANSFER, seq=1)
    b.span(TRANSFER, "swap", 14, 40, role="transfer", reads=(4,), pool="cpu")
    b.access(len(b.spans), "gpu", 7, "write")
    b.release("signal:swap_done", 20 if ack_inside_copy else 42, TRANSFER, seq=1)
    if lock:
        b.acquire("signal:swap_done", 50, CACHE_MANAGER, seq=1)
        b.release("lock:kv", 53, CACHE_MANAGER)
    if wait_for is not None:
        b.acquire("signal:swap_done", 55, ENGINE, seq=wait_for)
    b.release("queue:batch", 62, ENGINE, seq=1)
    t = 64 + worker_delay + skew_worker
    if lock:
        b.acquire("lock:kv", t, WORKER)
    b.acquire("queue:batch", t, WORKER, seq=1)
    b.span(WORKER, "execute_model", t + 1, t + 30, role="worker", step=1, reads=(7,))
    if lock:
        b.release("lock:kv", t + 31, WORKER)
    return b.build()
