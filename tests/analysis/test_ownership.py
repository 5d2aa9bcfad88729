"""Block ownership on hand-built traces shaped like vLLM's: an engine lane (scheduler, KV
manager, block pool), a worker lane and a copy thread. Correct sharing, revival and fenced
reuse are clean; each ownership bug is its own kind, naming blocks, requests and steps."""

from __future__ import annotations

import json

import pytest

from fdprof import semconv as S
from fdprof.analysis.hazards import find_hazards
from fdprof.analysis.ownership import (
    FREED_UNDER_TRANSFER,
    FREED_WHILE_HELD,
    HANDED_OUT_WHILE_HELD,
    READ_AFTER_REUSE,
    READ_WITHOUT_HOLD,
    REFCOUNT_LEAK,
    REFCOUNT_NEGATIVE,
    TRANSFER_AFTER_REUSE,
    WRITTEN_WHILE_HELD,
)
from fdprof.cli import main
from fdprof.trace import save

from .builder import TraceBuilder

ENGINE, WORKER, COPY = "1/1", "2/1", "2/2"


class Run:
    """A run built in time order: pool events on the engine lane, steps handed to the worker
    through ``queue:batch``/``queue:result``, stores submitted to a copy thread."""

    def __init__(self) -> None:
        self.b = TraceBuilder()
        self.t = 0
        self.steps = 0

    def tick(self) -> int:
        self.t += 1
        return self.t

    def pool(self, mode: str, blocks, request: str = "", pool: str = "gpu") -> int:
        attrs = {f"kv.{pool}_{mode}": list(blocks)}
        if request:
            attrs[S.REQUEST_ID] = request
        name = {"alloc": S.BLOCK_ALLOC, "hold": S.BLOCK_HOLD, "release": S.BLOCK_RELEASE}.get(
            mode, S.BLOCK_FREE
        )
        t = self.tick()
        sid = self.b.span(ENGINE, name, t, t, role="engine", step=self.steps + 1, attrs=attrs)
        for block in blocks:
            self.b.access(sid, pool, block, mode)
        return sid

    def alloc(self, request: str, *blocks: int) -> None:
        self.pool("alloc", blocks, request)
        self.pool("hold", blocks, request)

    def hit(self, request: str, *blocks: int) -> None:
        self.pool("hold", blocks, request)

    def finish(self, request: str, *blocks: int, unref: tuple = ()) -> None:
        self.pool("release", blocks, request)
        if unref:
            self.pool("unref", unref)

    def step(self, uses: dict[str, tuple[tuple, tuple]], before=None, after=None) -> int:
        """One step: ``uses`` maps a request to the blocks it reads and writes."""
        self.steps += 1
        s = self.steps
        self.b.release("queue:batch", self.tick(), ENGINE, seq=s)
        self.b.acquire("queue:batch", self.tick(), WORKER, seq=s)
        if before:
            before()
        reads = sorted({x for r, _ in uses.values() for x in r})
        writes = sorted({x for _, w in uses.values() for x in w})
        start = self.tick()
        sid = self.b.span(WORKER, S.EXECUTE_MODEL, start, start + 2, role="worker", step=s,
                          reads=reads, writes=writes,
                          attrs={S.KV_GPU_READ: reads, S.KV_GPU_WRITE: writes})  # fmt: skip
        for request, (r, w) in uses.items():
            blocks = sorted(set(r) | set(w))
            self.b.span(WORKER, S.SCHEDULED_REQUEST, start, start, parent=sid, step=s,
                        attrs={S.REQUEST_ID: request, S.KV_BLOCKS: blocks})  # fmt: skip
        self.t += 2
        if after:
            after()
        self.b.release("queue:result", self.tick(), WORKER, seq=s)
        self.b.acquire("queue:result", self.tick(), ENGINE, seq=s)
        return sid

    def store(self, job: int, request: str, blocks, wait: bool = True) -> None:
        """A store job submitted by the worker, copied on the copy thread, waited for or not."""
        t = self.tick()
        self.b.span(WORKER, S.ISSUE_SWAP_TASK, t, t, role="worker",
                    attrs={S.SWAP_TASK_ID: job, S.REQUEST_ID: request})  # fmt: skip
        self.b.release("queue:swap", t, WORKER, seq=job)
        self.b.acquire("queue:swap", self.tick(), COPY, seq=job)
        start = self.tick()
        self.b.span(COPY, S.SWAP, start, start + 1, role="transfer", reads=tuple(blocks),
                    attrs={S.SWAP_TASK_ID: job, S.KV_GPU_READ: list(blocks)})  # fmt: skip
        self.t += 1
        self.b.release("signal:swap_done", self.tick(), COPY, seq=job)
        if wait:
            self.b.acquire("signal:swap_done", self.tick(), WORKER, seq=job)

    def report(self):
        return find_hazards(self.b.build())


