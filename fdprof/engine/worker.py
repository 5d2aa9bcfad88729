"""The worker process of one TP rank: attaches to the device KV cache its transfer process made
and runs ``execute_model`` on each batch.

It checks the cached blocks a sequence reads for the first time against their fingerprints,
checks every step's logits and the blocks it touched for NaN/Inf, and reports the fingerprints
of the blocks it fills (its shard's). In the baseline it holds the KV lock around
``execute_model`` on TP rank 0 only, as FastDeploy's worker does
(``_acquire_kvcache_lock(tp_rank)``); the other ranks follow through the collectives.

With ``--device-async`` (:class:`AsyncWorker`) ``execute_model`` only queues the step's forward
pass on the compute stream (after a wait on the swap-in event, before a record of the
compute-done event) and returns; the lock is released then (or, with ``--sync-before-unlock``,
after the stream has been synchronised), and the host waits on the compute-done event before
it reads the step's tokens and sends the result.

With Cache Manager V1 (:class:`LayeredWorker`) ``execute_model`` runs on the host as the
synchronous worker's does, but waits for each layer's swap-in event just before that layer's
attention (FastDeploy's ``LayerDoneCounter.wait_for_layer``), records each layer as a span with
its KV accesses, checks whole blocks after the last layer, and records its rank's compute-done
event at the step's sequence number once the step is done (the transfer's streams wait on it).

Under expert parallelism the workers of all DP groups run in lockstep, as FastDeploy's do: each
iteration they agree (one all-gather) whether anyone still has work, and a worker with no batch
runs ``execute_model`` on an empty one, joining the expert exchanges with no tokens.
"""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from fdprof import probe
from fdprof import semconv as S
from fdprof.engine.collectives import Collective
from fdprof.engine.device import Device, DeviceError, SharedEvent, open_device
from fdprof.engine.integrity import IntegrityChecker, fingerprint_tensor, fingerprints, run_sums
from fdprof.engine.ipc import KvLock, Stopped, recv
from fdprof.engine.kv_pool import map_pool
from fdprof.engine.messages import Batch, StepResult, tp_seq
from fdprof.engine.model import Decoder, SeqInput
from fdprof.engine.process import ProcessContext
from fdprof.engine.results import WorkerStats
from fdprof.engine.streams import shared_events
from fdprof.probe import handles as H


