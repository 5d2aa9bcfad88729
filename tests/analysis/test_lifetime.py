"""Block lifetimes: with the allocator's events in the trace, an access ordered after its
block's free, or unordered with it, is flagged whether or not anyone reused the block."""

from __future__ import annotations

import json

from fdprof.analysis.hazards import find_hazards
from fdprof.cli import main
from fdprof.trace import save

from .builder import TraceBuilder

MANAGER, TRANSFER, WORKER = "1/1", "2/1", "3/1"


def touch(b: TraceBuilder, lane: str, name: str, start: int, end: int, mode: str, block: int):
    """A span with one gpu block access (or allocator event), as a table row and as the
    ``kv.gpu_<mode>`` attribute, so the trace saves and loads back the same."""
    sid = b.span(lane, name, start, end, attrs={f"kv.gpu_{mode}": [block]})
    b.access(sid, "gpu", block, mode)


def evict(free_first: bool, reuse: bool = False) -> TraceBuilder:
    """The cache manager hands gpu:4 to a step, then evicts it: the swap-out (transfer
    process) reads it after the task's queue edge; the manager frees it either after the
    swap's done signal (correct) or before handing the task over (``free_first``). With
    ``reuse`` the block is handed out again and written by a later step."""
    b = TraceBuilder()
    touch(b, MANAGER, "block_alloc", 1, 1, "alloc", 4)
    b.release("queue:batch", 2, MANAGER, seq=1)
    b.acquire("queue:batch", 3, WORKER, seq=1)
    touch(b, WORKER, "execute_model", 4, 6, "write", 4)
    b.release("queue:result", 7, WORKER, seq=1)
    b.acquire("queue:result", 8, MANAGER, seq=1)
    if free_first:
        touch(b, MANAGER, "block_free", 9, 9, "free", 4)
    b.release("queue:swap", 10, MANAGER, seq=1)
    b.acquire("queue:swap", 11, TRANSFER, seq=1)
    touch(b, TRANSFER, "swap", 12, 14, "read", 4)
    b.release("signal:swap_done", 15, TRANSFER, seq=1)
    b.acquire("signal:swap_done", 16, MANAGER, seq=1)
    if not free_first:
        touch(b, MANAGER, "block_free", 17, 17, "free", 4)
    if reuse:
        touch(b, MANAGER, "block_alloc", 18, 18, "alloc", 4)
        b.release("queue:batch", 19, MANAGER, seq=2)
        b.acquire("queue:batch", 20, WORKER, seq=2)
        touch(b, WORKER, "execute_model", 21, 23, "write", 4)
    return b


def test_freeing_after_the_last_reader_is_clean_and_the_next_owner_too():
    report = find_hazards(evict(free_first=False, reuse=True).build())
    assert report.clean and report.lifetime.empty and report.counts["lifetime"] == 0


def test_a_free_before_the_swap_out_read_is_a_use_after_free_with_no_reuse():
    report = find_hazards(evict(free_first=True).build())
    assert report.races.empty  # no one reused the block: no conflicting access at all
    (row,) = report.lifetime.itertuples()
    assert (row.kind, row.name_a, row.lane_a, row.name_b, row.pool, row.block) == (
        "use_after_free", "swap", TRANSFER, "block_free", "gpu", 4)  # fmt: skip
    assert not report.clean


def test_a_free_unordered_with_a_reader_is_freed_while_in_use():
    b = TraceBuilder()
    b.access(b.span(MANAGER, "block_alloc", 1, 1), "gpu", 2, "alloc")
    b.release("queue:swap", 2, MANAGER, seq=1)
    b.acquire("queue:swap", 3, TRANSFER, seq=1)
    b.span(TRANSFER, "swap", 4, 9, reads=(2,))
    b.access(b.span(MANAGER, "block_free", 5, 5), "gpu", 2, "free")  # no wait for the swap
    report = find_hazards(b.build())
    assert report.lifetime[["kind", "name_a", "name_b"]].values.tolist() == [
        ["freed_while_in_use", "swap", "block_free"]
    ]


def test_accesses_before_any_allocator_event_are_not_judged():
    b = TraceBuilder()
    b.span(WORKER, "execute_model", 1, 2, writes=(3,))  # the trace began mid-lifetime
    b.release("queue:result", 3, WORKER, seq=1)
    b.acquire("queue:result", 4, MANAGER, seq=1)
    b.access(b.span(MANAGER, "block_free", 5, 5), "gpu", 3, "free")
    assert find_hazards(b.build()).lifetime.empty


def test_the_cli_exits_1_and_reports_the_lifetime_violation(tmp_path, capsys):
    path = tmp_path / "run"
    save(evict(free_first=True).build(), path)
    assert main(["hazards", str(path), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["counts"]["lifetime"] == 1 and doc["counts"]["races"] == 0
    assert doc["lifetime"][0]["kind"] == "use_after_free"
    assert main(["hazards", str(path)]) == 1
    out = capsys.readouterr().out
    assert "outside their block's lifetime" in out and "use_after_free" in out