def kinds(report) -> set[str]:
    return set(report.ownership["kind"])


def test_sharing_a_prefix_computed_in_the_same_step_and_reviving_it_is_clean():
    run = Run()
    run.alloc("r1", 7, 8)
    run.hit("r2", 7)  # cached at allocation: hit in the step that computes it
    run.alloc("r2", 9)
    run.step({"r1": ((7, 8), (7, 8)), "r2": ((7, 9), (9,))})
    run.finish("r1", 7, 8, unref=(8,))
    run.finish("r2", 7, 9, unref=(7, 9))
    run.hit("r3", 7)  # revived from the free queue by a prefix hit
    run.step({"r3": ((7,), ())})
    run.finish("r3", 7, unref=(7,))
    report = run.report()
    assert report.clean and report.ownership.empty, report.ownership.to_dict("records")


def lost_reference() -> Run:
    """r2 hits block 7 but the pool does not count it: 7 stays free and goes to r3."""
    run = Run()
    run.alloc("r1", 7)
    run.step({"r1": ((7,), (7,))})
    run.finish("r1", 7, unref=(7,))
    run.hit("r2", 7)
    run.step({"r2": ((7,), ())})
    run.alloc("r3", 7)
    run.step({"r3": ((7,), (7,)), "r2": ((7,), ())})
    run.step({"r2": ((7,), ())})
    return run


def test_a_lost_reference_on_a_prefix_hit_names_blocks_requests_and_steps():
    report = lost_reference().report()
    assert not report.clean and report.races.empty  # one lane: happens-before sees nothing
    own = report.ownership
    assert {HANDED_OUT_WHILE_HELD, WRITTEN_WHILE_HELD, READ_AFTER_REUSE} <= kinds(report)
    handed = own[own["kind"] == HANDED_OUT_WHILE_HELD].iloc[0]
    assert handed["blocks"] == ["gpu:7"] and handed["request_a"] == "r2"
    assert handed["request_b"] == "r3" and handed["name_b"] == S.BLOCK_ALLOC
    stale = own[own["kind"] == READ_AFTER_REUSE].iloc[0]
    assert stale["request_a"] == "r2" and stale["name_a"] == S.EXECUTE_MODEL
    assert stale["step_a"] == 4 and stale["step_b"] == 3  # read in step 4, reused in step 3


def test_a_count_decremented_twice_frees_a_block_another_request_holds():
    run = Run()
    run.alloc("r1", 7)
    run.hit("r2", 7)
    run.step({"r1": ((7,), (7,)), "r2": ((7,), ())})
    run.finish("r1", 7, unref=(7,))  # the pool reached 0 although r2 holds 7
    row = run.report().ownership.iloc[0]
    assert (row["kind"], row["request_a"], row["blocks"]) == (FREED_WHILE_HELD, "r2", ["gpu:7"])


def test_counts_below_zero_and_counts_left_at_the_end():
    run = Run()
    run.alloc("r1", 7, 8)
    run.finish("r1", 7, 8, unref=(7,))  # 8 never reaches 0: its count leaked
    run.pool("release", (7,), "r9")  # r9 never held 7
    run.pool("underflow", (7,))
    report = run.report()
    assert kinds(report) == {REFCOUNT_NEGATIVE, REFCOUNT_LEAK}
    leak = report.ownership[report.ownership["kind"] == REFCOUNT_LEAK].iloc[0]
    assert leak["blocks"] == ["gpu:8"]
    negative = report.ownership[report.ownership["kind"] == REFCOUNT_NEGATIVE]
    assert set(negative["request_a"]) == {"r9", ""}


def test_a_request_reading_a_block_it_released_is_flagged():
    run = Run()
    run.alloc("r1", 7)
    run.step({"r1": ((7,), (7,))})
    run.finish("r1", 7, unref=(7,))  # preempted, say
    run.step({"r1": ((7,), ())})  # the worker still runs it on its old table
    row = run.report().ownership.iloc[0]
    assert (row["kind"], row["request_a"], row["name_b"]) == (
        READ_WITHOUT_HOLD, "r1", S.BLOCK_RELEASE)  # fmt: skip


