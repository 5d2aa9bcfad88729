"""A KV offloading spec for vLLM on the CPU: copies between the KV cache and a host pool on a
background thread, so stores and loads really run beside ``execute_model``.

vLLM's own CPU spec refuses a non-CUDA platform. This one keeps vLLM's scheduler-side
manager (``CPUOffloadingManager``: which blocks are offloaded, LRU eviction) and replaces only
the copy worker. The copies are ordered the way vLLM's CUDA worker orders them with streams and
events, on one thread instead of a stream:

- a job starts only after everything its submitter did before ``submit_*``: CUDA's
  ``stream.wait_stream(current_stream)``; here the hand-off through a queue (vLLM submits a
  step's stores after that step's forward, so the blocks they read are written);
- jobs run in submission order: CUDA's ``stream.wait_event(last_job.end_event)``;
- each job has an end event; ``get_finished`` reports the finished prefix of the submission
  order (``end_event.query()``), ``wait`` blocks on it (``end_event.synchronize()``).

``store_mode`` in ``kv_connector_extra_config``: ``"async"`` (default, the thread) or
``"sync"`` (each copy done inside ``submit_*``, as if every store were waited for);
``copy_delay_ms`` (default 0): each copy takes that much longer, as over a slow link, which
widens the window in which a transfer is in flight (tests use it to make an early completion
or a missing fence show within a few steps).

``fault: "store-before-compute"`` seeds the bug of vLLM #45704 (a store that does not wait
for the compute that writes its blocks): :class:`ThreadedOffloadingConnector` then submits a
step's stores when the step's metadata is bound, before its forward, so they read blocks the
forward has not written yet and later loads hand requests wrong KV. Such a store reads them at
submission (its copy thread then writes what it read), so that happens in every run, not only
when the copy thread wins the race; its completion comes as any store's, ordered by nothing
the forward waits for.

The copy spans are recorded through fdprof's probe (a no-op unless the vLLM plugin configured
it): ``swap`` with ``kv.gpu_*``/``kv.cpu_*`` block ids, acquiring ``queue:swap`` (job id) and
releasing ``signal:swap_done`` (job id); the plugin records the submit and completion sides.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import torch
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import OffloadingConnector
from vllm.v1.kv_offload.base import (
    CanonicalKVCaches,
    GPULoadStoreSpec,
    LoadStoreSpec,
    OffloadingWorker,
    TransferResult,
)
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

from fdprof import probe
from fdprof import semconv as S
from fdprof.probe import handles as H


class StoreMode(StrEnum):
    """How the spec's stores run: on its background copy thread, or inside ``submit_*``."""

    ASYNC = "async"
    SYNC = "sync"


#: the seeded fault (module doc)
STORE_BEFORE_COMPUTE = "store-before-compute"
FAULTS = (STORE_BEFORE_COMPUTE,)


@dataclass(eq=False)
class _Job:
    job_id: int
    direction: str  # S.TO_CPU (store) or S.TO_GPU (load)
    gpu_blocks: np.ndarray
    cpu_blocks: np.ndarray
    end: threading.Event = field(default_factory=threading.Event)
    nbytes: int = 0
    seconds: float = 0.0
    #: a store's device blocks as read when it was submitted (the store-before-compute fault),
    #: one tensor per KV tensor; None: read by the copy itself
    taken: list[torch.Tensor] | None = None


