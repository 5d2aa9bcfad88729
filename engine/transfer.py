"""The cache transfer process: executes swap tasks in order, block by block and layer by layer,
between the device pool (shared with the worker) and its own host pool, checking every copy
against the fingerprints the task carries. On CUDA the copies run on a side stream into pinned
host memory and the stream is synchronised before completion is signalled."""

from __future__ import annotations

import time

import torch

from engine import instrument as I
from engine.integrity import IntegrityStats
from engine.ipc import SwapSignal, recv
from engine.kv_pool import host_pool, map_pool
from engine.messages import SwapTask
from engine.process import ProcessContext
from engine.results import WorkerStats
from fdprof import probe
from fdprof import semconv as S


class Transfer:
    def __init__(self, ctx: ProcessContext, device: str, dev_pool: torch.Tensor) -> None:
        self.cfg = ctx.cfg
        self.device = device
        self.dev = dev_pool
        self.host = host_pool(ctx.cfg, device)
        self.stream = torch.cuda.Stream() if device == "cuda" else None
        self.integrity = IntegrityStats()

    def _copy(self, src: torch.Tensor, dst: torch.Tensor, pairs: list[tuple[int, int]]) -> None:
        """Copy block by block, layer by layer, no faster than the configured link."""
        cuda = self.stream is not None
        t0 = time.monotonic()
        with torch.cuda.stream(self.stream) if cuda else torch.inference_mode():
            for s, d in pairs:
                for layer in range(self.cfg.layers):
                    dst[layer, :, d].copy_(src[layer, :, s], non_blocking=cuda)
        if cuda:
            self.stream.synchronize()
        if self.cfg.link_gbps > 0:
            link_s = len(pairs) * self.cfg.pool_bytes(1) / (self.cfg.link_gbps * 1e9)
            time.sleep(max(0.0, t0 + link_s - time.monotonic()))

    def swap(self, task: SwapTask, signal: SwapSignal) -> None:
        p = probe.get()
        early_ack = self.cfg.fault == "ack-before-copy"
        if early_ack:
            signal.set(task.task_id)
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
            self._copy(src, dst, list(zip(read, written, strict=True)))
            bad = self.integrity.check(dst, written, task.fps)
            if bad:
                p.set_ints(sid, I.MISMATCHES, bad)
        if not early_ack:
            signal.set(task.task_id)


def serve(ctx: ProcessContext) -> WorkerStats:
    torch.set_num_threads(1)
    control = ctx.control
    device, pool = recv(ctx.setup_q, control)
    if pool is None:
        pool = map_pool(ctx.paths.gpu_pool(ctx.rank), ctx.cfg, ctx.cfg.gpu_blocks)
    transfer = Transfer(ctx, device, pool)
    signal = SwapSignal(ctx.paths.signal(ctx.rank))
    p = probe.get()
    p.name_thread("transfer")
    ctx.report("ready", "transfer")
    while (task := recv(ctx.swap_q, control)) is not None:
        p.acquire(I.QUEUE_SWAP, task.task_id)
        transfer.swap(task, signal)
    return WorkerStats(transfer.integrity)
