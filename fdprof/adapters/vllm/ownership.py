"""Who holds which KV blocks in vLLM 0.32's engine core, and what its block pool does with them:
the ownership events of docs/trace.md, for :mod:`fdprof.analysis.ownership`.

Holders come from what vLLM *uses*: each request's block table (``KVCacheManager.
get_block_ids``, KV group 0), read after every KV-manager call that can change it
(``allocate_slots``, ``free``, ``pop_blocks_for_free``, ``remove_skipped_blocks``); blocks a
table gains are ``block_hold`` (``kv.gpu_hold``), blocks it loses ``block_release``
(``kv.gpu_release``), with ``fd.request_id``. They do not come from the pool's reference
counts, which are exactly what a lost or doubled reference corrupts.

The pool's own view comes from ``BlockPool``: ``get_new_blocks`` hands blocks out
(``block_alloc``, ``kv.gpu_alloc``: a new content generation), ``free_blocks`` leaves blocks
at count 0 (``block_free``, ``kv.gpu_unref``: content kept, revivable by a prefix hit until
handed out again) or below it (``kv.gpu_underflow``); evictions from the prefix cache are
``block_evict`` (``kv.blocks``). A free releases ``block:free`` (seq: the pool's count of
frees) and a hand-out acquires the frees that last freed its blocks.

Within a KV-manager call for a request, the pool's events are recorded after the request's
releases and before its holds (the call drops references, the pool reacts, the table gains
blocks), attributed to the request; elsewhere (deferred frees) at once, without one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fdprof import probe
from fdprof import semconv as S
from fdprof.adapters.vllm.hooks import ERRORS, wrap
from fdprof.probe import handles as H

#: the KV-manager calls that can change a request's table, and where each takes the request
KV_CALLS = {
    "allocate_slots": "request",
    "free": "request",
    "pop_blocks_for_free": "request",
    "remove_skipped_blocks": "request_id",
}


class PoolRecorder:
    """The KV manager's tables and the block pool's events, in the engine-core process."""

    def __init__(self, step: Callable[[], int] = lambda: 0) -> None:
        #: the engine's current step (its schedule calls so far): each event's ``fd.step``
        self._step = step
        #: request id -> the block ids (group 0) last recorded as held
        self.tables: dict[str, list[int]] = {}
        self._request = ""
        self._depth = 0
        #: pool events recorded inside a KV-manager call, emitted when it returns
        self._buffer: list[tuple] | None = None
        self._frees = 0
        #: (id(pool), block id) -> seq of the free call that last freed it
        self._last_free: dict[tuple[int, int], int] = {}
        self._evicted: list[int] = []

    def install(self) -> None:
        from vllm.v1.core.block_pool import BlockPool
        from vllm.v1.core.kv_cache_manager import KVCacheManager

        for method, arg in KV_CALLS.items():
            wrap(KVCacheManager, method, lambda original, m=method, a=arg: self._kv_call(
                original, m, a))  # fmt: skip
        wrap(BlockPool, "get_new_blocks", self._get_new_blocks)
        wrap(BlockPool, "free_blocks", self._free_blocks)
        wrap(BlockPool, "evict_blocks", self._evict_blocks)
        wrap(BlockPool, "_maybe_evict_cached_block", self._maybe_evict)

    # -- the KV manager: whose tables change ------------------------------------------------
    def _kv_call(self, original, method: str, arg: str):
        hook = f"KVCacheManager.{method}"

        def call(manager, *args, **kwargs):
            request = None
            with ERRORS.guard(hook):
                value = kwargs.get(arg, args[0] if args else None)
                request = value if isinstance(value, str) else value.request_id
                if self._depth == 0:
                    self._request, self._buffer = request, []
                self._depth += 1
            try:
                return original(manager, *args, **kwargs)
            finally:
                with ERRORS.guard(hook):
                    if request is not None:
                        self._depth -= 1
                        if self._depth == 0:
                            self._flush(manager, request)

        return call

    def _flush(self, manager, request: str) -> None:
        """The request's releases, the pool's events of the call, then its holds."""
        buffered, self._buffer, self._request = self._buffer or [], None, ""
        groups = manager.get_block_ids(request)
        now = [b for b in (groups[0] if groups else ()) if b != 0]  # 0: the null block
        before = self.tables.get(request, [])
        gained = [b for b in now if b not in set(before)]
        lost = [b for b in before if b not in set(now)]
        p = probe.get()
        if lost:
            self._record(p, (S.MODE_RELEASE, lost, request))
        for event in buffered:
            self._record(p, event)
        if gained:
            self._record(p, (S.MODE_HOLD, gained, request))
        if now:
            self.tables[request] = now
        else:
            self.tables.pop(request, None)

    # -- the pool ---------------------------------------------------------------------------
    def _emit(self, event: tuple) -> None:
        if self._buffer is not None:
            self._buffer.append(event)
        else:
            self._record(probe.get(), event)

    def _get_new_blocks(self, original):
        def get_new_blocks(pool, num_blocks, *args, **kwargs):
            with ERRORS.guard("BlockPool.get_new_blocks"):
                self._evicted = []
            blocks = original(pool, num_blocks, *args, **kwargs)
            with ERRORS.guard("BlockPool.get_new_blocks"):
                ids = [b.block_id for b in blocks]
                frees = {self._last_free.pop((id(pool), b), 0) for b in ids} - {0}
                self._emit((S.MODE_ALLOC, ids, self._request, sorted(frees), self._evicted))
                self._evicted = []
            return blocks

        return get_new_blocks

    def _free_blocks(self, original):
        def free_blocks(pool, ordered_blocks, *args, **kwargs):
            blocks = list(ordered_blocks)  # it may be a generator: read it once, pass it on
            original(pool, blocks, *args, **kwargs)
            with ERRORS.guard("BlockPool.free_blocks"):
                mine = {b.block_id: b for b in blocks
                        if not b.is_null and (b.pool is None or b.pool is pool)}  # fmt: skip
                unref = [i for i, b in mine.items() if b.ref_cnt == 0]
                under = [i for i, b in mine.items() if b.ref_cnt < 0]
                if unref or under:
                    self._frees += 1
                    for b in unref:
                        self._last_free[(id(pool), b)] = self._frees
                    self._emit((S.MODE_FREE, unref, self._request, under, self._frees))

        return free_blocks

    def _evict_blocks(self, original):
        def evict_blocks(pool, block_ids, *args, **kwargs):
            self._evicted = []
            original(pool, block_ids, *args, **kwargs)
            with ERRORS.guard("BlockPool.evict_blocks"):
                if self._evicted:
                    self._emit(("evict", self._evicted, self._request))
                self._evicted = []

        return evict_blocks

    def _maybe_evict(self, original):
        def maybe_evict(pool, block, *args, **kwargs):
            evicted = original(pool, block, *args, **kwargs)
            if evicted:
                self._evicted.append(block.block_id)
            return evicted

        return maybe_evict

    # -- recording ------------------------------------------------------------------------
    def _record(self, p: Any, event: tuple) -> None:
        kind, ids, request = event[:3]
        name, key = {
            S.MODE_ALLOC: (H.BLOCK_ALLOC, H.KV_GPU_ALLOC),
            S.MODE_FREE: (H.BLOCK_FREE, H.KV_GPU_UNREF),
            "evict": (H.BLOCK_EVICT, H.KV_BLOCKS),
            S.MODE_HOLD: (H.BLOCK_HOLD, H.KV_GPU_HOLD),
            S.MODE_RELEASE: (H.BLOCK_RELEASE, H.KV_GPU_RELEASE),
        }[kind]
        with p.span(name) as sid:
            p.set_str(sid, H.ROLE, S.ROLE_ENGINE)
            step = self._step()
            if step:
                p.set_int(sid, H.STEP_ID, step)
            if ids:
                p.set_ints(sid, key, ids)
            if request:
                p.set_str(sid, H.REQUEST_ID, request)
            if kind == S.MODE_ALLOC:
                for seq in event[3]:
                    p.acquire(H.BLOCK_FREE_OBJ, seq, sid)
                if event[4]:
                    with p.span(H.BLOCK_EVICT, sid) as evict:
                        p.set_str(evict, H.ROLE, S.ROLE_ENGINE)
                        p.set_ints(evict, H.KV_BLOCKS, event[4])
            elif kind == S.MODE_FREE:
                if event[3]:
                    p.set_ints(sid, H.KV_GPU_UNDERFLOW, event[3])
                p.release(H.BLOCK_FREE_OBJ, event[4], sid)
