"""The worker process: owns the device KV pool and runs ``execute_model`` on each batch.

It checks the cached blocks a sequence reads for the first time against their fingerprints and
reports the fingerprints of the blocks it fills. In the baseline it holds the KV lock around
``execute_model``, as FastDeploy's worker did.
"""

from __future__ import annotations

import contextlib

import torch

from engine import instrument as I
from engine.integrity import IntegrityStats, fingerprints
from engine.ipc import KvLock, recv
from engine.kv_pool import map_pool, resolve_device
from engine.messages import Batch, StepResult
from engine.model import Decoder, SeqInput
from engine.process import ProcessContext
from engine.results import WorkerStats
from fdprof import probe
from fdprof import semconv as S


def _device_pool(ctx: ProcessContext, device: str) -> torch.Tensor:
    """The device pool, and tell the transfer process where it is."""
    if device == "cuda":
        pool = torch.zeros(ctx.cfg.kv_shape(ctx.cfg.gpu_blocks), device="cuda")
        ctx.setup_q.put(("cuda", pool))  # shared over CUDA IPC by torch's reductions
        return pool
    ctx.setup_q.put(("cpu", None))
    return map_pool(ctx.paths.gpu_pool(ctx.rank), ctx.cfg, ctx.cfg.gpu_blocks)


class Worker:
    def __init__(self, ctx: ProcessContext, device: str) -> None:
        self.cfg = ctx.cfg
        self.device = device
        self.pool = _device_pool(ctx, device)
        self.model = Decoder(ctx.cfg, device)
        self.integrity = IntegrityStats()

    @torch.inference_mode()
    def execute_model(self, batch: Batch) -> StepResult:
        p = probe.get()
        bs = self.cfg.block_size
        reads: set[int] = set()
        writes: set[int] = set()
        filled: list[int] = []
        check_blocks, check_fps = [], []
        seqs = []
        for s in batch.seqs:
            end = s.start + len(s.tokens)
            reads.update(s.block_table[: -(-end // bs)])
            for pos in range(s.start, end):
                writes.add(s.block_table[pos // bs])
                if (pos + 1) % bs == 0:
                    filled.append(s.block_table[pos // bs])
            check_blocks += s.check_blocks
            check_fps += s.check_fps
            seqs.append(SeqInput(s.tokens, s.start, s.block_table))
        with p.span(I.EXECUTE_MODEL) as sid:
            p.set_int(sid, I.STEP_ID, batch.step)
            p.set_int(sid, I.BATCH_SIZE, len(seqs))
            p.set_int(sid, I.BATCH_TOKENS, sum(len(s.tokens) for s in seqs))
            p.set_ints(sid, I.GPU_READ, sorted(reads))
            p.set_ints(sid, I.GPU_WRITE, sorted(writes))
            for s in batch.seqs:
                p.link_context(sid, s.traceparent, link=True)
            bad = self.integrity.check(self.pool, check_blocks, check_fps)
            if bad:
                p.set_ints(sid, I.MISMATCHES, bad)
            logits = self.model.forward_paged(self.pool, seqs)
            next_tokens = logits.argmax(-1).tolist()
            fps = fingerprints(self.pool, filled)
        return StepResult(batch.step, batch.seq, next_tokens, dict(zip(filled, fps, strict=True)))


def serve(ctx: ProcessContext) -> WorkerStats:
    torch.set_num_threads(1)
    device = resolve_device(ctx.cfg.device)
    worker = Worker(ctx, device)
    lock = KvLock(ctx.paths, ctx.rank, S.ROLE_WORKER) if ctx.cfg.kv_lock == "ipc" else None
    control = ctx.control
    p = probe.get()
    p.name_thread("worker")
    ctx.report("ready", "worker", {"device": device})
    while (batch := recv(ctx.batch_q, control)) is not None:
        p.acquire(I.QUEUE_BATCH, batch.seq)
        with lock.held() if lock else contextlib.nullcontext():
            result = worker.execute_model(batch)
        p.release(I.QUEUE_RESULT, result.seq)
        ctx.result_q.put(result)
    return WorkerStats(worker.integrity, device)
