"""The cache manager (engine process): device and host block accounting, the prefix cache, and the
swaps between pools, as in FastDeploy's PrefixCacheManager.

Evictions (device → host, :meth:`CacheManager.evict_once`) are issued from a background thread
the server runs; a request whose prefix is on the host is swapped back in with
``issue_swap_task(..., is_sync=True)`` from the scheduler thread before it is scheduled.

Cache Manager V1 (``cache_manager="v1"``, docs/engine.md): without the lock a swap-in is
issued and the request is scheduled at once (its forward waits per layer); a swap-out is
issued without waiting and finished when its completion is polled; overlap scheduling hands a
finishing request's own blocks to loads admitted while its last step still runs, each such
load fenced behind that step; under memory pressure the blocks a step fills are written back
as it is dispatched; a prefix's last blocks are evicted first (they are touched first). All
bookkeeping happens under one traced mutex, so every handoff of a block between the two threads
is a recorded edge. The transfer side is a :class:`SwapPort` and the baseline's lock a
:class:`HoldLock`, both handed in: no queue or process lives here, so unit tests drive the cache
manager with a port of their own. Seeded faults break exactly one rule each.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from fdprof import probe
from fdprof import semconv as S
from fdprof.engine.allocator import BlockAllocator
from fdprof.engine.config import EngineConfig
from fdprof.engine.ipc import SEQ_STRIDE, TracedMutex
from fdprof.engine.messages import Fingerprint, Piece, SwapTask
from fdprof.engine.prefix_cache import Entry, PrefixCache, block_hashes
from fdprof.engine.results import SwapStats
from fdprof.probe import handles as H
from fdprof.probe.context import format_traceparent, trace_id_for


@dataclass
class Admission:
    """What a request got: its block table, the cached entries it holds, how many leading tokens
    are already in the cache, and the cached blocks (with fingerprints) it will read."""

    table: list[int]
    entries: list[Entry]
    cached_tokens: int
    check_blocks: list[int] = field(default_factory=list)
    check_fps: list[Fingerprint] = field(default_factory=list)
    #: asynchronous swap-ins (task ids) that must complete before the request is scheduled
    pending: set[int] = field(default_factory=set)
    #: the last swap-in (task id) bringing blocks it reads; 0: none (the asynchronous engine's
    #: forward waits on its event)
    swap_in_task: int = 0


class SwapPort(Protocol):
    """The transfer side as the cache manager sees it: hand over a task, wait for it, or ask
    whether it is done. The server's port puts tasks on the transfer processes' queues and
    reads their completion signals; a unit test's port can complete them by hand."""

    def submit(self, task: SwapTask) -> None: ...

    def wait(self, task_id: int) -> None: ...

    def done(self, task_id: int) -> bool:
        """Whether the task has completed, without waiting."""
        ...


class HoldLock(Protocol):
    """The baseline's KV lock, held around a swap (``fdprof.engine.ipc``'s flock locks)."""

    def held(self, parent: int = 0) -> contextlib.AbstractContextManager[int]: ...


class TracedAllocator(BlockAllocator):
    """A pool's allocator whose hand-outs and frees are recorded: ``block_alloc`` and
    ``block_free`` spans listing the ids (``kv.gpu_alloc``, ``kv.gpu_free``, ...), so the hazards
    analysis checks every access against its block's lifetime. A block freed before its last
    reader is done is then seen even in a run where no one reused it in time."""

    def __init__(self, num_blocks: int, pool: str) -> None:
        super().__init__(num_blocks)
        on_gpu = pool == S.POOL_GPU
        self._alloc_key = H.KV_GPU_ALLOC if on_gpu else H.KV_CPU_ALLOC
        self._free_key = H.KV_GPU_FREE if on_gpu else H.KV_CPU_FREE

    def allocate(self, n: int) -> list[int]:
        if n == 0:
            return []
        p = probe.get()
        with p.span(H.BLOCK_ALLOC) as sid:
            ids = super().allocate(n)
            p.set_str(sid, H.ROLE, S.ROLE_CACHE_MANAGER)
            p.set_ints(sid, self._alloc_key, ids)
        return ids

    def free(self, ids: list[int]) -> None:
        if not ids:
            return
        p = probe.get()
        with p.span(H.BLOCK_FREE) as sid:
            super().free(ids)
            p.set_str(sid, H.ROLE, S.ROLE_CACHE_MANAGER)
            p.set_ints(sid, self._free_key, ids)


