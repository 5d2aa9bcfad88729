"""The cache manager (engine process): device and host block accounting, the prefix cache, and the
swaps between pools, as in FastDeploy's PrefixCacheManager.

Evictions (device → host) are issued from a background thread; a request whose prefix is on the
host is swapped back in with ``issue_swap_task(..., is_sync=True)`` from the scheduler thread
before it is scheduled. All bookkeeping happens under one traced mutex, so every handoff of a
block between the two threads is a recorded edge. Seeded faults break exactly one rule each.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from engine import instrument as I
from engine.allocator import BlockAllocator
from engine.config import EngineConfig
from engine.ipc import SEQ_STRIDE, Control, KvLock, RunPaths, Stopped, SwapSignal, TracedMutex
from engine.messages import SwapTask
from engine.prefix_cache import Entry, PrefixCache, block_hashes
from fdprof import probe
from fdprof import semconv as S
from fdprof.probe.context import format_traceparent, trace_id_for


@dataclass
class Admission:
    """What a request got: its block table, the cached entries it holds, how many leading tokens
    are already in the cache, and the cached blocks (with fingerprints) it will read."""

    table: list[int]
    entries: list[Entry]
    cached_tokens: int
    check_blocks: list[int] = field(default_factory=list)
    check_fps: list[int] = field(default_factory=list)


@dataclass
class SwapStats:
    to_cpu: int = 0
    to_gpu: int = 0
    blocks: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"to_cpu": self.to_cpu, "to_gpu": self.to_gpu, "blocks": self.blocks}


class CacheManager:
    def __init__(
        self, cfg: EngineConfig, rank: int, paths: RunPaths, swap_q, control: Control
    ) -> None:
        self.cfg = cfg
        self.rank = rank
        self.gpu = BlockAllocator(cfg.gpu_blocks)
        self.cpu = BlockAllocator(cfg.cpu_blocks)
        self.cache = PrefixCache()
        self.mutex = TracedMutex(f"kv_cache/dp{rank}")  # per process: seq-less objects pair by name
        self.stats = SwapStats()
        self._paths = paths
        self._swap_q = swap_q
        self._signal = SwapSignal(paths.signal(rank))
        self._control = control
        self._task_ids = itertools.count(rank * SEQ_STRIDE + 1)
        self._locks = threading.local()
        self._want_free = 0
        self._wake = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._evict_loop, name="swap_out", daemon=True)
        self.error: BaseException | None = None

    # -- the swap itself -------------------------------------------------------------------
    @contextlib.contextmanager
    def _kv_lock(self, parent: int) -> Iterator[None]:
        """The baseline's lock, held from the start of a swap task until it completed."""
        if self.cfg.kv_lock != "ipc":
            yield
            return
        lock = getattr(self._locks, "lock", None)
        if lock is None:
            lock = self._locks.lock = KvLock(self._paths, self.rank, S.ROLE_CACHE_MANAGER)
        with lock.held(parent):
            yield

    def issue_swap_task(
        self,
        direction: str,
        gpu_blocks: list[int],
        cpu_blocks: list[int],
        fps: list[int],
        trace_id: bytes | None = None,
        parent: int = 0,
        is_sync: bool = True,
    ) -> None:
        """Hand a swap to the transfer process; with ``is_sync`` wait until it has completed.
        A swap for a request joins its trace (``trace_id``); an eviction starts its own."""
        p = probe.get()
        task_id = next(self._task_ids)
        if trace_id is None:
            trace_id = trace_id_for(self.cfg.seed, "swap", task_id)
        with p.span(I.ISSUE_SWAP_TASK, parent) as sid:
            if not parent:
                p.link_context(sid, format_traceparent(trace_id, 0))
            p.set_str(sid, I.ROLE, S.ROLE_CACHE_MANAGER)
            p.set_int(sid, I.TASK_ID, task_id)
            p.set_str(sid, I.DIRECTION, direction)
            p.set_int(sid, I.BLOCKS, len(gpu_blocks))
            with self._kv_lock(sid):
                task = SwapTask(
                    task_id, direction, gpu_blocks, cpu_blocks, fps, p.traceparent(sid, trace_id)
                )
                p.release(I.QUEUE_SWAP, task_id)
                self._swap_q.put(task)
                if is_sync:
                    self._signal.wait(task_id, self._control)
        if direction == S.TO_CPU:
            self.stats.to_cpu += 1
        else:
            self.stats.to_gpu += 1
        self.stats.blocks += len(gpu_blocks)

    # -- admission (scheduler thread) -----------------------------------------------------
    def admit(
        self, prompt: list[int], blocks_needed: int, trace_id: bytes, parent: int
    ) -> Admission | None:
        """Blocks for a new request, reusing cached prefix blocks (swapping host ones back in);
        None when the device pool has no room now."""
        bs = self.cfg.block_size
        hashes = block_hashes(prompt, bs, limit=(len(prompt) - 1) // bs)
        with self.mutex:
            matched = self.cache.match(hashes)
            on_gpu = sum(1 for e in matched if e.gpu is not None)
            if self.gpu.num_free < blocks_needed - on_gpu:
                return None
            fresh = self.gpu.allocate(blocks_needed - on_gpu)
            table, swap_in = [], []
            for e in matched:
                e.ref += 1
                self.cache.touch(e)
                if e.gpu is None:
                    e.swapping_in = True
                    swap_in.append((e, fresh.pop()))
                    table.append(swap_in[-1][1])
                else:
                    table.append(e.gpu)
            table.extend(fresh)
        if swap_in:
            self.issue_swap_task(
                S.TO_GPU,
                [dst for _, dst in swap_in],
                [e.cpu for e, _ in swap_in],
                [e.fp for e, _ in swap_in],
                trace_id,
                parent,
                is_sync=self.cfg.fault != "no-wait-swap-in",
            )
            with self.mutex:
                for e, dst in swap_in:
                    self.cpu.free([e.cpu])
                    e.cpu, e.gpu, e.swapping_in = None, dst, False
        return Admission(
            table,
            matched,
            len(matched) * bs,
            table[: len(matched)],
            [e.fp for e in matched],
        )

    def register_filled(self, hashes: list[bytes], blocks: list[int], fps: list[int]) -> list:
        """Cache blocks a request has just filled; returns the entries it now holds."""
        held = []
        with self.mutex:
            for h, b, fp in zip(hashes, blocks, fps, strict=True):
                e = self.cache.insert(h, b, fp)
                if e is not None:
                    held.append(e)
        return held

    def release(self, entries: list[Entry], private: list[int]) -> None:
        """A request finished: drop its references and free its uncached blocks."""
        with self.mutex:
            for e in entries:
                e.ref -= 1
            self.gpu.free(private)

    # -- eviction (background thread) -----------------------------------------------------
    def want_free(self, n: int) -> None:
        """Ask the background thread to keep ``n`` device blocks free (by swapping out)."""
        self._want_free = n
        self._wake.set()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._wake.set()
        self._thread.join()
        if self.error is not None:
            raise self.error

    def _evict_loop(self) -> None:
        probe.get().name_thread("swap_out")
        try:
            while not self._done.is_set():
                self._wake.wait(0.05)
                self._wake.clear()
                while not self._done.is_set() and self._evict_once():
                    pass
        except Stopped:
            pass
        except BaseException as exc:  # surfaced by stop() in the scheduler thread
            self.error = exc

    def _evict_once(self) -> bool:
        """One swap-out of up to ``swap_batch`` blocks; False when nothing (more) is needed."""
        free_early = self.cfg.fault == "free-before-swap-out"
        with self.mutex:
            deficit = self._want_free - self.gpu.num_free
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
        self.issue_swap_task(S.TO_CPU, srcs, dsts, [e.fp for e in victims])
        with self.mutex:
            for e, dst in zip(victims, dsts, strict=True):
                e.cpu, e.swapping_out = dst, False
                if not free_early and e.ref == 0:
                    self.gpu.free([e.gpu])
                    e.gpu = None
        return True
