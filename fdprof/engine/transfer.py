"""The cache transfer process of one TP rank, as FastDeploy's ``cache_transfer_manager``.

It creates and owns the rank's device KV cache (a /dev/shm file on the CPU, device memory shared
over CUDA IPC on a GPU) and hands it to the worker, which attaches: FastDeploy moved cache
creation there (PR #6144). Swap tasks run on two single-thread executors, one per direction
(SWAP2CPU, SWAP2GPU), so a swap-out and a swap-in can be in flight at once. A copy merges runs
of consecutive blocks into one call that covers all layers (``swap_cache_all_layers``), on the
direction's own stream on CUDA, synchronised before completion is signalled; every copy is
checked against the fingerprints the task carries. With ``--device-async`` the copies are
queued on a copy stream per direction and ordered by events (:class:`AsyncCopies`); with
``--cache-manager v1`` too, loads layer by layer (:class:`LayeredCopies`).
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from fdprof import probe
from fdprof import semconv as S
from fdprof.engine.device import Device, DeviceError, Event, SharedEvent, open_device
from fdprof.engine.integrity import IntegrityChecker
from fdprof.engine.ipc import SwapSignal, create_shm_file, recv
from fdprof.engine.kv_pool import host_pool, map_pool, resolve_device
from fdprof.engine.messages import SwapTask, tp_seq
from fdprof.engine.process import ProcessContext
from fdprof.engine.results import IntegrityStats, WorkerStats
from fdprof.engine.streams import ipc_events, shared_events
from fdprof.probe import handles as H


def block_runs(src: list[int], dst: list[int]) -> list[tuple[int, int, int]]:
    """``(src_start, dst_start, count)`` runs of pairs consecutive on both sides, in order."""
    runs: list[tuple[int, int, int]] = []
    for s, d in zip(src, dst, strict=True):
        if runs and s == runs[-1][0] + runs[-1][2] and d == runs[-1][1] + runs[-1][2]:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((s, d, 1))
    return runs


def create_device_cache(ctx: ProcessContext, device: str, ipc: dict | None = None) -> torch.Tensor:
    """This rank's device pool, made here and handed to the worker through ``setup_q`` (with
    the interprocess events of ``--device-async`` on CUDA)."""
    shape = ctx.cfg.kv_shape(ctx.cfg.gpu_blocks)
    if device == S.DEVICE_CUDA:
        pool = torch.zeros(shape, device=S.DEVICE_CUDA)
        ctx.setup_q.put((S.DEVICE_CUDA, pool, ipc))  # shared over CUDA IPC by torch's reductions
        return pool
    path = ctx.paths.gpu_pool(ctx.rank, ctx.tp_rank)
    create_shm_file(path, ctx.cfg.pool_bytes(ctx.cfg.gpu_blocks))
    ctx.setup_q.put((S.DEVICE_CPU, str(path), ipc))
    return map_pool(path, ctx.cfg, ctx.cfg.gpu_blocks)


class Transfer:
    def __init__(self, ctx: ProcessContext, device: str, dev_pool: torch.Tensor) -> None:
        self.cfg = ctx.cfg
        self.tp_rank = ctx.tp_rank
        self.dev = dev_pool
        #: the asynchronous engine's staging buffer follows the host pool's blocks
        staging = ctx.cfg.gpu_blocks if ctx.cfg.device_async else 0
        self.host = host_pool(ctx.cfg, device, staging)
        self.signal = SwapSignal(ctx.paths.signal(ctx.rank, ctx.tp_rank))
        cuda = device == S.DEVICE_CUDA
        #: per direction: its executor (one thread: tasks of a direction run in order), its
        #: stream, and its integrity counts (each touched by that thread only)
        self.executors = {
            d: ThreadPoolExecutor(1, f"swap_{d}", initializer=probe.get().name_thread,
                                  initargs=(f"swap_{d}",))
            for d in (S.TO_CPU, S.TO_GPU)
        }  # fmt: skip
        self.streams = {d: torch.cuda.Stream() if cuda else None for d in self.executors}
        self.integrity = {d: IntegrityChecker() for d in self.executors}
        self.copies: AsyncCopies | None = None

    def submit(self, task: SwapTask) -> Future:
        return self.executors[task.direction].submit(self.swap, task)

    def close(self) -> IntegrityStats:
        for ex in self.executors.values():
            ex.shutdown(wait=True)
        if self.copies is not None:
            self.copies.close()
        return IntegrityStats.total(c.stats for c in self.integrity.values())

    def pace(self, blocks: int, t0: float) -> None:
        """Sleep until ``blocks`` blocks would have crossed the configured link since ``t0``."""
        if self.cfg.link_gbps > 0:
            link_s = blocks * self.cfg.pool_bytes(1) / (self.cfg.link_gbps * 1e9)
            time.sleep(max(0.0, t0 + link_s - time.monotonic()))

    def _copy(self, direction: str, src: torch.Tensor, dst: torch.Tensor, s_ids, d_ids) -> None:
        """Merged runs, all layers per call, no faster than the configured link."""
        stream = self.streams[direction]
        t0 = time.monotonic()
        with torch.cuda.stream(stream) if stream is not None else torch.inference_mode():
            for s, d, n in block_runs(s_ids, d_ids):
                dst[:, :, d : d + n].copy_(src[:, :, s : s + n], non_blocking=stream is not None)
        if stream is not None:
            stream.synchronize()
        self.pace(len(s_ids), t0)

    def swap(self, task: SwapTask) -> None:
        p = probe.get()
        seq = tp_seq(task.task_id, self.tp_rank)
        p.acquire(H.QUEUE_SWAP, seq)
        early_ack = self.cfg.fault == S.Fault.ACK_BEFORE_COPY
        if early_ack:
            self.signal.set(seq)
        with p.span(H.SWAP) as sid:
            p.link_context(sid, task.traceparent)
            p.set_str(sid, H.ROLE, S.ROLE_TRANSFER)
            p.set_int(sid, H.SWAP_TASK_ID, task.task_id)
            p.set_str(sid, H.SWAP_DIRECTION, task.direction)
            p.set_int(sid, H.SWAP_BLOCKS, len(task.gpu_blocks))
            if self.copies is not None:
                self.copies.launch(task, sid, None if early_ack else seq)
                return
            if task.direction == S.TO_CPU:
                read_key, src, read = H.KV_GPU_READ, self.dev, task.gpu_blocks
                write_key, dst, written = H.KV_CPU_WRITE, self.host, task.cpu_blocks
            else:
                read_key, src, read = H.KV_CPU_READ, self.host, task.cpu_blocks
                write_key, dst, written = H.KV_GPU_WRITE, self.dev, task.gpu_blocks
            p.set_ints(sid, read_key, read)
            p.set_ints(sid, write_key, written)
            if delay := self.cfg.copy_delay_s(task.direction):
                time.sleep(delay)
            self._copy(task.direction, src, dst, read, written)
            expected = [fp[self.tp_rank] for fp in task.fps]
            bad = self.integrity[task.direction].check(dst, written, expected)
            if bad:
                p.set_ints(sid, H.KV_MISMATCHES, bad)
        if not early_ack:
            self.signal.set(seq)


class AsyncCopies:
    """The asynchronous engine's copies (docs/engine.md, "Asynchronous device work"): each
    direction's executor thread prepares a task and launches its copy on the direction's
    stream, records the copy's event and goes on to the next task; a completion thread per
    direction waits on the event and then signals completion. A store (``after_step``) waits
    on the worker's compute-done event before it reads; a swap-in is first staged on the host
    into the staging buffer (host blocks from ``cpu_blocks`` on), once the copy out of it
    before has run, and records the swap-in event the worker's forward waits on."""

    def __init__(self, transfer: Transfer, dev: Device, events: dict[str, SharedEvent]) -> None:
        self.t = transfer
        self.cfg = transfer.cfg
        self.dev = dev
        self.streams = {d: dev.stream() for d in (S.TO_CPU, S.TO_GPU)}
        #: foreign-stream-write: swap-ins written on a stream of their own
        self.foreign = dev.stream() if self.cfg.fault == S.Fault.FOREIGN_STREAM_WRITE else None
        self.compute_done = events[S.COMPUTE_DONE_EVENT]
        self.swapped_in = events.get(S.SWAP_IN_EVENT)
        self.copied_out = dev.event()
        self.staging_free = dev.event()
        self.staging = list(range(self.cfg.cpu_blocks, self.cfg.cpu_blocks + self.cfg.gpu_blocks))
        self.completions = {
            d: ThreadPoolExecutor(1, f"complete_{d}", initializer=probe.get().name_thread,
                                  initargs=(f"complete_{d}",))
            for d in self.streams
        }  # fmt: skip
        self.pending: list[Future] = []

    def launch(self, task: SwapTask, sid: int, signal_seq: int | None) -> None:
        """Queue ``task``'s copy (host span ``sid``) and hand its completion on; signal
        ``signal_seq`` once the copy's event has completed (None: already signalled)."""
        t = self.t
        expected = [fp[t.tp_rank] for fp in task.fps]
        checker, out = t.integrity[task.direction], {}
        launch = self._launch_store if task.direction == S.TO_CPU else self._launch_load
        dsid, event, generation = launch(task, sid, expected, checker, out)
        done = self.completions[task.direction].submit(
            self._complete, event, generation, dsid, out, signal_seq
        )
        for f in [f for f in self.pending if f.done()]:
            f.result()  # a failed completion raises here
        self.pending = [f for f in self.pending if not f.done()] + [done]

    def _launch_store(self, task: SwapTask, sid: int, expected, checker, out):
        """A device-to-host copy on the output stream, after the compute-done event of the step
        whose blocks it reads (``after_step``), unless the fault forgets that wait; its event
        and generation."""
        t, stream = self.t, self.streams[S.TO_CPU]
        if task.after_step and self.cfg.fault not in UNFENCED_STORE_FAULTS:
            stream.wait(self.compute_done, task.after_step)
        args = (S.TO_CPU, t.dev, t.host, task.gpu_blocks, task.cpu_blocks, expected, checker, out)
        dsid = stream.launch(H.SWAP_COPY, self._copy, *args, parent=sid)
        read, written = (H.KV_GPU_READ, task.gpu_blocks), (H.KV_CPU_WRITE, task.cpu_blocks)
        _describe(dsid, task.task_id, read, written)
        stream.record(self.copied_out)
        return dsid, self.copied_out, self.copied_out.generation

    def _launch_load(self, task: SwapTask, sid: int, expected, checker, out):
        """A host-to-device copy: staged, then copied on the swap-in stream (foreign-stream-write:
        on a stream of its own), recording the swap-in event at the task id."""
        t, stream = self.t, self.streams[S.TO_GPU]
        target, read_ids = stream, task.cpu_blocks
        if self.foreign is not None:
            target = self.foreign  # the bug: no event of this stream is waited on
        else:
            read_ids = self._stage(task, sid)
        args = (S.TO_GPU, t.host, t.dev, read_ids, task.gpu_blocks, expected, checker, out)
        dsid = target.launch(H.SWAP_COPY, self._copy, *args, parent=sid)
        _describe(dsid, task.task_id, (H.KV_CPU_READ, read_ids), (H.KV_GPU_WRITE, task.gpu_blocks))
        if target is stream:
            stream.record(self.staging_free)
        stream.record(self.swapped_in, task.task_id)
        return dsid, self.swapped_in, task.task_id

    def _stage(self, task: SwapTask, sid: int) -> list[int]:
        """Copy the task's host blocks into the staging buffer (on the host, once the copy out
        of it before has run); the staging blocks the device copy reads."""
        p = probe.get()
        n = len(task.cpu_blocks)
        if n > len(self.staging):
            raise ValueError(f"swap-in of {n} blocks exceeds the staging buffer")
        staged = self.staging[:n]
        if self.cfg.fault != S.Fault.REUSE_STAGING_BUFFER:
            self.staging_free.synchronize()
        with p.span(H.SWAP_STAGE, sid) as st:
            p.set_ints(st, H.KV_CPU_READ, task.cpu_blocks)
            p.set_ints(st, H.KV_CPU_WRITE, staged)
            host = self.t.host
            idx = torch.tensor(task.cpu_blocks)
            host[:, :, staged[0] : staged[0] + n] = host.index_select(2, idx)
        return staged

    def _copy(self, direction, src, dst, s_ids, d_ids, expected, checker, out) -> None:
        """The device copy (on its stream): the fault's delay, the merged runs at the link's
        pace, then the destination checked against the fingerprints."""
        try:
            with torch.inference_mode():
                if delay := self.cfg.copy_delay_s(direction):
                    time.sleep(delay)
                t0 = time.monotonic()
                for s, d, n in block_runs(s_ids, d_ids):
                    dst[:, :, d : d + n].copy_(src[:, :, s : s + n], non_blocking=True)
                self.t.pace(len(s_ids), t0)
                if expected:
                    out["bad"] = checker.check(dst, d_ids, expected)
        except BaseException as exc:  # noqa: BLE001 - raised on the host by _complete
            out["error"] = exc

    def _complete(self, event: Event, generation: int, dsid: int, out: dict, seq) -> None:
        """The host waits on the copy's event, then signals completion."""
        event.synchronize(generation)
        if "error" in out:
            raise DeviceError(f"swap copy failed: {out['error']!r}") from out["error"]
        if out.get("bad"):
            probe.get().set_ints(dsid, H.KV_MISMATCHES, out["bad"])
        if seq is not None:
            self.t.signal.set(seq)

    def close(self) -> None:
        for ex in self.completions.values():
            ex.shutdown(wait=True)
        self.dev.close()
        for f in self.pending:
            f.result()  # a failed copy raises here


