"""Instrumentation gaps the model finds beyond pairing: an acquire inside an access span of its
own lane (a span opened before the waits that order it) and a wait on jobs never submitted.
Gaps, never races."""

from __future__ import annotations

from fdprof import semconv as S
from fdprof.analysis.hazards import find_hazards
from fdprof.analysis.instrumentation import SYNC_IN_ACCESS_SPAN, WAIT_UNSUBMITTED

from .builder import TraceBuilder

WORKER, COPY = "1/1", "1/2"


def store_then_forward(acquire_inside: bool, release_inside: bool = False) -> TraceBuilder:
    """A copy thread reads gpu:7 and signals it is done; the worker waits for the signal, then
    writes gpu:7. With ``acquire_inside`` the worker's span opens before the wait, as vLLM's
    ``execute_model`` opened before ``handle_preemptions``."""
    b = TraceBuilder()
    b.release("queue:swap", 1, WORKER, seq=1)
    b.acquire("queue:swap", 2, COPY, seq=1)
    b.span(COPY, S.SWAP, 3, 4, reads=(7,))
    b.release("signal:swap_done", 5, COPY, seq=1)
    start = 2 if acquire_inside else 7
    b.span(WORKER, S.EXECUTE_MODEL, start, 9, writes=(7,))
    b.acquire("signal:swap_done", 6, WORKER, seq=1)
    if release_inside:  # the worker signals a reader of gpu:7 before its write is done
        b.release("signal:written", 8, WORKER, seq=1)
        b.acquire("signal:written", 10, COPY, seq=1)
        b.span(COPY, S.SWAP, 11, 12, reads=(7,))
    return b


def test_the_wait_before_the_span_orders_the_write():
    report = find_hazards(store_then_forward(acquire_inside=False).build())
    assert report.clean and report.gaps.empty


def test_an_acquire_inside_the_access_span_is_a_gap_not_a_race():
    """Fails without the rule: the wait's acquire would order nothing of the span, and the
    copy's read and the worker's write would be a race on correct code."""
    report = find_hazards(store_then_forward(acquire_inside=True).build())
    assert report.races.empty and report.clean
    gap = report.gaps.iloc[0]
    assert (gap["kind"], gap["lane"], gap["obj"]) == (SYNC_IN_ACCESS_SPAN, WORKER,
                                                      S.SIGNAL_SWAP_DONE)  # fmt: skip
    assert S.EXECUTE_MODEL in gap["detail"] and gap["span_id"] == 2


def test_a_release_inside_an_access_span_still_orders_nothing_of_it():
    """A completion signalled before the work is done (``ack-before-copy``) stays a race."""
    report = find_hazards(store_then_forward(False, release_inside=True).build())
    assert len(report.races) == 1 and report.gaps.empty


def test_a_wait_on_jobs_never_submitted_is_a_gap_of_its_own():
    b = store_then_forward(acquire_inside=False)
    b.span(WORKER, S.SWAP_WAIT, 10, 11, attrs={S.SWAP_UNSUBMITTED: [4, 5]})
    report = find_hazards(b.build())
    assert report.clean
    gap = report.gaps.iloc[0]
    assert (gap["kind"], gap["seq"]) == (WAIT_UNSUBMITTED, 4) and "4, 5" in gap["detail"]
