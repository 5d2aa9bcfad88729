"""The engine process: the scheduler's step loop and the cache manager's eviction thread, wired
to the worker and transfer processes by queues.

The scheduler and the cache manager are plain objects (``schedule() -> Batch | None``,
``update(batch, result)``, a swap port); everything that moves between processes or threads
is here. One loop iteration is one ``step``: while the worker runs step N the scheduler admits
new requests (waiting for their swap-ins), then collects N's result, then dispatches N + 1.
"""

from __future__ import annotations

import threading
import time

from fdprof import probe
from fdprof import semconv as S
from fdprof.engine.cache_manager import CacheManager
from fdprof.engine.ipc import (
    Control,
    KvLock,
    PerThreadKvLock,
    Stopped,
    SwapSignal,
    TransferPort,
    backoff,
    recv,
)
from fdprof.engine.messages import Batch, StepResult, merge_shards, tp_seq
from fdprof.engine.process import ProcessContext
from fdprof.engine.results import EngineStats
from fdprof.engine.scheduler import Scheduler
from fdprof.engine.workloads import make_requests
from fdprof.probe import handles as H

#: longest the scheduler waits for one eviction pass (a pass that cannot free enough ends early)
ROOM_WAIT_S = 2.0


class BackgroundEviction:
    """The cache manager's swap-out thread: keeps the blocks the scheduler wants free, swapping
    out least recently used prefix blocks (FastDeploy's ``free_gpu_executor_pool``), and lets
    the scheduler wait for a pass when the device pool is short."""

    def __init__(self, cache: CacheManager) -> None:
        self._cm = cache
        self._wake = threading.Event()
        self._done = threading.Event()
        self._passes = threading.Condition()
        self._started = self._finished = 0
        self._rooms_made = 0  # times blocks were freed ahead of their copy (a fault)
        self._thread = threading.Thread(target=self._loop, name="swap_out", daemon=True)
        self.error: BaseException | None = None

    def want_free(self, n: int) -> None:
        self._cm.want_free(n)
        self._wake.set()

    def wait_for_room(self, n: int) -> None:
        """Ask for ``n`` free blocks and wait until a pass that started after the ask has
        finished, as FastDeploy's scheduler waits in ``can_allocate_gpu_blocks`` (which calls
        ``free_block_ids`` and blocks on the eviction)."""
        with self._passes:
            self._cm.want_free(max(n, self._cm.wanted))
            target, rooms = self._started + 1, self._rooms_made
            self._wake.set()
            self._passes.wait_for(
                lambda: self._finished >= target or self._rooms_made > rooms or self._done.is_set(),
                ROOM_WAIT_S,
            )

    def _room_made(self) -> None:
        """Blocks were freed ahead of their copy (a fault): the waiting scheduler goes now."""
        with self._passes:
            self._rooms_made += 1
            self._passes.notify_all()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._wake.set()
        self._thread.join()
        if self.error is not None:
            raise self.error

    def _loop(self) -> None:
        probe.get().name_thread("swap_out")
        try:
            while not self._done.is_set():
                self._wake.wait(0.05)
                self._wake.clear()
                with self._passes:
                    self._started += 1
                    this = self._started
                while not self._done.is_set() and self._cm.evict_once(self._room_made):
                    pass
                for _ in backoff():  # V1: its swap-outs' completions, until they land
                    if self._done.is_set() or not self._cm.evicting:
                        break
                    self._cm.poll_evictions()
                with self._passes:
                    self._finished = this
                    self._passes.notify_all()
        except Stopped:
            pass
        except BaseException as exc:  # surfaced by stop() in the scheduler thread
            self.error = exc


