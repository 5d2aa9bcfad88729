"""The worker process of one TP rank: attaches to the device KV cache its transfer process made
and runs ``execute_model`` on each batch.

It checks the cached blocks a sequence reads for the first time against their fingerprints and
reports the fingerprints of the blocks it fills (its shard's). In the baseline it holds the KV
lock around ``execute_model`` on TP rank 0 only, as FastDeploy's worker does
(``_acquire_kvcache_lock(tp_rank)``); the other ranks follow through the collectives.
"""

from __future__ import annotations

import contextlib

import torch

from engine import instrument as I
from engine.collectives import Collective
from engine.integrity import IntegrityChecker, fingerprints
from engine.ipc import KvLock, recv
from engine.kv_pool import map_pool
from engine.messages import Batch, StepResult, tp_seq
from engine.model import Decoder, SeqInput
from engine.process import ProcessContext
from engine.results import WorkerStats
from fdprof import probe
from fdprof import semconv as S


def attach_device_cache(ctx: ProcessContext) -> tuple[str, torch.Tensor]:
    """The device and the device pool the transfer process created (it says where)."""
    device, where = recv(ctx.setup_q, ctx.control)
    if device == "cuda":
        return device, where
    return device, map_pool(where, ctx.cfg, ctx.cfg.gpu_blocks)


class Worker:
    def __init__(
        self, ctx: ProcessContext, device: str, pool: torch.Tensor, tp_group: Collective | None
    ) -> None:
        self.cfg = ctx.cfg
        self.tp_rank = ctx.tp_rank
        self.device = device
        self.pool = pool
        self.model = Decoder(ctx.cfg, device, self.tp_rank, tp_group)
        self.integrity = IntegrityChecker()

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
            check_fps += [fp[self.tp_rank] for fp in s.check_fps]
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
        filled_fps = {b: (fp,) for b, fp in zip(filled, fps, strict=True)}
        return StepResult(batch.step, batch.seq, next_tokens, filled_fps, self.tp_rank)


def _tp_group(ctx: ProcessContext, device: str) -> Collective | None:
    if ctx.cfg.tp == 1:
        return None
    name = f"tp.dp{ctx.rank}"
    return Collective(name, ctx.tp_rank, ctx.cfg.tp, ctx.paths.store(name), device)


def serve(ctx: ProcessContext) -> WorkerStats:
    torch.set_num_threads(1)
    device, pool = attach_device_cache(ctx)
    group = _tp_group(ctx, device)
    worker = Worker(ctx, device, pool, group)
    locks = ctx.cfg.locked and ctx.tp_rank == 0
    lock = KvLock(ctx.paths, ctx.rank, S.ROLE_WORKER) if locks else None
    control = ctx.control
    p = probe.get()
    p.name_thread("worker")
    ctx.report("ready", "worker", {"device": device, "kv_cache": "attached"})
    while (batch := recv(ctx.batch_q, control)) is not None:
        p.acquire(I.QUEUE_BATCH, batch.seq)
        with lock.held() if lock else contextlib.nullcontext():
            result = worker.execute_model(batch)
        p.release(I.QUEUE_RESULT, tp_seq(result.seq, worker.tp_rank))
        ctx.result_q.put(result)
    if group is not None:
        group.close()
    return WorkerStats(worker.integrity.stats, device)