class LayeredCopies(AsyncCopies):
    """Cache Manager V1's copies (docs/engine.md, "Cache Manager V1"): a load is copied layer
    by layer on the input stream (the swap-in stream), in the task's pieces (split at transfer
    chunks), each layer's copy followed by a record of that layer's event at the task id, so
    the worker's layer ``l`` waits for exactly its layer; a load into blocks a step still in
    flight may use first waits on that step's compute-done event (SGLang's fence of the load
    behind the forward stream). Stores run on the output stream as the asynchronous engine's
    do: nothing on the host waits for them but the completion thread."""

    def __init__(self, transfer: Transfer, dev: Device, events: dict[str, SharedEvent]) -> None:
        super().__init__(transfer, dev, events)
        layers = range(self.cfg.layers)
        self.layer_loaded = [events[S.layer_loaded_event(layer)] for layer in layers]

    def _launch_load(self, task: SwapTask, sid: int, expected, checker, out):
        cfg, stream = self.cfg, self.streams[S.TO_GPU]
        if task.after_step and cfg.fault != S.Fault.LOAD_BACK_UNFENCED:
            stream.wait(self.compute_done, task.after_step)
        whole = zip(task.cpu_blocks, task.gpu_blocks, strict=True)
        pieces = task.pieces or [(c, 0, g, 0, cfg.block_size) for c, g in whole]
        read = (H.KV_CPU_READ, sorted({piece[0] for piece in pieces}))
        written = (H.KV_GPU_WRITE, sorted({piece[2] for piece in pieces}))
        last = cfg.layers - 1
        for layer in range(cfg.layers):
            check = (task.gpu_blocks, expected, checker) if layer == last and expected else None
            dsid = stream.launch(H.SWAP_COPY, self._copy_layer, layer, pieces,
                                 len(task.gpu_blocks), check, out, parent=sid)  # fmt: skip
            _describe(dsid, task.task_id, read, written)
            probe.get().set_ints(dsid, H.KV_LAYERS, [layer, layer + 1])
            stream.record(self.layer_loaded[layer], task.task_id)
        return dsid, self.layer_loaded[last], task.task_id

    def _copy_layer(self, layer: int, pieces, blocks: int, check, out: dict) -> None:
        """One layer of a load (on the input stream): its share of the fault's delay, its
        pieces at the link's pace; after the last layer, the blocks checked against their
        fingerprints."""
        cfg, src, dst = self.cfg, self.t.host, self.t.dev
        try:
            with torch.inference_mode():
                if delay := cfg.copy_delay_s(S.TO_GPU):
                    time.sleep(delay / cfg.layers)
                t0 = time.monotonic()
                for hb, ht, db, dt, n in pieces:
                    dst[layer, :, db, dt : dt + n].copy_(src[layer, :, hb, ht : ht + n],
                                                         non_blocking=True)  # fmt: skip
                self.t.pace(blocks / cfg.layers, t0)
                if check is not None:
                    ids, expected, checker = check
                    out["bad"] = checker.check(dst, ids, expected)
        except BaseException as exc:  # noqa: BLE001 - raised on the host by _complete
            out["error"] = exc


#: faults whose store does not wait for the kernel that writes its blocks
UNFENCED_STORE_FAULTS = (S.Fault.STORE_BEFORE_COMPUTE_DONE, S.Fault.COMPUTE_RACES_STORE)


def _describe(dsid: int, task_id: int, *accesses: tuple) -> None:
    """A device copy's attributes: its task and its ``(key, block ids)`` accesses."""
    p = probe.get()
    p.set_int(dsid, H.SWAP_TASK_ID, task_id)
    for key, ids in accesses:
        p.set_ints(dsid, key, ids)


def serve(ctx: ProcessContext) -> WorkerStats:
    torch.set_num_threads(1)
    device = resolve_device(ctx.cfg.device)
    kinds = ctx.cfg.event_kinds
    ipc = ipc_events(device, kinds)
    transfer = Transfer(ctx, device, create_device_cache(ctx, device, ipc))
    if kinds:
        dev = open_device(device)
        copies = LayeredCopies if ctx.cfg.v1 else AsyncCopies
        transfer.copies = copies(transfer, dev, shared_events(dev, ctx, ipc))
    p = probe.get()
    p.name_thread("transfer")
    ctx.report("ready", S.ROLE_TRANSFER, {"device": device, "kv_cache": "owner"})
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