def attach_device_cache(ctx: ProcessContext) -> tuple[str, torch.Tensor, dict | None]:
    """The device, the device pool the transfer process created (it says where) and, on CUDA
    with ``--device-async``, the interprocess events it made."""
    device, where, ipc = recv(ctx.setup_q, ctx.control)
    if device == S.DEVICE_CUDA:
        return device, where, ipc
    return device, map_pool(where, ctx.cfg, ctx.cfg.gpu_blocks), ipc


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

    def _plan(self, batch: Batch) -> StepPlan:
        bs = self.cfg.block_size
        plan = StepPlan(batch)
        reads: set[int] = set()
        writes: set[int] = set()
        for s in batch.seqs:
            end = s.start + len(s.tokens)
            reads.update(s.block_table[: -(-end // bs)])
            for pos in range(s.start, end):
                writes.add(s.block_table[pos // bs])
                if (pos + 1) % bs == 0:
                    plan.filled.append(s.block_table[pos // bs])
            plan.check_blocks += s.check_blocks
            plan.check_fps += [fp[self.tp_rank] for fp in s.check_fps]
            plan.seqs.append(SeqInput(s.tokens, s.start, s.block_table))
        plan.reads, plan.writes = sorted(reads), sorted(writes)
        return plan

    def _describe(self, sid: int, plan: StepPlan) -> None:
        """The host span's attributes (the step, the batch, the requests it serves)."""
        p = probe.get()
        p.set_int(sid, H.STEP_ID, plan.batch.step)
        p.set_int(sid, H.BATCH_SIZE, len(plan.seqs))
        p.set_int(sid, H.BATCH_TOKENS, sum(len(s.tokens) for s in plan.seqs))
        for s in plan.batch.seqs:
            p.link_context(sid, s.traceparent, link=True)

    def _result(self, plan: StepPlan, next_tokens: list[int], fps: list[int]) -> StepResult:
        filled_fps = {b: (fp,) for b, fp in zip(plan.filled, fps, strict=True)}
        batch = plan.batch
        return StepResult(batch.step, batch.seq, next_tokens, filled_fps, self.tp_rank)

    @torch.inference_mode()
    def execute_model(self, batch: Batch) -> StepResult | None:
        """The step's result; None for an empty batch (it only joins the collectives)."""
        if not batch.seqs:
            with probe.get().span(H.EXECUTE_MODEL) as sid:
                probe.get().set_int(sid, H.BATCH_SIZE, 0)
                self.model.join_empty()
            return None
        p = probe.get()
        plan = self._plan(batch)
        with p.span(H.EXECUTE_MODEL) as sid:
            self._describe(sid, plan)
            p.set_ints(sid, H.KV_GPU_READ, plan.reads)
            p.set_ints(sid, H.KV_GPU_WRITE, plan.writes)
            bad = self.integrity.check(self.pool, plan.check_blocks, plan.check_fps)
            if bad:
                p.set_ints(sid, H.KV_MISMATCHES, bad)
            logits = self.model.forward_paged(self.pool, plan.seqs)
            self.integrity.count_nonfinite(logits)
            self.integrity.count_nonfinite_blocks(self.pool, plan.reads_writes)
            next_tokens = logits.argmax(-1).tolist()
            fps = fingerprints(self.pool, plan.filled)
        return self._result(plan, next_tokens, fps)


@dataclass
class StepPlan:
    """What one step touches, worked out on the host from its batch."""

    batch: Batch
    seqs: list[SeqInput] = field(default_factory=list)
    reads: list[int] = field(default_factory=list)
    writes: list[int] = field(default_factory=list)
    filled: list[int] = field(default_factory=list)
    check_blocks: list[int] = field(default_factory=list)
    check_fps: list[int] = field(default_factory=list)
    #: asynchronous engine: the forward's span on the compute stream, and what it left there
    device_sid: int = 0
    out: dict = field(default_factory=dict)

    @property
    def reads_writes(self) -> list[int]:
        return sorted(set(self.reads) | set(self.writes))


class AsyncWorker(Worker):
    """The worker of the asynchronous engine: ``execute_model`` queues the step's forward pass
    on the compute stream and returns (the host call of an asynchronous engine); the forward
    first waits on the swap-in event of the blocks it reads for the first time, and records
    the compute-done event after it. :meth:`finish` waits on that event on the host before it
    reads the step's tokens and fingerprints."""

    def __init__(self, ctx: ProcessContext, device: str, pool: torch.Tensor, dev: Device,
                 events: dict[str, SharedEvent]) -> None:  # fmt: skip
        super().__init__(ctx, device, pool)
        self.compute = dev.stream()
        self.compute_done = events[S.COMPUTE_DONE_EVENT]
        self.swapped_in = events[S.SWAP_IN_EVENT]

    def execute_model(self, batch: Batch) -> StepPlan:
        p = probe.get()
        plan = self._plan(batch)
        with p.span(H.EXECUTE_MODEL) as sid:
            self._describe(sid, plan)
            if batch.after_swap_in:
                self.compute.wait(self.swapped_in, batch.after_swap_in)
            plan.device_sid = dsid = self.compute.launch(H.FORWARD, self._forward, plan, parent=sid)
            p.set_int(dsid, H.STEP_ID, batch.step)
            p.set_ints(dsid, H.KV_GPU_READ, plan.reads)
            p.set_ints(dsid, H.KV_GPU_WRITE, plan.writes)
            self.compute.record(self.compute_done, batch.seq)
        return plan

    def _forward(self, plan: StepPlan) -> None:
        """The step's device work (on the compute stream): everything that reads or writes the
        pool, its results left as tensors in ``plan.out``."""
        out = plan.out
        try:
            with torch.inference_mode():
                if self.cfg.compute_delay_s and plan.filled:
                    time.sleep(self.cfg.compute_delay_s)  # the fault's slow kernel
                out["check"] = fingerprint_tensor(self.pool, plan.check_blocks)
                logits = self.model.forward_paged(self.pool, plan.seqs)
                out["nonfinite"] = (~torch.isfinite(logits)).sum()
                out["sums"] = run_sums(self.pool, plan.reads_writes)
                out["tokens"] = logits.argmax(-1)
                out["fps"] = fingerprint_tensor(self.pool, plan.filled)
        except BaseException as exc:  # noqa: BLE001 - raised on the host by finish()
            out["error"] = exc

    def finish(self, plan: StepPlan) -> StepResult:
        """Wait on the step's compute-done event, then read what the forward left."""
        self.compute_done.synchronize(plan.batch.seq)
        out = plan.out
        if "error" in out:
            raise DeviceError(f"forward pass failed: {out['error']!r}") from out["error"]
        got = out["check"].tolist()
        bad = self.integrity.tally(plan.check_blocks, got, plan.check_fps)
        if bad:
            probe.get().set_ints(plan.device_sid, H.KV_MISMATCHES, bad)
        self.integrity.stats.nan += int(out["nonfinite"])
        self.integrity.count_nonfinite_runs(self.pool, plan.reads_writes, out["sums"].tolist())
        return self._result(plan, out["tokens"].tolist(), out["fps"].tolist())


class LayeredWorker(Worker):
    """Cache Manager V1's worker: the forward pass runs on the host (so it works under TP and
    EP, whose collectives run on the host), layer by layer, each layer after a wait on its
    rank's swap-in event of that layer at the step's load (``Batch.after_swap_in``: loads
    complete in task order on the transfer's one input stream). A host wait on CUDA too: it
    orders what V1's stream wait orders and keeps the spans honest (the host does not run
    ahead of the copy it waits for)."""

    def __init__(self, ctx: ProcessContext, device: str, pool: torch.Tensor,
                 events: dict[str, SharedEvent], tp_group: Collective | None = None,
                 ep_group: Collective | None = None) -> None:  # fmt: skip
        super().__init__(ctx, device, pool, tp_group, ep_group)
        self.compute_done = events[S.COMPUTE_DONE_EVENT]
        self.layer_loaded = [events[S.layer_loaded_event(li)] for li in range(ctx.cfg.layers)]

    def wait_for_layer(self, layer: int, load: int) -> None:
        """Block until layer ``layer`` of load ``load`` (a task id; 0: none) has landed.
        v1-wrong-layer-event's off-by-one waits for the layer before it instead (layer 0: for
        nothing), so layer ``l`` is read while its copy may still be in flight."""
        if self.cfg.fault == S.Fault.V1_WRONG_LAYER_EVENT:
            layer -= 1
        if load and layer >= 0:
            self.layer_loaded[layer].synchronize(load)

    @contextlib.contextmanager
    def _layer(self, parent: int, plan: StepPlan, layer: int) -> Iterator[None]:
        """Around layer ``layer``'s attention: its wait, then its span and KV accesses."""
        p = probe.get()
        self.wait_for_layer(layer, plan.batch.after_swap_in)
        with p.span(H.FORWARD_LAYER, parent) as sid:
            p.set_int(sid, H.STEP_ID, plan.batch.step)
            p.set_ints(sid, H.KV_LAYERS, [layer, layer + 1])
            p.set_ints(sid, H.KV_GPU_READ, plan.reads)
            p.set_ints(sid, H.KV_GPU_WRITE, plan.writes)
            yield

    @torch.inference_mode()
    def execute_model(self, batch: Batch) -> StepResult | None:
        if not batch.seqs:
            return super().execute_model(batch)
        p = probe.get()
        plan = self._plan(batch)
        with p.span(H.EXECUTE_MODEL) as sid:
            self._describe(sid, plan)
            if self.cfg.compute_delay_s and plan.filled:
                time.sleep(self.cfg.compute_delay_s)  # the fault's slow kernel
            logits = self.model.forward_paged(
                self.pool, plan.seqs, lambda layer: self._layer(sid, plan, layer)
            )
            with p.span(H.KV_CHECK, sid) as cid:  # after every layer's wait: whole blocks
                p.set_int(cid, H.STEP_ID, batch.step)
                p.set_ints(cid, H.KV_GPU_READ, plan.reads_writes)
                bad = self.integrity.check(self.pool, plan.check_blocks, plan.check_fps)
                if bad:
                    p.set_ints(cid, H.KV_MISMATCHES, bad)
                self.integrity.count_nonfinite(logits)
                self.integrity.count_nonfinite_blocks(self.pool, plan.reads_writes)
                next_tokens = logits.argmax(-1).tolist()
                fps = fingerprints(self.pool, plan.filled)
            self.compute_done.record_host(batch.seq)
        return self._result(plan, next_tokens, fps)


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
            p.acquire(H.QUEUE_BATCH, batch.seq)
        worker = self.worker
        with self.lock.held() if self.lock else contextlib.nullcontext():
            result = worker.execute_model(batch)
            if isinstance(worker, AsyncWorker) and self.ctx.cfg.sync_before_unlock:
                worker.compute.synchronize()
        if isinstance(worker, AsyncWorker):
            result = worker.finish(result)
        if result is not None:
            p.release(H.QUEUE_RESULT, tp_seq(result.seq, self.worker.tp_rank))
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
    device, pool, ipc = attach_device_cache(ctx)
    dev = None
    if ctx.cfg.device_async:
        dev = open_device(device)
        worker = AsyncWorker(ctx, device, pool, dev, shared_events(dev, ctx, ipc))
        tp_group = ep_group = None  # (--device-async runs with --tp 1, without --ep)
    else:
        tp_group, ep_group = _groups(ctx, device)
        if ctx.cfg.v1:
            dev = open_device(device)
            events = shared_events(dev, ctx, ipc)
            worker = LayeredWorker(ctx, device, pool, events, tp_group, ep_group)
        else:
            worker = Worker(ctx, device, pool, tp_group, ep_group)
    loop = _Loop(ctx, worker)
    probe.get().name_thread("worker")
    ctx.report("ready", S.ROLE_WORKER, {"device": device, "kv_cache": "attached"})
    if ep_group is not None:
        loop.run_in_lockstep(ep_group)
    else:
        loop.run()
    for group in (tp_group, ep_group):
        if group is not None:
            group.close()
    if dev is not None:
        dev.close()
    return WorkerStats(worker.integrity.stats, device)
