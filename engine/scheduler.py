"""The scheduler (engine process): continuous batching with prefill and greedy decode.

One loop iteration is one ``step``: while the worker runs step N the scheduler admits new
requests (swapping host prefixes back in), then collects N's result, then dispatches N + 1.
Requests get all their blocks at admission, so nothing is ever preempted.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from engine import instrument as I
from engine.cache_manager import Admission, CacheManager
from engine.config import EngineConfig
from engine.ipc import SEQ_STRIDE, Control, recv
from engine.messages import Batch, BatchSeq, StepResult
from engine.prefix_cache import Entry, block_hashes
from engine.workloads import RequestSpec, blocks_for
from fdprof import probe
from fdprof.probe.context import format_traceparent, trace_id_for


@dataclass
class Request:
    spec: RequestSpec
    trace_id: bytes
    span: int
    adm: Admission | None = None
    outputs: list[int] = field(default_factory=list)
    num_computed: int = 0
    #: leading full blocks already matched or registered in the prefix cache
    num_registered: int = 0
    entries: list[Entry] = field(default_factory=list)
    checked: bool = False

    @property
    def tokens(self) -> list[int]:
        return self.spec.prompt + self.outputs


class Scheduler:
    def __init__(
        self,
        cfg: EngineConfig,
        rank: int,
        specs: list[RequestSpec],
        cache: CacheManager,
        batch_q,
        result_q,
        control: Control,
    ) -> None:
        self.cfg = cfg
        self.rank = rank
        self.cm = cache
        self._specs = specs
        self._batch_q = batch_q
        self._result_q = result_q
        self._control = control
        self.steps = 0
        #: wall time of each step that dispatched a batch (the ``step`` span's duration), ns
        self.step_ns: list[int] = []
        self.generated = 0
        self.finished = 0

    def run(self) -> None:
        p = probe.get()
        p.name_thread("scheduler")
        waiting: deque[Request] = deque()
        for spec in self._specs:
            trace_id = trace_id_for(self.cfg.seed, spec.request_id)
            sid = p.begin(I.REQUEST)
            p.link_context(sid, format_traceparent(trace_id, 0))
            p.set_int(sid, I.REQUEST_ID, spec.request_id)
            waiting.append(Request(spec, trace_id, sid))
        running: list[Request] = []
        inflight: tuple[Batch, list[Request]] | None = None
        while waiting or running:
            started = time.perf_counter_ns()
            step_sid = p.begin(I.STEP)
            with p.span(I.SCHEDULE, step_sid):
                self._admit(waiting, running)
            if inflight is not None:
                self._collect(*inflight, running)
                inflight = None
            if running:
                inflight = self._dispatch(running, step_sid)
            elif waiting:
                time.sleep(0.001)  # nothing fits yet: the eviction thread is making room
            room = self.cfg.max_batch - len(running)
            self.cm.want_free(sum(blocks_for(self.cfg, r.spec) for r in list(waiting)[:room]))
            p.end(step_sid)
            if inflight is not None:
                self.step_ns.append(time.perf_counter_ns() - started)

    def _admit(self, waiting: deque[Request], running: list[Request]) -> None:
        while waiting and len(running) < self.cfg.max_batch:
            r = waiting[0]
            adm = self.cm.admit(r.spec.prompt, blocks_for(self.cfg, r.spec), r.trace_id, r.span)
            if adm is None:
                return
            waiting.popleft()
            r.adm = adm
            r.num_computed = adm.cached_tokens
            r.num_registered = len(adm.entries)
            r.entries = list(adm.entries)
            running.append(r)

    def _dispatch(self, running: list[Request], step_sid: int) -> tuple[Batch, list[Request]]:
        p = probe.get()
        seqs = []
        for r in running:
            check = not r.checked
            r.checked = True
            traceparent = p.traceparent(r.span, r.trace_id)
            p.link_context(step_sid, traceparent, link=True)  # the step serves this request
            seqs.append(
                BatchSeq(
                    r.spec.request_id,
                    r.tokens[r.num_computed :],
                    r.num_computed,
                    r.adm.table,
                    traceparent,
                    r.adm.check_blocks if check else [],
                    r.adm.check_fps if check else [],
                )
            )
        self.steps += 1
        batch = Batch(self.steps, self.rank * SEQ_STRIDE + self.steps, seqs)
        p.set_int(step_sid, I.STEP_ID, self.steps)
        p.set_int(step_sid, I.BATCH_SIZE, len(seqs))
        p.release(I.QUEUE_BATCH, batch.seq)
        self._batch_q.put(batch)
        return batch, list(running)

    def _collect(self, batch: Batch, reqs: list[Request], running: list[Request]) -> None:
        res: StepResult = recv(self._result_q, self._control)
        p = probe.get()
        p.acquire(I.QUEUE_RESULT, res.seq)
        bs = self.cfg.block_size
        for r, s, tok in zip(reqs, batch.seqs, res.next_tokens, strict=True):
            r.num_computed += len(s.tokens)
            r.outputs.append(tok)
            full = r.num_computed // bs
            if full > r.num_registered:
                hashes = block_hashes(r.tokens, bs, limit=full)[r.num_registered :]
                blocks = r.adm.table[r.num_registered : full]
                fps = [res.filled[b] for b in blocks]
                r.entries += self.cm.register_filled(hashes, blocks, fps)
                r.num_registered = full
            if len(r.outputs) >= r.spec.max_new_tokens:
                self._finish(r)
                running.remove(r)

    def _finish(self, r: Request) -> None:
        held = {e.gpu for e in r.entries}
        self.cm.release(r.entries, [b for b in r.adm.table if b not in held])
        self.generated += len(r.outputs)
        self.finished += 1
        probe.get().end(r.span)
        self._control.add_finished(self.rank, 1)
