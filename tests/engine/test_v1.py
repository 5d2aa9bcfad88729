"""Cache Manager V1 in the scheduler and the cache manager alone (no process: the test is the
worker and the transfer side, as in test_scheduler.py): swap-ins the request does not wait for,
swap-outs finished when their completion is polled, loads split at transfer chunks, overlap
scheduling's fenced reuse, and the settings V1 and its faults run with."""

import pytest

from fdprof.engine.cache_manager import CacheManager
from fdprof.engine.config import FAULT_HELP, V1_FAULTS, EngineConfig, fault_modes
from fdprof.engine.messages import Batch, StepResult
from fdprof.engine.scheduler import Scheduler
from fdprof.engine.workloads import RequestSpec
from fdprof.errors import FdprofError
from fdprof.semconv import Fault
from tests.engine.test_scheduler import RecordingPort

BS = 4
V1 = EngineConfig(cache_manager="v1", block_size=BS, gpu_blocks=12, cpu_blocks=16, max_batch=2,
                  max_new_tokens=2)  # fmt: skip
PREFIX = list(range(100, 112))  # three full blocks


def engine(specs, cfg=V1):
    port = RecordingPort()
    cm = CacheManager(cfg, 0, port)
    return Scheduler(cfg, 0, specs, cm), cm, port


