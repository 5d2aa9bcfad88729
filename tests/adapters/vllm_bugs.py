"""Bugs seeded into vLLM 0.32's own code, for the adapter tests only: each a monkeypatch of one
vLLM function, applied in the vLLM process before the engine is built (``apply(name)``, by the
test harness). Several kinds, in the three places the issue names (the block pool, the
offloading scheduler, the offloading worker), so the tests prove the class, not one instance:

- ``touch-no-ref`` (block pool): a prefix hit that revives a freed block takes no reference
  and leaves it on the free queue (``BlockPool.touch``);
- ``free-twice`` (block pool): freeing a block other requests share drops two references;
- ``no-flush`` (offloading scheduler): a reallocated block's pending stores are never flushed
  (``jobs_to_flush`` always empty): the fence before the next owner's forward is gone;
- ``no-wait`` (offloading worker): the flushed stores are submitted but not waited for;
- ``no-finish-fence`` (offloading scheduler): a finished request's in-flight stores are not
  registered as fences, so its blocks are reused under them;
- ``early-load-done`` (offloading worker): a load is reported done when it is submitted, so
  its request runs on blocks the copy has not written yet.

The last two need copies slow enough to be in flight a step later (the workload's
``--copy-delay-ms``).
"""

from __future__ import annotations

from collections.abc import Callable


def _touch_no_ref() -> None:
    from vllm.v1.core.block_pool import BlockPool

    def touch(self, blocks) -> None:
        for block in blocks:
            if block.ref_cnt == 0:
                continue  # the bug: a revived block stays free, its reference not taken
            block.ref_cnt += 1

    BlockPool.touch = touch


def _free_twice() -> None:
    from vllm.v1.core.block_pool import BlockPool

    original = BlockPool.free_blocks

    def free_blocks(self, ordered_blocks) -> None:
        blocks = list(ordered_blocks)
        for block in blocks:
            if block.ref_cnt >= 2 and (block.pool is None or block.pool is self):
                block.ref_cnt -= 1  # the bug: one reference too many dropped
        original(self, blocks)

    BlockPool.free_blocks = free_blocks


def _no_flush() -> None:
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
        OffloadingConnectorScheduler,
    )

    original = OffloadingConnectorScheduler.build_connector_meta

    def build_connector_meta(self, scheduler_output):
        meta = original(self, scheduler_output)
        meta.jobs_to_flush = set()  # the bug: no fence for reallocated blocks
        return meta

    OffloadingConnectorScheduler.build_connector_meta = build_connector_meta


def _no_wait() -> None:
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.worker import (
        OffloadingConnectorWorker,
    )

    original = OffloadingConnectorWorker.handle_preemptions

    def handle_preemptions(self, kv_connector_metadata) -> None:
        wait = self.worker.wait
        self.worker.wait = lambda job_ids: None  # the bug: the fence does not wait
        try:
            original(self, kv_connector_metadata)
        finally:
            self.worker.wait = wait

    OffloadingConnectorWorker.handle_preemptions = handle_preemptions


def _no_finish_fence() -> None:
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
        OffloadingConnectorScheduler,
    )

    original = OffloadingConnectorScheduler.request_finished

    def request_finished(self, request):
        pending = self._block_id_to_pending_jobs
        self._block_id_to_pending_jobs = {}  # the bug: its fences go nowhere
        try:
            return original(self, request)
        finally:
            self._block_id_to_pending_jobs = pending

    OffloadingConnectorScheduler.request_finished = request_finished


def _early_load_done() -> None:
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.worker import (
        OffloadingConnectorWorker,
    )

    original = OffloadingConnectorWorker.get_finished

    def get_finished(self, finished_req_ids):
        early = self.__dict__.setdefault("_seeded_early", set())
        announced = set()
        for job_id, req_id in list(self._load_jobs.items()):  # the bug: done when submitted
            del self._load_jobs[job_id]
            self._connector_worker_meta.mark_completed(job_id)
            early.add(job_id)
            announced.add(req_id)
        inner = self.worker.get_finished

        def real_ones():
            results = inner()
            out = [r for r in results if r.job_id not in early]
            early.difference_update(r.job_id for r in results)
            return out

        self.worker.get_finished = real_ones
        try:
            sending, receiving = original(self, finished_req_ids)
        finally:
            self.worker.get_finished = inner
        return sending, receiving | announced

    OffloadingConnectorWorker.get_finished = get_finished


BUGS: dict[str, Callable[[], None]] = {
    "touch-no-ref": _touch_no_ref,
    "free-twice": _free_twice,
    "no-flush": _no_flush,
    "no-wait": _no_wait,
    "no-finish-fence": _no_finish_fence,
    "early-load-done": _early_load_done,
}


def apply(name: str) -> None:
    """Seed bug ``name`` into vLLM (before the engine is built)."""
    BUGS[name]()