def deferred_store(fenced: bool, submit_after_forward: bool = False) -> Run:
    """r1 finishes in its prefill; its store is deferred to the next step, in which block 7 is
    handed to r2. vLLM fences it: the worker submits the store and waits before the forward."""
    run = Run()
    run.alloc("r1", 7)
    run.step({"r1": ((7,), (7,))})
    run.finish("r1", 7, unref=(7,))
    run.alloc("r2", 7)
    if submit_after_forward:
        run.step({"r2": ((7,), (7,))}, after=lambda: run.store(1, "r1", (7,)))
    else:
        run.step({"r2": ((7,), (7,))}, before=lambda: run.store(1, "r1", (7,), wait=fenced))
    return run


def test_a_fenced_deferred_store_of_a_reallocated_block_is_clean():
    report = deferred_store(fenced=True).report()
    assert report.clean, (report.races, report.ownership)


def test_an_unfenced_store_in_flight_races_the_new_owners_write():
    report = deferred_store(fenced=False).report()
    assert not report.races.empty and report.ownership.empty  # unordered: happens-before's
    assert {(r.name_a, r.name_b) for r in report.races.itertuples()} == {
        (S.SWAP, S.EXECUTE_MODEL)}  # fmt: skip


def test_a_store_that_copies_after_the_new_owner_wrote_is_stale():
    report = deferred_store(fenced=True, submit_after_forward=True).report()
    assert report.races.empty  # ordered, the wrong way round
    row = report.ownership.iloc[0]
    assert (row["kind"], row["name_a"], row["request_a"]) == (TRANSFER_AFTER_REUSE, S.SWAP, "r1")
    assert (row["name_b"], row["step_b"]) == (S.EXECUTE_MODEL, 2)


@pytest.mark.parametrize("early", [False, True])
def test_a_free_under_an_in_flight_transfer(early):
    """The engine's allocator discards a host block's content on free: a free after the
    transfer that reads it was submitted, and before it completed, is flagged."""
    run = Run()
    run.pool("alloc", (3,), pool="cpu")
    t = run.tick()
    run.b.span(ENGINE, S.ISSUE_SWAP_TASK, t, t, attrs={S.SWAP_TASK_ID: 4})
    run.b.release("queue:swap", t, ENGINE, seq=4)
    if early:
        run.pool("free", (3,), pool="cpu")
    run.b.acquire("queue:swap", run.tick(), COPY, seq=4)
    start = run.tick()
    run.b.span(COPY, S.SWAP, start, start + 1, pool="cpu", reads=(3,),
               attrs={S.SWAP_TASK_ID: 4})  # fmt: skip
    run.t += 1
    run.b.release("signal:swap_done", run.tick(), COPY, seq=4)
    run.b.acquire("signal:swap_done", run.tick(), ENGINE, seq=4)
    if not early:
        run.pool("free", (3,), pool="cpu")
    report = run.report()
    assert (FREED_UNDER_TRANSFER in kinds(report)) == early


def test_ownership_in_every_output_and_the_exit_code(tmp_path, capsys):
    path = tmp_path / "lost.json"
    save(lost_reference().b.build(), path)
    assert main(["hazards", str(path), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["counts"]["ownership"] >= 3
    assert {k["kind"] for k in doc["ownership_kinds"]} >= {HANDED_OUT_WHILE_HELD,
                                                           READ_AFTER_REUSE}  # fmt: skip
    assert doc["ownership"][0]["blocks"] == ["gpu:7"]
    for fmt in ("text", "md", "html"):
        out = tmp_path / f"report.{fmt}"
        assert main(["hazards", str(path), "--format", fmt, "--out", str(out)]) == 1
        text = out.read_text()
        assert HANDED_OUT_WHILE_HELD in text and "r3" in text, fmt


def test_a_store_for_a_request_that_never_held_the_block_is_flagged():
    """A store job copying a block of another request's table (a wrong block id): its request
    never held the block; a request that released it may (vLLM stores finished requests')."""
    run = Run()
    run.alloc("r1", 7)
    run.step({"r1": ((7,), (7,))}, after=lambda: run.store(1, "r2", (7,)))
    row = run.report().ownership.iloc[0]
    assert (row["kind"], row["name_a"], row["request_a"]) == (READ_WITHOUT_HOLD, S.SWAP, "r2")