class CacheManager:
    def __init__(
        self, cfg: EngineConfig, rank: int, port: SwapPort, lock: HoldLock | None = None
    ) -> None:
        self.cfg = cfg
        self.rank = rank
        self.gpu = TracedAllocator(cfg.gpu_blocks, S.POOL_GPU)
        self.cpu = TracedAllocator(cfg.cpu_blocks, S.POOL_CPU)
        self.cache = PrefixCache()
        self.mutex = TracedMutex(f"kv_cache/dp{rank}")  # per process: seq-less objects pair by name
        self.stats = SwapStats()
        self._port = port
        self._lock = lock
        self._task_ids = itertools.count(rank * SEQ_STRIDE + 1)
        self._want_free = 0
        #: asynchronous swap-ins in flight: task id -> the entries it brings back
        self._loading: dict[int, list[Entry]] = {}
        #: stores in flight (``store_on_fill``): task id -> (device block, host block, hash)
        self._stores: dict[int, list[tuple[int, int, bytes]]] = {}
        #: hashes of blocks with a store in flight
        self._storing: set[bytes] = set()
        #: V1 overlap scheduling: what requests finishing in a step still in flight give back
        #: once its result is in (step sequence number -> [(entries, own blocks)]), and their
        #: own blocks a load may take meanwhile, fenced behind that step (block -> step)
        self._after_step: dict[int, list[tuple[list[Entry], list[int]]]] = {}
        self._reusable: dict[int, int] = {}
        #: V1 without the lock: swap-outs in flight, task id -> (entries, host blocks), and
        #: how many device blocks they will free
        self._evicting: dict[int, tuple[list[Entry], list[int]]] = {}
        self._evicting_blocks = 0
        #: host blocks the ``free-under-swap-in`` fault gave back early (count per id)
        self._freed_early: Counter[int] = Counter()

    # -- the swap itself -------------------------------------------------------------------
    def issue_swap_task(
        self,
        direction: str,
        gpu_blocks: list[int],
        cpu_blocks: list[int],
        fps: list[int],
        trace_id: bytes | None = None,
        parent: int = 0,
        is_sync: bool = True,
        after_step: int = 0,
        pieces: list[Piece] | None = None,
    ) -> int:
        """Hand a swap to the transfer side; with ``is_sync`` wait until it has completed (the
        baseline holds its lock from before the hand-over until then). A swap for a request
        joins its trace (``trace_id``); an eviction starts its own. Returns the task id."""
        p = probe.get()
        task_id = next(self._task_ids)
        if trace_id is None:
            trace_id = trace_id_for(self.cfg.seed, "swap", task_id)
        with p.span(H.ISSUE_SWAP_TASK, parent) as sid:
            if not parent:
                p.link_context(sid, format_traceparent(trace_id, 0))
            p.set_str(sid, H.ROLE, S.ROLE_CACHE_MANAGER)
            p.set_int(sid, H.SWAP_TASK_ID, task_id)
            p.set_str(sid, H.SWAP_DIRECTION, direction)
            p.set_int(sid, H.SWAP_BLOCKS, len(gpu_blocks))
            with self._lock.held(sid) if self._lock else contextlib.nullcontext():
                task = SwapTask(
                    task_id,
                    direction,
                    gpu_blocks,
                    cpu_blocks,
                    fps,
                    p.traceparent(sid, trace_id),
                    after_step,
                    pieces or [],
                )
                self._port.submit(task)
                if direction == S.TO_GPU and self.cfg.fault == S.Fault.FREE_UNDER_SWAP_IN:
                    with self.mutex:  # the fault: the host blocks are free while being read
                        self.cpu.free(cpu_blocks)
                        self._freed_early.update(cpu_blocks)
                if is_sync:
                    self._port.wait(task_id)
        if direction == S.TO_CPU:
            self.stats.to_cpu += 1
        else:
            self.stats.to_gpu += 1
        self.stats.blocks += len(gpu_blocks)
        return task_id

    # -- admission (scheduler thread) -----------------------------------------------------
    def admit(
        self, prompt: list[int], blocks_needed: int, trace_id: bytes, parent: int
    ) -> Admission | None:
        """Blocks for a new request, reusing cached prefix blocks (swapping host ones back in);
        None when the device pool has no room now. A synchronous swap-in has completed when
        this returns; an asynchronous one is in :attr:`Admission.pending` until
        :meth:`poll_loads` sees it done (:meth:`ready`)."""
        bs, v1 = self.cfg.block_size, self.cfg.v1
        hashes = block_hashes(prompt, bs, limit=(len(prompt) - 1) // bs)
        with self.mutex:
            matched = self.cache.match(hashes)
            resident = sum(1 for e in matched if e.gpu is not None or e.swapping_in)
            # V1 without the lock: loads take blocks a finishing request gives back only when
            # the free list is short (their copy waits for its last step; under the lock, which
            # the cache manager holds until a swap has completed, that wait could deadlock
            # with the worker waiting for the lock to run that very step)
            short = max(0, blocks_needed - resident - self.gpu.num_free)
            reusable = self._reusable if not self.cfg.locked else {}
            reused = list(reusable)[: min(short, len(matched) - resident)]
            new = blocks_needed - resident - len(reused)
            if self.gpu.num_free < new:
                return None
            fence = max((self._reusable.pop(b) for b in reused), default=0)
            destinations = iter(reused + self.gpu.allocate(new))  # loads take reused ones first
            table, swap_in, pending, waits = [], [], set(), 0
            for e in matched:
                if self.cfg.fault != S.Fault.LOST_REF_ON_HIT:  # the fault: the hit holds none
                    e.ref += 1
                if e.gpu is not None:
                    table.append(e.gpu)
                elif e.swapping_in:  # another request's asynchronous swap-in: wait for it too
                    table.append(e.loading_to)
                    if not v1:  # (V1: the forward waits for it layer by layer)
                        pending.add(e.loading_task)
                    waits = max(waits, e.loading_task)
                else:
                    e.swapping_in, e.loading_to = True, next(destinations)
                    swap_in.append(e)
                    table.append(e.loading_to)
            fresh = destinations
            self._touch(matched)
            table.extend(fresh)
        if swap_in:
            skip_wait = self.cfg.fault == S.Fault.NO_WAIT_SWAP_IN
            # V1: asynchronous unless the lock is held until the swap has completed
            is_sync = self.cfg.locked if v1 else self.cfg.swap_in == S.SwapIn.SYNC and not skip_wait
            dst = [e.loading_to for e in swap_in]
            task = self.issue_swap_task(
                S.TO_GPU,
                dst,
                [e.cpu for e in swap_in],
                [e.fp for e in swap_in],
                trace_id,
                parent,
                is_sync=is_sync,
                after_step=fence,
                pieces=self._load_pieces(table, matched, swap_in) if v1 else None,
            )
            if not skip_wait:  # the fault forgets the swap-in altogether
                waits = max(waits, task)
            if is_sync or skip_wait:
                self._loaded(swap_in)
            else:
                for e in swap_in:
                    e.loading_task = task
                self._loading[task] = swap_in
                if not v1:
                    pending.add(task)
        return Admission(
            table,
            matched,
            len(matched) * bs,
            table[: len(matched)],
            [e.fp for e in matched],
            pending,
            waits,
        )

    def _touch(self, entries: list[Entry]) -> None:
        """Mark ``entries`` (a request's blocks, in token order) used now; V1 touches the last
        first, so a prefix's tail is evicted before its head (vLLM's free-queue order): the
        leading blocks every sharer reads first stay on the device."""
        for e in reversed(entries) if self.cfg.v1 else entries:
            self.cache.touch(e)

    def _load_pieces(self, table: list[int], matched: list[Entry], loads: list[Entry]):
        """V1: a load as pieces split at transfer-chunk boundaries of the request's tokens
        (``(host block, host token, device block, device token, tokens)``). The
        shared-prefix-streams fault places them from the chunk boundary at or before the first
        loaded block instead of from that block (LMCache's bug; its fix passes the tokens the
        engine already holds): with a chunk that is not a whole number of blocks they land
        shifted, partly in the block before, which another request holds and reads."""
        bs, chunk = self.cfg.block_size, self.cfg.chunk
        where = {id(e): i for i, e in enumerate(matched)}
        first = min(where[id(e)] for e in loads)
        shift = first * bs % chunk if self.cfg.fault == S.Fault.SHARED_PREFIX_STREAMS else 0
        pieces: list[Piece] = []
        for e in loads:
            start = where[id(e)] * bs
            pos, end = start, start + bs
            while pos < end:
                dst = pos - shift
                n = min(end, (pos // chunk + 1) * chunk, pos + bs - dst % bs) - pos
                pieces.append((e.cpu, pos - start, table[dst // bs], dst % bs, n))
                pos += n
        return pieces

    def release_after(self, step_seq: int, entries: list[Entry], own: list[int]) -> None:
        """V1 overlap scheduling: a request finishes in step ``step_seq``, dispatched now. Its
        references and own blocks are given back once that step's result is in
        (:meth:`step_done`); meanwhile a load may take its own blocks (:meth:`admit`), its copy
        fenced behind the step (``SwapTask.after_step``: the transfer's input stream waits for
        the step's compute-done event), as SGLang fences a load behind the forward stream."""
        self._after_step.setdefault(step_seq, []).append((entries, own))
        self._reusable.update(dict.fromkeys(own, step_seq))

    def step_done(self, step_seq: int) -> None:
        """Step ``step_seq``'s result is in: give back what requests finishing in it (or
        before) released, except the blocks loads took (theirs now)."""
        for step in sorted(s for s in self._after_step if s <= step_seq):
            for entries, own in self._after_step.pop(step):
                kept = [b for b in own if self._reusable.pop(b, None) is not None]
                self.release(entries, kept)

    def _loaded(self, entries: list[Entry]) -> None:
        """Swapped-in entries are on the device now; their host copies are dropped."""
        with self.mutex:
            for e in entries:
                if self._freed_early[e.cpu]:  # the free-under-swap-in fault freed it already
                    self._freed_early[e.cpu] -= 1
                else:
                    self.cpu.free([e.cpu])
                e.cpu, e.gpu, e.swapping_in = None, e.loading_to, False

    @property
    def loads_in_flight(self) -> bool:
        return bool(self._loading)

    def poll_loads(self) -> None:
        """Finish every asynchronous swap-in the transfer side has completed (no waiting)."""
        for task in [t for t in self._loading if self._port.done(t)]:
            self._loaded(self._loading.pop(task))

    def ready(self, adm: Admission) -> bool:
        """Whether every swap-in the admission waits for has completed (see poll_loads)."""
        return not any(t in self._loading for t in adm.pending)

    def register_filled(self, hashes: list[bytes], blocks: list[int], fps: list[int]) -> list:
        """Cache blocks a request has just filled; returns the entries it now holds. A block
        whose store is still in flight stays on the device until it completes."""
        held = []
        with self.mutex:
            for h, b, fp in zip(hashes, blocks, fps, strict=True):
                e = self.cache.insert(h, b, fp)
                if e is not None:
                    e.swapping_out = h in self._storing
                    held.append(e)
            self._touch(held)
        return held

    # -- write-through stores (``store_on_fill``, scheduler thread) -------------------------
    def store_filled(self, step_seq: int, blocks: list[int], hashes: list[bytes]) -> None:
        """Store the blocks step ``step_seq`` fills (hashes not cached yet) to the host pool,
        issued as the step is dispatched: the copy waits for the step's compute-done event
        before it reads, so nothing on the host orders it after the kernel."""
        with self.mutex:
            todo, seen = [], set(self._storing)
            for b, h in zip(blocks, hashes, strict=True):
                if self.cache.get(h) is None and h not in seen:
                    seen.add(h)
                    todo.append((b, h))
            todo = todo[: max(0, self.cpu.num_free - self.cfg.swap_batch)]  # room for evictions
            if not todo:
                return
            dsts = self.cpu.allocate(len(todo))
            self._storing.update(h for _, h in todo)
        gpu = [b for b, _ in todo]
        task = self.issue_swap_task(S.TO_CPU, gpu, dsts, [], is_sync=False, after_step=step_seq)
        self._stores[task] = [(b, c, h) for (b, h), c in zip(todo, dsts, strict=True)]

    @property
    def writes_back(self) -> bool:
        """V1 without the lock under memory pressure (eviction is behind what the scheduler
        wants free): the blocks each step fills are stored as it is dispatched, so evicting
        them later only drops the device copy."""
        return self.cfg.v1 and not self.cfg.locked and self._want_free > self.gpu.num_free

    @property
    def storing(self) -> bool:
        return bool(self._stores)

    def poll_stores(self) -> None:
        """Finish the stores that have completed: the entry (registered from the step's result
        by now) keeps the host copy; a block that was not cached gives its host block back."""
        for task in [t for t in self._stores if self._port.done(t)]:
            with self.mutex:
                for gpu, cpu, h in self._stores.pop(task):
                    self._storing.discard(h)
                    e = self.cache.get(h)  # cached while the store ran: this store's entry
                    if e is not None and e.swapping_out and e.gpu == gpu and e.cpu is None:
                        e.cpu = cpu
                    else:
                        self.cpu.free([cpu])
                    if e is not None:
                        e.swapping_out = False

    def release(self, entries: list[Entry], private: list[int]) -> None:
        """A request finished: drop its references and free its uncached blocks."""
        with self.mutex:
            for e in entries:
                # the lost-ref-on-hit fault never took the hit's reference: it drops none below
                # zero either, so the cache does not leak blocks, only frees them too early
                e.ref = (
                    max(e.ref - 1, 0) if self.cfg.fault == S.Fault.LOST_REF_ON_HIT else e.ref - 1
                )
            self.gpu.free(private)

    # -- eviction (a background thread of the server's calls these) ------------------------
    def want_free(self, n: int) -> None:
        """Keep ``n`` device blocks free: :meth:`evict_once` swaps out until they are."""
        self._want_free = n

    @property
    def wanted(self) -> int:
        return self._want_free

    def evict_once(self, room_made: Callable[[], None] | None = None) -> bool:
        """One swap-out of up to ``swap_batch`` blocks; False when nothing (more) is needed. V1
        without the lock issues it without waiting (:meth:`poll_evictions` finishes it).
        ``room_made`` is told when blocks return to the free list before their copy: only the
        free-before-swap-out fault does that, and a scheduler waiting for room then takes them
        at once, as FastDeploy's scheduler sees free ids as soon as they are freed."""
        free_early = self.cfg.fault == S.Fault.FREE_BEFORE_SWAP_OUT
        no_wait = self.cfg.v1 and not self.cfg.locked
        with self.mutex:
            deficit = self._want_free - self.gpu.num_free - self._evicting_blocks
            victims = self.cache.evictable(min(deficit, self.cfg.swap_batch))
            if deficit <= 0 or not victims:
                return False
            for e in [e for e in victims if e.cpu is not None]:
                self.gpu.free([e.gpu])
                e.gpu = None
            victims = [e for e in victims if e.cpu is None]
            for e in self.cache.host_victims(max(0, len(victims) - self.cpu.num_free)):
                self.cpu.free([e.cpu])
                e.cpu = None
                self.cache.drop_if_empty(e)
            victims = victims[: self.cpu.num_free]
            if not victims:
                return True
            srcs = [e.gpu for e in victims]
            dsts = self.cpu.allocate(len(victims))
            for e in victims:
                e.swapping_out = True
            if free_early:
                self.gpu.free(srcs)
                for e in victims:
                    e.gpu = None
        if free_early and room_made is not None:
            room_made()
        task = self.issue_swap_task(S.TO_CPU, srcs, dsts, [e.fp for e in victims],
                                    is_sync=not no_wait)  # fmt: skip
        if no_wait:
            self._evicting[task] = (victims, dsts)
            self._evicting_blocks += len(victims)
        else:
            self._evicted(victims, dsts, free_early)
        return True

    @property
    def evicting(self) -> bool:
        """V1: swap-outs are in flight (the eviction thread polls them)."""
        return bool(self._evicting)

    def poll_evictions(self) -> None:
        """V1: finish every swap-out the transfer side has completed (no waiting)."""
        for task in [t for t in self._evicting if self._port.done(t)]:
            victims, dsts = self._evicting.pop(task)
            self._evicting_blocks -= len(victims)
            self._evicted(victims, dsts, False)

    def _evicted(self, victims: list[Entry], dsts: list[int], freed: bool) -> None:
        """Swapped-out entries are on the host now; a device block no request holds is freed
        (not again where the fault freed it early), one matched meanwhile stays."""
        with self.mutex:
            for e, dst in zip(victims, dsts, strict=True):
                e.cpu, e.swapping_out = dst, False
                if not freed and e.ref == 0:
                    self.gpu.free([e.gpu])
                    e.gpu = None