class HostCopyWorker(OffloadingWorker):
    """Copies whole KV blocks between vLLM's KV tensors and host tensors of the same page
    layout (one KV group, one offloaded block per KV block)."""

    def __init__(
        self, kv_caches: CanonicalKVCaches, num_blocks: int, store_mode: str, delay_s: float = 0.0
    ) -> None:
        if len(kv_caches.group_data_refs) != 1:
            raise ValueError("ThreadedCPUOffloadingSpec supports one KV cache group")
        self._device = [t.tensor for t in kv_caches.tensors]
        self._host = [
            torch.zeros((num_blocks, t.tensor.shape[1]), dtype=t.tensor.dtype)
            for t in kv_caches.tensors
        ]
        self._sync = store_mode == StoreMode.SYNC
        self._delay_s = delay_s
        self._pending: deque[_Job] = deque()
        self._by_id: dict[int, _Job] = {}
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        if not self._sync:
            self._thread = threading.Thread(target=self._run, name="kv-offload", daemon=True)
            self._thread.start()

    def submit_store(
        self, job_id: int, src_spec: GPULoadStoreSpec, dst_spec: LoadStoreSpec
    ) -> bool:
        return self._submit(_Job(job_id, S.TO_CPU, src_spec.block_ids, dst_spec.block_ids))

    def submit_store_read_now(
        self, job_id: int, src_spec: GPULoadStoreSpec, dst_spec: LoadStoreSpec
    ) -> bool:
        """A store whose device blocks are read here, at submission, and whose copy thread
        stores what was read: the seeded store-before-compute fault, wrong in every run."""
        job = _Job(job_id, S.TO_CPU, src_spec.block_ids, dst_spec.block_ids)
        gpu = torch.from_numpy(job.gpu_blocks.astype(np.int64))
        job.taken = [dev.index_select(0, gpu) for dev in self._device]
        return self._submit(job)

    def submit_load(
        self,
        job_id: int,
        src_spec: LoadStoreSpec,
        dst_spec: GPULoadStoreSpec,
        expedited: bool = False,
    ) -> bool:
        """``expedited`` (vLLM 0.33: a load waited for within its step) queues like any job:
        one thread runs them all in submission order."""
        return self._submit(_Job(job_id, S.TO_GPU, dst_spec.block_ids, src_spec.block_ids))

    def _submit(self, job: _Job) -> bool:
        if len(job.gpu_blocks) != len(job.cpu_blocks):
            raise ValueError(
                f"job {job.job_id}: {len(job.gpu_blocks)} KV blocks for "
                f"{len(job.cpu_blocks)} host blocks (the spec needs blocks_per_chunk=1)"
            )
        self._pending.append(job)
        self._by_id[job.job_id] = job
        if self._sync:
            self._copy(job)
        else:
            self._jobs.put(job)
        return True

    def _run(self) -> None:
        probe.get().name_thread("kv-offload")
        while (job := self._jobs.get()) is not None:
            self._copy(job)

    def _copy(self, job: _Job) -> None:
        p = probe.get()
        p.acquire(H.QUEUE_SWAP, job.job_id)
        t0 = time.perf_counter()
        with p.span(H.SWAP) as sid:
            p.set_str(sid, H.ROLE, S.ROLE_TRANSFER)
            p.set_int(sid, H.SWAP_TASK_ID, job.job_id)
            p.set_str(sid, H.SWAP_DIRECTION, job.direction)
            p.set_int(sid, H.SWAP_BLOCKS, len(job.gpu_blocks))
            if self._delay_s:
                time.sleep(self._delay_s)
            gpu = torch.from_numpy(job.gpu_blocks.astype(np.int64))
            cpu = torch.from_numpy(job.cpu_blocks.astype(np.int64))
            if job.direction == S.TO_CPU:
                p.set_ints(sid, H.KV_GPU_READ, job.gpu_blocks.tolist())
                p.set_ints(sid, H.KV_CPU_WRITE, job.cpu_blocks.tolist())
                taken = job.taken or [dev.index_select(0, gpu) for dev in self._device]
                for host, blocks in zip(self._host, taken, strict=True):
                    host.index_copy_(0, cpu, blocks)
            else:
                p.set_ints(sid, H.KV_CPU_READ, job.cpu_blocks.tolist())
                p.set_ints(sid, H.KV_GPU_WRITE, job.gpu_blocks.tolist())
                for dev, host in zip(self._device, self._host, strict=True):
                    dev.index_copy_(0, gpu, host.index_select(0, cpu))
        # after the span: what the span did is before the release (the detector's epochs)
        p.release(H.SIGNAL_SWAP_DONE, job.job_id, sid)
        job.nbytes = len(job.gpu_blocks) * sum(h.shape[1] * h.element_size() for h in self._host)
        job.seconds = time.perf_counter() - t0
        job.end.set()

    def get_finished(self) -> list[TransferResult]:
        done = []
        while self._pending and self._pending[0].end.is_set():
            job = self._pending.popleft()
            del self._by_id[job.job_id]
            done.append(TransferResult(job.job_id, True, job.nbytes, job.seconds))
        return done

    def wait(self, job_ids: set[int]) -> None:
        for job_id in job_ids:
            job = self._by_id.get(job_id)
            if job is not None:
                job.end.wait()

    def shutdown(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None


class ThreadedCPUOffloadingSpec(CPUOffloadingSpec):
    """vLLM's CPU offloading spec with :class:`HostCopyWorker` as its worker. Settings
    (``kv_connector_extra_config``): ``cpu_bytes_to_use`` (as vLLM's), ``store_mode``,
    ``copy_delay_ms``, ``fault`` (module doc)."""

    def __init__(self, config) -> None:
        super().__init__(config)
        self.store_mode = self.extra_config.get("store_mode", StoreMode.ASYNC)
        if self.store_mode not in tuple(StoreMode):
            modes = ", ".join(StoreMode)
            raise ValueError(f"store_mode must be one of {modes}, not {self.store_mode!r}")
        fault = self.extra_config.get("fault")
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}, not {fault!r}")
        self.copy_delay_s = float(self.extra_config.get("copy_delay_ms", 0)) / 1000
        if not 0 <= self.copy_delay_s <= 10:
            raise ValueError(f"copy_delay_ms must be in [0, 10000], not {self.copy_delay_s * 1000}")
        if self.blocks_per_chunk != 1:
            raise ValueError("ThreadedCPUOffloadingSpec needs one offloaded block per KV block")
        self._host_worker: HostCopyWorker | None = None

    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        if self._host_worker is None:
            self._host_worker = HostCopyWorker(kv_caches, self.num_chunks, self.store_mode,
                                               self.copy_delay_s)  # fmt: skip
        return self._host_worker


class ThreadedOffloadingConnector(OffloadingConnector):
    """vLLM's ``OffloadingConnector``, unchanged unless its spec's ``fault`` is
    ``store-before-compute``: then a step's stores are submitted when the step's metadata is
    bound, before the forward that writes their blocks (and taken out of the metadata, so
    vLLM does not submit them again after the step)."""

    def bind_connector_metadata(self, connector_metadata) -> None:
        worker = self.connector_worker
        if (
            worker is not None
            and worker.worker is not None
            and worker.spec.extra_config.get("fault") == STORE_BEFORE_COMPUTE
            and connector_metadata.store_jobs
        ):
            for job_id, job in connector_metadata.store_jobs.items():
                worker.worker.submit_store_read_now(job_id, job.src_spec, job.dst_spec)
            connector_metadata = dataclasses.replace(connector_metadata, store_jobs={})
        super().bind_connector_metadata(connector_metadata)
