"""The cache transfer process of one TP rank, as FastDeploy's ``cache_transfer_manager``.

It creates and owns the rank's device KV cache (a /dev/shm file on the CPU, device memory shared
over CUDA IPC on a GPU) and hands it to the worker, which attaches: FastDeploy moved cache
creation there (PR #6144). Swap tasks run on two single-thread executors, one per direction
(SWAP2CPU, SWAP2GPU), so a swap-out and a swap-in can be in flight at once. A copy merges runs
of consecutive blocks into one call that covers all layers (``swap_cache_all_layers``), on the
direction's own stream on CUDA, synchronised before completion is signalled; every copy is
checked against the fingerprints the task carries.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from engine import instrument as I
from engine.integrity import IntegrityChecker
from engine.ipc import SwapSignal, create_shm_file, recv
from engine.kv_pool import host_pool, map_pool, resolve_device
from engine.messages import SwapTask, tp_seq
from engine.process import ProcessContext
from engine.results import IntegrityStats, WorkerStats
from fdprof import probe
from fdprof import semconv as S


def block_runs(src: list[int], dst: list[int]) -> list[tuple[int, int, int]]:
    """``(src_start, dst_start, count)`` runs of pairs consecutive on both sides, in order."""
    runs: list[tuple[int, int, int]] = []
    for s, d in zip(src, dst, strict=True):
        if runs and s == runs[-1][0] + runs[-1][2] and d == runs[-1][1] + runs[-1][2]:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((s, d, 1))
    return runs


def create_device_cache(ctx: ProcessContext, device: str) -> torch.Tensor:
    """This rank's device pool, made here and handed to the worker through ``setup_q``."""
    shape = ctx.cfg.kv_shape(ctx.cfg.gpu_blocks)
    if device == "cuda":
        pool = torch.zeros(shape, device="cuda")
        ctx.setup_q.put(("cuda", pool))  # shared over CUDA IPC by torch's reductions
        return pool
    path = ctx.paths.gpu_pool(ctx.rank, ctx.tp_rank)
    create_shm_file(path, ctx.cfg.pool_bytes(ctx.cfg.gpu_blocks))
    ctx.setup_q.put(("cpu", str(path)))
    return map_pool(path, ctx.cfg, ctx.cfg.gpu_blocks)


class Transfer:
    def __init__(self, ctx: ProcessContext, device: str, dev_pool: torch.Tensor) -> None:
        self.cfg = ctx.cfg
        self.tp_rank = ctx.tp_rank
        self.dev = dev_pool
        self.host = host_pool(ctx.cfg, device)
        self.signal = SwapSignal(ctx.paths.signal(ctx.rank, ctx.tp_rank))
        cuda = device == "cuda"
        #: per direction: its executor (one thread: tasks of a direction run in order), its
        #: stream, and its integrity counts (each touched by that thread only)
        self.executors = {
            d: ThreadPoolExecutor(1, f"swap_{d}", initializer=probe.get().name_thread,
                                  initargs=(f"swap_{d}",))
            for d in (S.TO_CPU, S.TO_GPU)
        }  # fmt: skip
        self.streams = {d: torch.cuda.Stream() if cuda else None for d in self.executors}
        self.integrity = {d: IntegrityChecker() for d in self.executors}

    def submit(self, task: SwapTask) -> Future:
        return self.executors[task.direction].submit(self.swap, task)

    def close(self) -> IntegrityStats:
        for ex in self.executors.values():
            ex.shutdown(wait=True)
        return IntegrityStats.total(c.stats for c in self.integrity.values())

    def _copy(self, direction: str, src: torch.Tensor, dst: torch.Tensor, s_ids, d_ids) -> None:
        """Merged runs, all layers per call, no faster than the configured link."""
        stream = self.streams[direction]
        t0 = time.monotonic()
        with torch.cuda.stream(stream) if stream is not None else torch.inference_mode():
            for s, d, n in block_runs(s_ids, d_ids):
                dst[:, :, d : d + n].copy_(src[:, :, s : s + n], non_blocking=stream is not None)
        if stream is not None:
            stream.synchronize()
        if self.cfg.link_gbps > 0:
            link_s = len(s_ids) * self.cfg.pool_bytes(1) / (self.cfg.link_gbps * 1e9)
            time.sleep(max(0.0, t0 + link_s - time.monotonic()))

    def swap(self, task: SwapTask) -> None:
        p = probe.get()
        seq = tp_seq(task.task_id, self.tp_rank)
        p.acquire(I.QUEUE_SWAP, seq)
        early_ack = self.cfg.fault == "ack-before-copy"
        if early_ack:
            self.signal.set(seq)
        with p.span(I.SWAP) as sid:
            p.link_context(sid, task.traceparent)
            p.set_str(sid, I.ROLE, S.ROLE_TRANSFER)
            p.set_int(sid, I.TASK_ID, task.task_id)
            p.set_str(sid, I.DIRECTION, task.direction)
            p.set_int(sid, I.BLOCKS, len(task.gpu_blocks))
            if task.direction == S.TO_CPU:
                read_key, src, read = I.GPU_READ, self.dev, task.gpu_blocks
                write_key, dst, written = I.CPU_WRITE, self.host, task.cpu_blocks
            else:
                read_key, src, read = I.CPU_READ, self.host, task.cpu_blocks
                write_key, dst, written = I.GPU_WRITE, self.dev, task.gpu_blocks
            p.set_ints(sid, read_key, read)
            p.set_ints(sid, write_key, written)
            if self.cfg.copy_delay_s:
                time.sleep(self.cfg.copy_delay_s)
            self._copy(task.direction, src, dst, read, written)
            expected = [fp[self.tp_rank] for fp in task.fps]
            bad = self.integrity[task.direction].check(dst, written, expected)
            if bad:
                p.set_ints(sid, I.MISMATCHES, bad)
        if not early_ack:
            self.signal.set(seq)


def serve(ctx: ProcessContext) -> WorkerStats:
    torch.set_num_threads(1)
    device = resolve_device(ctx.cfg.device)
    transfer = Transfer(ctx, device, create_device_cache(ctx, device))
    p = probe.get()
    p.name_thread("transfer")
    ctx.report("ready", "transfer", {"device": device, "kv_cache": "owner"})
    pending: list[Future] = []
    try:
        while (task := recv(ctx.swap_q, ctx.control)) is not None:
            for f in [f for f in pending if f.done()]:
                f.result()  # a failed copy raises here
            pending = [f for f in pending if not f.done()]
            pending.append(transfer.submit(task))
        for f in pending:
            f.result()  # a failed copy raises here
    finally:
        integrity = transfer.close()
    return WorkerStats(integrity, device)
