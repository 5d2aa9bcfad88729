"""What the vLLM plugin records, and where in vLLM 0.32 it records it.

Each hook wraps one vLLM method at class level (or, for the offloading worker, the instance
vLLM built): the original is called exactly once, outside any ``try`` of ours, and what we
record before and after it runs under :class:`Errors`, which counts a failure, reports it once
and lets vLLM go on. Per process (see ``fdprof.adapters.vllm.register``):

- engine core: ``EngineCore.step`` / ``step_with_batch_queue`` → ``step`` spans;
  ``Scheduler.schedule`` → ``schedule`` with one ``scheduled_request`` child per request
  (request id, its block ids, tokens computed before and scheduled in the step), then it
  releases ``queue:batch`` (step id, also set on the ``SchedulerOutput`` that travels to the
  worker); ``Scheduler.update_from_output`` acquires ``queue:result`` (step id); the KV
  manager's tables and the block pool's events (holds, releases, hand-outs, frees, evictions):
  :mod:`fdprof.adapters.vllm.ownership`.
- worker: ``GPUModelRunner.execute_model`` (the CPU runner inherits it) acquires
  ``queue:batch``; its ``execute_model`` span opens when ``_update_states`` is entered (after
  the connector's ``handle_preemptions`` submitted the deferred stores and waited for the
  fenced ones) and ends when ``_model_forward`` returns (before the loads and completions
  the connector handles after the forward): ``kv.gpu_write`` (blocks of the token positions it
  computes, and blocks it zeroes), ``kv.gpu_read`` (blocks of every position attention
  reads), and one ``scheduled_request`` child per request with the blocks it uses; it
  releases ``queue:result`` once the step's output exists (after ``sample_tokens`` when
  ``execute_model`` returns none). Offloading: every ``submit_store`` / ``submit_load`` of the
  spec's worker is an ``issue_swap_task`` (its job's request from the connector metadata)
  releasing ``queue:swap`` (job id); a job ``get_finished`` reports done acquires
  ``signal:swap_done`` (job id); ``wait`` is a ``swap_wait`` span acquiring it for the jobs
  submitted in this process only (the others: ``swap.unsubmitted``). The copy itself is
  recorded by the spec that runs it (``fdprof.adapters.vllm.offload``).
- main process: ``OutputProcessor.add_request`` … finished output → ``request`` spans, with
  ``fd.first_token_ns`` (when its first output token was processed) and
  ``request.output_tokens``.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from fdprof import probe
from fdprof import semconv as S
from fdprof.probe import handles as H

#: first failures of one hook reported as spans (and on stderr once); later ones only counted
_REPORTED_PER_HOOK = 3


class Errors:
    """Failures of our own recording code inside vLLM: counted per hook, the first reported on
    stderr and as ``fdprof.adapter_error`` spans; never raised into vLLM."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    @contextmanager
    def guard(self, hook: str):
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - instrumentation must never break vLLM
            self.record(hook, exc)

    def record(self, hook: str, exc: BaseException) -> None:
        with self._lock:
            n = self.counts[hook] = self.counts.get(hook, 0) + 1
        if n > _REPORTED_PER_HOOK:
            return
        if n == 1:
            print(f"fdprof: vLLM adapter: {hook} failed, vLLM goes on: {exc!r}", file=sys.stderr)
        try:
            p = probe.get()
            with p.span(H.ADAPTER_ERROR) as sid:
                p.set_str(sid, H.HOOK, hook)
                p.set_str(sid, H.ERROR, repr(exc)[:500])
        except Exception:  # noqa: BLE001, S110 - the recorder itself failing: counted above
            pass


ERRORS = Errors()


def wrap(cls: type, method: str, make: Callable[[Callable], Callable]) -> None:
    """Replace ``cls.method`` by ``make(original)``, once (a second plugin load is a no-op)."""
    original = cls.__dict__.get(method) or getattr(cls, method)
    if getattr(original, "__fdprof_original__", None) is not None:
        return
    wrapper = functools.wraps(original)(make(original))
    wrapper.__fdprof_original__ = original
    setattr(cls, method, wrapper)


