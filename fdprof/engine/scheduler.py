"""The scheduler (engine process): continuous batching with prefill and greedy decode, behind a
plain-data interface as vLLM's v1 scheduler has one.

``admit()`` takes waiting requests in as the device pool allows (swapping host prefixes back in
through the cache manager), ``schedule()`` returns the next :class:`Batch` (or None when no
request is ready), ``update(batch, result)`` applies a :class:`StepResult`. With
``--swap-in async`` a request whose prefix is coming back from the host waits in its own state
(``loading``, vLLM's WAITING_FOR_REMOTE_KVS) until its swap-in has completed, while the others
keep running; synchronously, admission itself waits. With Cache Manager V1 a request joins the
next batch at once (its forward waits per layer), and a request whose last step is dispatched
leaves its batch slot at once (overlap scheduling: the next request is admitted while that step
runs, and a load may take its blocks, fenced behind the step). No
queue, process
or thread lives here: the server (``engine/server.py``) moves batches and results, and unit
tests drive the scheduler with results they build by hand. Requests get all their blocks at
admission, so nothing is ever preempted.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from fdprof import probe
from fdprof import semconv as S
from fdprof.engine.cache_manager import Admission, CacheManager
from fdprof.engine.config import EngineConfig
from fdprof.engine.ipc import SEQ_STRIDE
from fdprof.engine.messages import Batch, BatchSeq, StepResult
from fdprof.engine.prefix_cache import Entry, block_hashes
from fdprof.engine.workloads import RequestSpec, blocks_for
from fdprof.probe import handles as H
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
    #: V1: its last step is dispatched; its slot is free and its blocks are given back once
    #: that step's result is in (:meth:`CacheManager.release_after`)
    released: bool = False

    @property
    def tokens(self) -> list[int]:
        return self.spec.prompt + self.outputs


class Scheduler:
    """The requests ``specs`` arrive when the scheduler is made (their ``request`` spans begin).
    ``wait_for_room(n)``, if given, blocks until eviction has tried to free ``n`` device
    blocks: a request that does not fit waits for it once before admission gives up for this
    step, as FastDeploy's scheduler waits when the device pool is short."""

    def __init__(
        self,
        cfg: EngineConfig,
        rank: int,
        specs: list[RequestSpec],
        cache: CacheManager,
        wait_for_room: Callable[[int], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.rank = rank
        self.cm = cache
        self._wait_for_room = wait_for_room
        self.steps = 0
        self.generated = 0
        #: request id -> the tokens it generated, once finished
        self.outputs: dict[int, list[int]] = {}
        p = probe.get()
        self.waiting: deque[Request] = deque()
        for spec in specs:
            trace_id = trace_id_for(cfg.seed, spec.request_id)
            sid = p.begin(H.REQUEST)
            p.link_context(sid, format_traceparent(trace_id, 0))
            p.set_int(sid, H.REQUEST_ID, spec.request_id)
            self.waiting.append(Request(spec, trace_id, sid))
        self.running: list[Request] = []
        #: admitted, waiting for an asynchronous swap-in of their prefix
        self.loading: list[Request] = []

    @property
    def unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.loading)

    @property
    def admitted(self) -> int:
        """Requests holding a batch slot (not those whose last step is already dispatched)."""
        return sum(not r.released for r in self.running) + len(self.loading)

    @property
    def finished(self) -> int:
        return len(self.outputs)

    def blocks_wanted(self) -> int:
        """Device blocks the next requests that fit in the batch need: the eviction thread keeps
        this many free, so their admission does not wait."""
        room = self.cfg.max_batch - self.admitted
        return sum(blocks_for(self.cfg, r.spec) for r in list(self.waiting)[:room])

    def admit(self) -> list[int]:
        """Take waiting requests in, first come first served, while the batch has room and the
        device pool has blocks; returns the ids of the requests admitted."""
        admitted = []
        while self.waiting and self.admitted < self.cfg.max_batch:
            r = self.waiting[0]
            need = blocks_for(self.cfg, r.spec)
            adm = self.cm.admit(r.spec.prompt, need, r.trace_id, r.span)
            if adm is None and self._wait_for_room is not None:
                self._wait_for_room(need)
                adm = self.cm.admit(r.spec.prompt, need, r.trace_id, r.span)
            if adm is None:
                break
            self.waiting.popleft()
            self._holders(H.BLOCK_HOLD, H.KV_GPU_HOLD, r.spec.request_id, adm.table)
            r.adm = adm
            r.num_computed = adm.cached_tokens
            r.num_registered = len(adm.entries)
            r.entries = list(adm.entries)
            (self.loading if adm.pending else self.running).append(r)
            admitted.append(r.spec.request_id)
        return admitted

    def schedule(self) -> Batch | None:
        """The next step's batch: every running request's uncomputed tokens (a request whose
        swap-in has completed since joins them); None if none. V1 releases the requests this
        step finishes as it is dispatched (their blocks come back with its result)."""
        if self.loading:
            self.cm.poll_loads()
            ready = [r for r in self.loading if self.cm.ready(r.adm)]
            self.loading = [r for r in self.loading if r not in ready]
            self.running += ready
        elif self.cm.loads_in_flight:  # V1: nobody waits; the host copies are dropped when done
            self.cm.poll_loads()
        if not self.running:
            return None
        p = probe.get()
        seqs, after_swap_in, finishing = [], 0, []
        bs = self.cfg.block_size
        store = self.cfg.store_on_fill or self.cm.writes_back
        store_blocks: list[int] = []
        store_hashes: list[bytes] = []
        for r in self.running:
            check = not r.checked
            r.checked = True
            if check:
                after_swap_in = max(after_swap_in, r.adm.swap_in_task)
            last = self.cfg.v1 and len(r.outputs) + 1 >= r.spec.max_new_tokens
            if last:
                finishing.append(r)
            elif store:
                full = len(r.tokens) // bs  # every token of this step is an input by now
                if full > r.num_registered:
                    store_hashes += block_hashes(r.tokens, bs, limit=full)[r.num_registered :]
                    store_blocks += r.adm.table[r.num_registered : full]
            seqs.append(
                BatchSeq(
                    r.spec.request_id,
                    r.tokens[r.num_computed :],
                    r.num_computed,
                    r.adm.table,
                    p.traceparent(r.span, r.trace_id),
                    r.adm.check_blocks if check else [],
                    r.adm.check_fps if check else [],
                )
            )
        self.steps += 1
        batch = Batch(self.steps, self.rank * SEQ_STRIDE + self.steps, seqs, after_swap_in)
        for r in finishing:  # V1: the blocks go back now, fenced behind this step
            self._give_back(r, after=batch.seq)
        if self.cm.storing:
            self.cm.poll_stores()
        if store_blocks:
            self.cm.store_filled(batch.seq, store_blocks, store_hashes)
        return batch

    def update(self, batch: Batch, result: StepResult) -> list[int]:
        """Apply ``result`` of ``batch``: one new token per sequence, the blocks it filled into
        the prefix cache; returns the ids of the requests that finished."""
        if result.seq != batch.seq or len(result.next_tokens) != len(batch.seqs):
            raise ValueError(f"result of step {result.step} does not answer step {batch.step}")
        self.cm.step_done(result.seq)
        by_id = {r.spec.request_id: r for r in self.running}
        bs = self.cfg.block_size
        done = []
        for s, tok in zip(batch.seqs, result.next_tokens, strict=True):
            r = by_id[s.request_id]
            r.num_computed += len(s.tokens)
            r.outputs.append(tok)
            if len(r.outputs) == 1:
                probe.get().set_int(r.span, H.FIRST_TOKEN_NS, time.time_ns())
            full = r.num_computed // bs
            if full > r.num_registered and not r.released:
                hashes = block_hashes(r.tokens, bs, limit=full)[r.num_registered :]
                blocks = r.adm.table[r.num_registered : full]
                fps = [result.filled[b] for b in blocks]
                r.entries += self.cm.register_filled(hashes, blocks, fps)
                r.num_registered = full
            if len(r.outputs) >= r.spec.max_new_tokens:
                self._finish(r)
                done.append(r.spec.request_id)
        return done

    @staticmethod
    def _held(r: Request) -> set[int]:
        """The device blocks of ``r``'s cached entries and of those it matched at admission:
        the cache's, not the request's own (no double free when a fault lets the cache evict
        a matched block)."""
        return {e.loading_to if e.gpu is None else e.gpu for e in r.entries} | set(
            r.adm.table[: len(r.adm.entries)]
        )

    def _holders(self, name, key, request_id: int, blocks: list[int]) -> None:
        """A request taking (admission) or dropping (finish) its table's blocks: the holders
        the ownership analysis checks the allocator against."""
        p = probe.get()
        with p.span(name) as sid:
            p.set_str(sid, H.ROLE, S.ROLE_CACHE_MANAGER)
            p.set_int(sid, H.REQUEST_ID, request_id)
            p.set_ints(sid, key, blocks)

    def _give_back(self, r: Request, after: int | None = None) -> None:
        """``r`` drops its blocks: at once, or (V1) once step ``after`` is done; the hold ends
        here either way, where the scheduler lets go (the fence orders the last step's
        accesses before any reuse)."""
        self._holders(H.BLOCK_RELEASE, H.KV_GPU_RELEASE, r.spec.request_id, r.adm.table)
        held = self._held(r)
        own = [b for b in r.adm.table if b not in held]
        if after is None:
            self.cm.release(r.entries, own)
        else:
            self.cm.release_after(after, r.entries, own)
        r.released = True

    def _finish(self, r: Request) -> None:
        if not r.released:
            self._give_back(r)
        self.generated += len(r.outputs)
        self.outputs[r.spec.request_id] = list(r.outputs)
        self.running.remove(r)
        p = probe.get()
        p.set_int(r.span, H.OUTPUT_TOKENS, len(r.outputs))
        p.end(r.span)
