"""The worker process of one TP rank: attaches to the device KV cache its transfer process made
and runs ``execute_model`` on each batch.

It checks the cached blocks a sequence reads for the first time against their fingerprints,
checks every step's logits and the blocks it touched for NaN/Inf, and reports the fingerprints
of the blocks it fills (its shard's). In the baseline it holds the KV lock around
``execute_model`` on TP rank 0 only, as FastDeploy's worker does
(``_acquire_kvcache_lock(tp_rank)``); the other ranks follow through the collectives.

Under expert parallelism the workers of all DP groups run in lockstep, as FastDeploy's do: each
iteration they agree (one all-gather) whether anyone still has work, and a worker with no batch
runs ``execute_model`` on an empty one, joining the expert exchanges with no tokens.
"""

from __future__ import annotations

import contextlib
import queue

import torch

from engine import instrument as I
from engine.collectives import Collective
from engine.integrity import IntegrityChecker, fingerprints
from engine.ipc import KvLock, Stopped, recv
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


#: how long a worker under expert parallelism waits for a batch before it runs an empty step
EP_IDLE_WAIT_S = 0.002
#: the batch of a worker that has no requests this step (expert parallelism)
EMPTY_BATCH = Batch(-1, -1, [])


class Worker:
    def __init__(
        self,
        ctx: ProcessContext,
        device: str,
        pool: torch.Tensor,
        tp_group: Collective | None = None,
        ep_group: Collective | None = None,
    ) -> None:
        self.cfg = ctx.cfg
        self.tp_rank = ctx.tp_rank
        self.device = device
        self.pool = pool
        self.model = Decoder(ctx.cfg, device, self.tp_rank, tp_group, ep_group)
        self.integrity = IntegrityChecker()

    @torch.inference_mode()
    def execute_model(self, batch: Batch) -> StepResult | None:
        """The step's result; None for an empty batch (it only joins the collectives)."""
        if not batch.seqs:
            with probe.get().span(I.EXECUTE_MODEL) as sid:
                probe.get().set_int(sid, I.BATCH_SIZE, 0)
                self.model.join_empty()
            return None
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
            self.integrity.count_nonfinite(logits)
            self.integrity.count_nonfinite_blocks(self.pool, sorted(reads | writes))
            next_tokens = logits.argmax(-1).tolist()
            fps = fingerprints(self.pool, filled)
        filled_fps = {b: (fp,) for b, fp in zip(filled, fps, strict=True)}
        return StepResult(batch.step, batch.seq, next_tokens, filled_fps, self.tp_rank)


def _groups(ctx: ProcessContext, device: str) -> tuple[Collective | None, Collective | None]:
    """This worker's TP group (its DP group's ranks) and EP group (every DP group's worker)."""
    cfg = ctx.cfg
    if cfg.ep:
        return None, Collective("ep", ctx.rank, cfg.dp, ctx.paths.store("ep"), device)
    if cfg.tp > 1:
        name = f"tp.dp{ctx.rank}"
        return Collective(name, ctx.tp_rank, cfg.tp, ctx.paths.store(name), device), None
    return None, None


class _Loop:
    """The worker's loop: take a batch, run it (under the lock on TP rank 0 of the baseline),
    send the result back."""

    def __init__(self, ctx: ProcessContext, worker: Worker) -> None:
        self.ctx, self.worker = ctx, worker
        locks = ctx.cfg.locked and ctx.tp_rank == 0
        self.lock = KvLock(ctx.paths, ctx.rank, S.ROLE_WORKER) if locks else None

    def step(self, batch: Batch) -> None:
        p = probe.get()
        if batch.seqs:
            p.acquire(I.QUEUE_BATCH, batch.seq)
        with self.lock.held() if self.lock else contextlib.nullcontext():
            result = self.worker.execute_model(batch)
        if result is not None:
            p.release(I.QUEUE_RESULT, tp_seq(result.seq, self.worker.tp_rank))
            self.ctx.result_q.put(result)

    def run(self) -> None:
        while (batch := recv(self.ctx.batch_q, self.ctx.control)) is not None:
            self.step(batch)

    def run_in_lockstep(self, group: Collective) -> None:
        """Expert parallelism: every iteration is a step of every worker, until all are done."""
        control, finished = self.ctx.control, False
        while True:
            batch = EMPTY_BATCH
            if not finished:
                try:
                    batch = self.ctx.batch_q.get(timeout=EP_IDLE_WAIT_S)
                except queue.Empty:
                    batch = EMPTY_BATCH
                    if control.stopping:
                        raise Stopped from None
                if batch is None:
                    finished, batch = True, EMPTY_BATCH
            flags = torch.tensor([int(finished)], device=self.worker.device)
            if bool(group.all_gather(flags).all()):
                return
            self.step(batch)


def serve(ctx: ProcessContext) -> WorkerStats:
    torch.set_num_threads(1)
    device, pool = attach_device_cache(ctx)
    tp_group, ep_group = _groups(ctx, device)
    worker = Worker(ctx, device, pool, tp_group, ep_group)
    loop = _Loop(ctx, worker)
    probe.get().name_thread("worker")
    ctx.report("ready", "worker", {"device": device, "kv_cache": "attached"})
    if ep_group is not None:
        loop.run_in_lockstep(ep_group)
    else:
        loop.run()
    for group in (tp_group, ep_group):
        if group is not None:
            group.close()
    return WorkerStats(worker.integrity.stats, device)