def answer(batch: Batch) -> StepResult:
    filled = {}
    for s in batch.seqs:
        for pos in range(s.start, s.start + len(s.tokens)):
            if (pos + 1) % BS == 0:
                filled[s.block_table[pos // BS]] = (1000 + s.block_table[pos // BS],)
    return StepResult(batch.step, batch.seq, [7] * len(batch.seqs), filled)


def serve(sched: Scheduler) -> None:
    while sched.unfinished:
        sched.admit()
        batch = sched.schedule()
        sched.update(batch, answer(batch))


def evict(cm: CacheManager, port: RecordingPort, blocks: int) -> list:
    """Swap ``blocks`` device blocks out as V1 does (no wait), then complete and poll them."""
    before = len(port.tasks)
    cm.want_free(cm.gpu.num_free + blocks)
    while cm.evict_once():
        pass
    tasks = port.tasks[before:]
    assert cm.evicting and not port.waited, "V1 issues swap-outs without waiting"
    port.completed.update(t.task_id for t in tasks)
    cm.poll_evictions()
    assert not cm.evicting
    return tasks


def test_a_prefix_tail_is_evicted_first_and_a_swap_in_is_not_waited_for():
    sched, cm, port = engine([RequestSpec(0, [*PREFIX, 1], 2)])
    sched.admit()
    prefix_blocks = sched.running[0].adm.table[:3]
    serve(sched)  # its prefix cached, unreferenced
    (out,) = evict(cm, port, 2)
    assert out.gpu_blocks == prefix_blocks[:0:-1], "the tail (last blocks) goes first"
    sched = Scheduler(V1, 0, [RequestSpec(1, [*PREFIX, 2], 2)], cm)
    sched.admit()  # its first block is on the device, the other two on the host
    (load,) = port.tasks[1:]
    assert load.cpu_blocks == out.cpu_blocks[::-1] and not port.waited, "issued, not waited for"
    assert not sched.loading and len(sched.running) == 1, "scheduled at once"
    batch = sched.schedule()
    assert batch.after_swap_in == load.task_id, "its forward waits per layer for that load"
    port.completed.add(load.task_id)
    sched.update(batch, answer(batch))
    sched.schedule()  # polls the load: its host copies are given back
    assert cm.cpu.num_free == V1.cpu_blocks


def _partial_prefix(cfg: EngineConfig):
    """Request 1 arrives when its prefix's first block is on the device (held by request 0,
    still running) and the other two on the host; returns (its load, request 0's table)."""
    sched, cm, port = engine([RequestSpec(0, [*PREFIX, 1], 2)], cfg)
    serve(sched)
    evict(cm, port, 2)
    holder = Scheduler(cfg, 0, [RequestSpec(1, PREFIX[:4] + [3, 4, 5, 6], 2)], cm)
    holder.admit()  # holds block 0 of the prefix
    loader = Scheduler(cfg, 0, [RequestSpec(2, [*PREFIX, 9], 2)], cm)
    loader.admit()
    return port.tasks[-1], loader.running[0].adm.table


def test_a_load_is_split_at_transfer_chunks_and_writes_only_its_blocks():
    load, table = _partial_prefix(V1.with_(chunk_tokens=6))
    # prefix blocks 1 and 2 (tokens 4-7, 8-11): block 1 split at the chunk boundary at 6
    c1, c2 = load.cpu_blocks
    split = [(c1, 0, table[1], 0, 2), (c1, 2, table[1], 2, 2), (c2, 0, table[2], 0, 4)]
    assert load.pieces == split
    load, _ = _partial_prefix(V1)  # chunk = block: whole blocks
    assert [p[4] for p in load.pieces] == [BS, BS]


def test_shared_prefix_streams_writes_the_block_another_request_holds():
    cfg = V1.with_(chunk_tokens=6, fault="shared-prefix-streams")
    assert cfg.chunk == 6, "a chunk other than the block size is kept"
    load, table = _partial_prefix(cfg)
    written = {p[2] for p in load.pieces}
    assert table[0] in written, "placed from the chunk boundary at 0, not from block 1 at 4"
    # with chunk = block it would write nothing it should not (LMCache's tests missed it so):
    # the fault turns on a chunk that is not the block size
    assert V1.with_(fault="shared-prefix-streams", chunk_tokens=BS).chunk == 24


def test_overlap_scheduling_fences_a_load_into_a_finishing_requests_blocks():
    """A request whose last step is dispatched leaves its slot; a load admitted meanwhile may
    take its own blocks when the free list is short, fenced behind that step; the rest come
    back with the step's result."""
    cfg = V1.with_(gpu_blocks=9, max_batch=1)
    sched, cm, port = engine([RequestSpec(0, [*PREFIX, 1], 2)], cfg)
    serve(sched)
    evict(cm, port, 3)  # the whole prefix on the host
    sched = Scheduler(cfg, 0, [RequestSpec(1, [1, 2, 3, 4, 5, 6, 7, 8, 9], 1),
                               RequestSpec(2, [*PREFIX, 2], 1)], cm)  # fmt: skip
    assert sched.admit() == [1]
    last = sched.schedule()  # request 1's only step: it is released as it is dispatched
    own = set(last.seqs[0].block_table)
    cm.gpu.allocate(cm.gpu.num_free - 2)  # the free list is short now
    assert sched.admit() == [2], "admitted while request 1's last step still runs"
    load = port.tasks[-1]
    assert set(load.gpu_blocks) & own, "the load took blocks of the finishing request"
    assert load.after_step == last.seq, "and waits for its last step"
    free = cm.gpu.num_free
    sched.update(last, answer(last))
    assert cm.gpu.num_free == free + len(own - set(load.gpu_blocks)), "the rest come back"


def test_with_the_lock_a_load_never_waits_for_a_step():
    """Under the lock the cache manager holds it until a swap has completed; a load waiting for
    a step the worker needs the lock to run would deadlock, so V1 with the lock takes only
    free blocks for its loads (as the old baseline does)."""
    cfg = V1.with_(gpu_blocks=9, max_batch=1, kv_lock="ipc")
    sched, cm, port = engine([RequestSpec(0, [*PREFIX, 1], 2)], cfg)
    serve(sched)
    cm.want_free(cm.gpu.num_free + 3)
    while cm.evict_once():  # synchronous under the lock: done when issued
        pass
    sched = Scheduler(cfg, 0, [RequestSpec(1, [1, 2, 3, 4, 5, 6, 7, 8, 9], 1),
                               RequestSpec(2, [*PREFIX, 2], 1)], cm)  # fmt: skip
    sched.admit()
    last = sched.schedule()
    cm.gpu.allocate(cm.gpu.num_free - 2)
    sched.admit()  # not enough free blocks without the finishing request's: it waits
    assert all(t.after_step == 0 for t in port.tasks)
    sched.update(last, answer(last))
    assert sched.admit() == [2] and port.tasks[-1].after_step == 0


@pytest.mark.parametrize("fault", V1_FAULTS)
def test_a_v1_fault_turns_on_what_it_needs_and_says_so(fault):
    cfg = EngineConfig(fault=fault)
    assert cfg.cache_manager == "v1" and fault_modes(cfg)["cache_manager"] == "v1"
    assert fault in FAULT_HELP


def test_every_fault_has_its_help():
    assert set(FAULT_HELP) == set(Fault)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"cache_manager": "v1", "swap_in": "async"}, "runs without --swap-in async"),
        ({"cache_manager": "v1", "device_async": True}, "--device-async"),
        ({"cache_manager": "v1", "fault": "no-wait-swap-in"}, "on the old cache manager"),
        ({"cache_manager": "v2"}, "--cache-manager must be one of"),
        ({"chunk_tokens": 0}, "--chunk-tokens must be at least 1"),
    ],
)
def test_settings_v1_refuses(settings, message):
    with pytest.raises(FdprofError, match=message):
        EngineConfig(**settings)