def cache_manager_lock(ctx: ProcessContext):
    """The cache manager's side of the baseline lock: ``ipc`` shares one descriptor between its
    threads (as FastDeploy's engine did), ``ipc-per-thread`` gives each thread its own."""
    mode = ctx.cfg.kv_lock
    if mode == S.LockMode.IPC:
        return KvLock(ctx.paths, ctx.rank, S.ROLE_CACHE_MANAGER)
    if mode == S.LockMode.IPC_PER_THREAD:
        return PerThreadKvLock(ctx.paths, ctx.rank, S.ROLE_CACHE_MANAGER)
    return None


def _dispatch(batch: Batch, step_sid: int, ctx: ProcessContext) -> None:
    """The batch to every TP rank's worker (one release: each rank acquires it)."""
    p = probe.get()
    for s in batch.seqs:
        p.link_context(step_sid, s.traceparent, link=True)  # the step serves this request
    p.set_int(step_sid, H.STEP_ID, batch.step)
    p.set_int(step_sid, H.BATCH_SIZE, len(batch.seqs))
    p.release(H.QUEUE_BATCH, batch.seq)
    for q in ctx.queues.batch:
        q.put(batch)


def _collect(ctx: ProcessContext, control: Control) -> StepResult:
    """Every TP rank's result of the step in flight, as one."""
    p = probe.get()
    results = []
    for _ in range(ctx.cfg.tp):
        res: StepResult = recv(ctx.result_q, control)
        p.acquire(H.QUEUE_RESULT, tp_seq(res.seq, res.tp_rank))
        results.append(res)
    return merge_shards(results)


def run_steps(
    sched: Scheduler, eviction: BackgroundEviction, ctx: ProcessContext, control: Control
) -> list[int]:
    """Serve every request; returns each dispatching step's wall time (ns)."""
    p = probe.get()
    p.name_thread("scheduler")
    step_ns: list[int] = []
    inflight: Batch | None = None
    while sched.unfinished:
        started = time.perf_counter_ns()
        step_sid = p.begin(H.STEP)
        with p.span(H.SCHEDULE, step_sid):
            sched.admit()
        if inflight is not None:
            finished = sched.update(inflight, _collect(ctx, control))
            if finished:
                control.add_finished(ctx.rank, len(finished))
        inflight = sched.schedule()
        if inflight is not None:
            _dispatch(inflight, step_sid, ctx)
        elif sched.waiting or sched.loading:
            time.sleep(0.001)  # nothing runnable yet: eviction or a swap-in is under way
        eviction.want_free(sched.blocks_wanted())
        p.end(step_sid)
        if inflight is not None:
            step_ns.append(time.perf_counter_ns() - started)
    return step_ns


def serve(ctx: ProcessContext) -> EngineStats:
    control = ctx.control
    signals = [SwapSignal(ctx.paths.signal(ctx.rank, t)) for t in range(ctx.cfg.tp)]
    port = TransferPort(ctx.queues.swap, signals, control)
    cache = CacheManager(ctx.cfg, ctx.rank, port, cache_manager_lock(ctx))
    eviction = BackgroundEviction(cache)
    specs = make_requests(ctx.cfg, ctx.rank)
    ctx.report("ready", S.ROLE_ENGINE)
    while not ctx.go.wait(0.1):
        if control.stopping:
            raise Stopped
    # the requests arrive now (their spans begin here), once every process is up
    # V1 without the lock never waits for room on the scheduler thread: a request that does not
    # fit stays queued while the eviction thread frees blocks in the background, so the next
    # step is dispatched at once (waiting there would idle the worker)
    no_wait = ctx.cfg.v1 and not ctx.cfg.locked
    sched = Scheduler(ctx.cfg, ctx.rank, specs, cache, None if no_wait else eviction.wait_for_room)
    eviction.start()
    try:
        step_ns = run_steps(sched, eviction, ctx, control)
    finally:
        eviction.stop()
    for q in (*ctx.queues.batch, *ctx.queues.swap):
        q.put(None)
    return EngineStats(
        steps=sched.steps,
        step_ns=step_ns,
        generated_tokens=sched.generated,
        requests=sched.finished,
        swaps=cache.stats,
        outputs=sched.outputs,
    )