def _block_range(blocks: list[int], block_size: int, lo: int, hi: int) -> list[int]:
    """Block ids holding token positions ``[lo, hi)``."""
    if hi <= lo:
        return []
    return blocks[lo // block_size : (hi - 1) // block_size + 1]


# -- engine core -------------------------------------------------------------------------


class EngineCoreRecorder:
    """Steps, scheduling and the block pool, in the engine-core process (one per process)."""

    def __init__(self) -> None:
        self.steps = 0
        self._step_sid = 0
        self._in_step = False

    def install(self) -> None:
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.engine.core import EngineCore

        from fdprof.adapters.vllm.ownership import PoolRecorder

        wrap(EngineCore, "step", self._step)
        wrap(EngineCore, "step_with_batch_queue", self._step)
        wrap(Scheduler, "schedule", self._schedule)
        wrap(Scheduler, "update_from_output", self._update_from_output)
        PoolRecorder(lambda: self.steps).install()

    def _step(self, original):
        def step(engine, *args, **kwargs):
            self._in_step, self._step_sid = True, 0
            try:
                return original(engine, *args, **kwargs)
            finally:
                with ERRORS.guard("EngineCore.step"):
                    self._in_step = False
                    if self._step_sid:
                        probe.get().end(self._step_sid)
                        self._step_sid = 0

        return step

    def _schedule(self, original):
        def schedule(scheduler, *args, **kwargs):
            p = probe.get()
            sid = 0
            with ERRORS.guard("Scheduler.schedule"):
                self.steps += 1
                if self._in_step:  # the step span starts with its first schedule call
                    self._step_sid = p.begin(H.STEP)
                    p.set_str(self._step_sid, H.ROLE, S.ROLE_ENGINE)
                    p.set_int(self._step_sid, H.STEP_ID, self.steps)
                sid = p.begin(H.SCHEDULE, self._step_sid)
            out = original(scheduler, *args, **kwargs)
            with ERRORS.guard("Scheduler.schedule"):
                self._scheduled(p, scheduler, out, sid)
            return out

        return schedule

    def _scheduled(self, p, scheduler, out, sid: int) -> None:
        step = self.steps
        out._fdprof_step = step  # travels with the output to the worker (pickled)
        p.set_int(sid, H.STEP_ID, step)
        tokens = out.num_scheduled_tokens
        if self._step_sid:
            p.set_int(self._step_sid, H.BATCH_SIZE, len(tokens))
            p.set_int(self._step_sid, H.BATCH_TOKENS, out.total_num_scheduled_tokens)
        computed = {r.req_id: r.num_computed_tokens for r in out.scheduled_new_reqs}
        cached = out.scheduled_cached_reqs
        computed.update(zip(cached.req_ids, cached.num_computed_tokens, strict=True))
        manager = scheduler.kv_cache_manager
        for req_id, n in tokens.items():
            with p.span(H.SCHEDULED_REQUEST, sid) as rid:
                p.set_str(rid, H.REQUEST_ID, req_id)
                p.set_int(rid, H.STEP_ID, step)
                p.set_int(rid, H.BATCH_TOKENS, n)
                p.set_int(rid, H.COMPUTED_TOKENS, computed.get(req_id, 0))
                groups = manager.get_block_ids(req_id)
                p.set_ints(rid, H.KV_BLOCKS, groups[0] if groups else [])
        p.end(sid)
        p.release(H.QUEUE_BATCH, step)

    def _update_from_output(self, original):
        def update_from_output(scheduler, scheduler_output, *args, **kwargs):
            with ERRORS.guard("Scheduler.update_from_output"):
                step = getattr(scheduler_output, "_fdprof_step", None)
                if step is not None:
                    probe.get().acquire(H.QUEUE_RESULT, step)
            return original(scheduler, scheduler_output, *args, **kwargs)

        return update_from_output


# -- worker ------------------------------------------------------------------------------


class WorkerRecorder:
    """``execute_model``'s KV accesses where they happen, and the offloading worker's submit
    and completion edges, in the worker process (one per process).

    The access span opens when ``_update_states`` is entered (it zeroes freshly allocated
    blocks) and ends when the forward (``_model_forward``) returns: after the connector's
    ``handle_preemptions`` (deferred stores submitted, fenced stores waited for), before the
    loads and completions the connector handles after the forward. A step with no tokens ends
    it when ``_update_states`` returns."""

    def __init__(self) -> None:
        #: request id -> its block ids (KV group 0), kept from the scheduler outputs
        self.tables: dict[str, list[int]] = {}
        self.calls = 0
        self._awaiting_result: int | None = None
        #: the step whose batch arrived and whose access span has not opened yet
        self._pending: int | None = None
        self._sid = 0
        #: transfer job id -> its request, from the connector metadata the worker is handed
        self.job_requests: dict[int, str] = {}
        #: job ids submitted in this process: only these get completion edges
        self.submitted: set[int] = set()

    def install(self) -> None:
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.worker import (
            OffloadingConnectorWorker,
        )
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        wrap(GPUModelRunner, "execute_model", self._execute_model)
        wrap(GPUModelRunner, "_update_states", self._update_states)
        wrap(GPUModelRunner, "_model_forward", self._model_forward)
        wrap(GPUModelRunner, "sample_tokens", self._sample_tokens)
        wrap(OffloadingConnectorWorker, "_init_worker", self._init_offload_worker)
        for method in ("handle_preemptions", "start_kv_transfers", "prepare_store_kv"):
            wrap(OffloadingConnectorWorker, method, self._note_jobs)

    def _execute_model(self, original):
        def execute_model(runner, scheduler_output, *args, **kwargs):
            p = probe.get()
            step = 0
            with ERRORS.guard("GPUModelRunner.execute_model"):
                self.calls += 1
                step = getattr(scheduler_output, "_fdprof_step", self.calls)
                p.acquire(H.QUEUE_BATCH, step)
                self._pending = step
            try:
                out = original(runner, scheduler_output, *args, **kwargs)
            finally:
                with ERRORS.guard("GPUModelRunner.execute_model"):
                    self._pending = None
                    self._close(p)
            with ERRORS.guard("GPUModelRunner.execute_model"):
                if out is None:
                    self._awaiting_result = step
                else:
                    p.release(H.QUEUE_RESULT, step)
            return out

        return execute_model

    def _update_states(self, original):
        def update_states(runner, scheduler_output, *args, **kwargs):
            p = probe.get()
            with ERRORS.guard("GPUModelRunner._update_states"):
                if self._pending is not None:
                    step, self._pending = self._pending, None
                    self._sid = p.begin(H.EXECUTE_MODEL)
                    self._accesses(p, self._sid, runner, scheduler_output, step)
            out = original(runner, scheduler_output, *args, **kwargs)
            with ERRORS.guard("GPUModelRunner._update_states"):
                if not scheduler_output.total_num_scheduled_tokens:
                    self._close(p)  # no forward follows; the connector's polling is not in it
            return out

        return update_states

    def _model_forward(self, original):
        def model_forward(runner, *args, **kwargs):
            try:
                return original(runner, *args, **kwargs)
            finally:
                with ERRORS.guard("GPUModelRunner._model_forward"):
                    self._close(probe.get())

        return model_forward

    def _close(self, p) -> None:
        if self._sid:
            p.end(self._sid)
            self._sid = 0

    def _sample_tokens(self, original):
        def sample_tokens(runner, *args, **kwargs):
            out = original(runner, *args, **kwargs)
            with ERRORS.guard("GPUModelRunner.sample_tokens"):
                if self._awaiting_result is not None:
                    probe.get().release(H.QUEUE_RESULT, self._awaiting_result)
                    self._awaiting_result = None
            return out

        return sample_tokens

    def _accesses(self, p, sid: int, runner, out, step: int) -> None:
        """``kv.gpu_write``: blocks of the positions this step computes (and blocks it zeroes);
        ``kv.gpu_read``: blocks of every position attention reads (0 up to the last one); one
        ``scheduled_request`` child per request with the blocks it uses (``kv.blocks``)."""
        tables = self.tables
        for req_id in out.finished_req_ids:
            tables.pop(req_id, None)
        for req_id in out.preempted_req_ids or ():
            tables.pop(req_id, None)
        computed: dict[str, int] = {}
        for new in out.scheduled_new_reqs:
            tables[new.req_id] = list(new.block_ids[0]) if new.block_ids else []
            computed[new.req_id] = new.num_computed_tokens
        cached = out.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            new_blocks = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids or req_id not in tables:
                tables[req_id] = list(new_blocks[0]) if new_blocks else []
            elif new_blocks:
                tables[req_id].extend(new_blocks[0])
            computed[req_id] = cached.num_computed_tokens[i]
        block_size = runner.cache_config.block_size
        reads: set[int] = set()
        writes: set[int] = set(out.new_block_ids_to_zero or ())
        for req_id, n in out.num_scheduled_tokens.items():
            blocks = tables.get(req_id, [])
            start = computed.get(req_id, 0)
            used = [b for b in _block_range(blocks, block_size, 0, start + n) if b]  # 0: null
            writes.update(_block_range(blocks, block_size, start, start + n))
            reads.update(used)
            with p.span(H.SCHEDULED_REQUEST, sid) as rid:
                p.set_str(rid, H.REQUEST_ID, req_id)
                p.set_int(rid, H.STEP_ID, step)
                p.set_int(rid, H.BATCH_TOKENS, n)
                p.set_int(rid, H.COMPUTED_TOKENS, start)
                p.set_ints(rid, H.KV_BLOCKS, used)
        p.set_str(sid, H.ROLE, S.ROLE_WORKER)
        p.set_int(sid, H.STEP_ID, step)
        p.set_int(sid, H.BATCH_SIZE, len(out.num_scheduled_tokens))
        p.set_int(sid, H.BATCH_TOKENS, out.total_num_scheduled_tokens)
        p.set_ints(sid, H.KV_GPU_READ, sorted(reads))
        p.set_ints(sid, H.KV_GPU_WRITE, sorted(writes))

    def _note_jobs(self, original):
        def note_jobs(connector_worker, metadata, *args, **kwargs):
            with ERRORS.guard("OffloadingConnectorWorker.jobs"):
                for jobs in (metadata.store_jobs, metadata.load_jobs):
                    for job_id, job in (jobs or {}).items():
                        self.job_requests[job_id] = job.req_id
            return original(connector_worker, metadata, *args, **kwargs)

        return note_jobs

    def _init_offload_worker(self, original):
        def init_worker(connector_worker, *args, **kwargs):
            original(connector_worker, *args, **kwargs)
            with ERRORS.guard("OffloadingConnectorWorker._init_worker"):
                instrument_offloading_worker(connector_worker.worker, self)

        return init_worker


def instrument_offloading_worker(worker: Any, recorder: WorkerRecorder) -> None:
    """Wrap one ``OffloadingWorker`` instance (any spec's): a submit is an ``issue_swap_task``
    (its job's request as ``fd.request_id``) releasing ``queue:swap``; a completion reported by
    ``get_finished`` acquires ``signal:swap_done``; ``wait`` is a ``swap_wait`` span that
    acquires it for the jobs submitted here and lists the others (``swap.unsubmitted``: a
    wait on them completes nothing, which the model reports as a gap)."""
    submitted, job_requests = recorder.submitted, recorder.job_requests

    def submit(original, direction: str):
        def submit_job(job_id, src_spec, dst_spec, *args, **kwargs):
            p = probe.get()
            sid = 0
            with ERRORS.guard("OffloadingWorker.submit"):
                sid = p.begin(H.ISSUE_SWAP_TASK)
                p.set_str(sid, H.ROLE, S.ROLE_WORKER)
                p.set_int(sid, H.SWAP_TASK_ID, job_id)
                p.set_str(sid, H.SWAP_DIRECTION, direction)
                p.set_int(sid, H.SWAP_BLOCKS, len(src_spec.block_ids))
                if job_id in job_requests:
                    p.set_str(sid, H.REQUEST_ID, job_requests[job_id])
                submitted.add(job_id)
                p.release(H.QUEUE_SWAP, job_id, sid)
            try:
                return original(job_id, src_spec, dst_spec, *args, **kwargs)
            finally:
                with ERRORS.guard("OffloadingWorker.submit"):
                    p.end(sid)

        return submit_job

    get_finished, wait = worker.get_finished, worker.wait

    def finished():
        results = get_finished()
        with ERRORS.guard("OffloadingWorker.get_finished"):
            p = probe.get()
            for result in results:
                if result.job_id in submitted:
                    p.acquire(H.SIGNAL_SWAP_DONE, result.job_id)
                job_requests.pop(result.job_id, None)
        return results

    def wait_jobs(job_ids, *args, **kwargs):
        p = probe.get()
        sid = 0
        with ERRORS.guard("OffloadingWorker.wait"):
            sid = p.begin(H.SWAP_WAIT)
            p.set_str(sid, H.ROLE, S.ROLE_WORKER)
        try:
            return wait(job_ids, *args, **kwargs)
        finally:
            with ERRORS.guard("OffloadingWorker.wait"):
                jobs = sorted(job_ids)
                for job_id in jobs:
                    if job_id in submitted:
                        p.acquire(H.SIGNAL_SWAP_DONE, job_id, sid)
                unknown = [j for j in jobs if j not in submitted]
                if unknown:
                    p.set_ints(sid, H.SWAP_UNSUBMITTED, unknown)
                p.end(sid)

    worker.submit_store = submit(worker.submit_store, S.TO_CPU)
    worker.submit_load = submit(worker.submit_load, S.TO_GPU)
    worker.get_finished = finished
    worker.wait = wait_jobs


# -- main process --------------------------------------------------------------------------


class FrontendRecorder:
    """One ``request`` span per request, from ``add_request`` to its finished output."""

    def __init__(self) -> None:
        self.open: dict[str, int] = {}
        #: request id -> output tokens seen so far (the first sets ``fd.first_token_ns``)
        self.tokens: dict[str, int] = {}

    def install(self) -> None:
        from vllm.v1.engine.output_processor import OutputProcessor

        wrap(OutputProcessor, "add_request", self._add_request)
        wrap(OutputProcessor, "process_outputs", self._process_outputs)

    def _add_request(self, original):
        def add_request(processor, request, *args, **kwargs):
            with ERRORS.guard("OutputProcessor.add_request"):
                p = probe.get()
                sid = p.begin(H.REQUEST)
                p.set_str(sid, H.ROLE, S.ROLE_FRONTEND)
                p.set_str(sid, H.REQUEST_ID, request.request_id)
                p.set_int(sid, H.PROMPT_TOKENS, len(request.prompt_token_ids or ()))
                self.open[request.request_id] = sid
            return original(processor, request, *args, **kwargs)

        return add_request

    def _process_outputs(self, original):
        def process_outputs(processor, engine_core_outputs, *args, **kwargs):
            out = original(processor, engine_core_outputs, *args, **kwargs)
            with ERRORS.guard("OutputProcessor.process_outputs"):
                p = probe.get()
                now = time.time_ns()
                for output in engine_core_outputs:
                    rid = output.request_id
                    sid = self.open.get(rid, 0)
                    if not sid:
                        continue
                    new = len(output.new_token_ids or ())
                    if new and rid not in self.tokens:
                        p.set_int(sid, H.FIRST_TOKEN_NS, now)
                    if new or rid in self.tokens:
                        self.tokens[rid] = self.tokens.get(rid, 0) + new
                    if output.finish_reason is not None:
                        p.set_int(sid, H.OUTPUT_TOKENS, self.tokens.pop(rid, 0))
                        p.end(self.open.pop(rid))
            return out

        return process_outputs

    def close(self) -> None:
        """End the spans of requests still open at exit (aborted, or never finished)."""
        p = probe.get()
        for sid in self.open.values():
            p.end(sid)
        self.open.clear()
        self.tokens.clear()
