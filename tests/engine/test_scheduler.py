"""The scheduler and the cache manager alone: no process, queue or thread. The test is the
worker (it builds each StepResult by hand) and the transfer side (a port that records tasks)."""

import pytest

from fdprof import semconv as S
from fdprof.engine.cache_manager import CacheManager
from fdprof.engine.config import EngineConfig
from fdprof.engine.messages import Batch, StepResult, SwapTask
from fdprof.engine.scheduler import Scheduler
from fdprof.engine.workloads import RequestSpec

BS = 4
CFG = EngineConfig(block_size=BS, gpu_blocks=12, cpu_blocks=16, max_batch=2, max_new_tokens=2)
PREFIX = list(range(100, 108))  # two full blocks


class RecordingPort:
    """The transfer side: every task is done by the time it is waited for."""

    def __init__(self) -> None:
        self.tasks: list[SwapTask] = []
        self.waited: list[int] = []
        #: tasks an asynchronous poll sees done (the test completes them)
        self.completed: set[int] = set()

    def submit(self, task: SwapTask) -> None:
        self.tasks.append(task)

    def wait(self, task_id: int) -> None:
        self.waited.append(task_id)

    def done(self, task_id: int) -> bool:
        return task_id in self.completed


def engine(specs, cfg=CFG):
    port = RecordingPort()
    cm = CacheManager(cfg, 0, port)
    return Scheduler(cfg, 0, specs, cm), cm, port


def answer(batch: Batch, token: int = 7) -> StepResult:
    """What a worker would return: one token per sequence, a fingerprint per filled block."""
    filled = {}
    for s in batch.seqs:
        for pos in range(s.start, s.start + len(s.tokens)):
            if (pos + 1) % BS == 0:
                filled[s.block_table[pos // BS]] = (1000 + s.block_table[pos // BS],)
    return StepResult(batch.step, batch.seq, [token] * len(batch.seqs), filled)


def serve(sched: Scheduler) -> None:
    while sched.unfinished:
        sched.admit()
        batch = sched.schedule()
        assert batch is not None
        sched.update(batch, answer(batch))


def test_a_request_from_admission_to_its_last_token():
    sched, cm, _ = engine([RequestSpec(0, PREFIX + [1, 2], 2)])
    assert sched.schedule() is None  # nothing admitted yet
    assert sched.admit() == [0]
    first = sched.schedule()
    (seq,) = first.seqs
    assert (seq.start, seq.tokens) == (0, PREFIX + [1, 2])
    assert len(seq.block_table) == 3  # 10 prompt tokens + 1 new K/V: 11 positions
    assert cm.gpu.num_free == CFG.gpu_blocks - 3
    assert sched.update(first, answer(first, token=5)) == []
    second = sched.schedule()
    assert (second.seqs[0].start, second.seqs[0].tokens) == (10, [5])
    assert sched.update(second, answer(second, token=6)) == [0]
    assert sched.outputs == {0: [5, 6]} and not sched.unfinished
    # the two full prefix blocks stay cached (unreferenced); the private one is free again
    assert cm.gpu.num_free == CFG.gpu_blocks - 2
    assert [e.ref for e in cm.cache.evictable(10)] == [0, 0]


def test_a_cached_prefix_is_reused_and_checked_against_its_fingerprints():
    sched, cm, _ = engine([RequestSpec(0, PREFIX + [1, 2], 2), RequestSpec(1, PREFIX + [3], 2)])
    sched.admit()  # both at once: the second finds nothing cached yet
    first = sched.schedule()
    table0 = first.seqs[0].block_table
    assert first.seqs[1].start == 0 and first.seqs[1].block_table[:2] != table0[:2]
    sched.update(first, answer(first))
    serve(sched)
    later = Scheduler(CFG, 0, [RequestSpec(2, PREFIX + [9], 2)], cm)
    later.admit()
    (seq,) = later.schedule().seqs
    assert seq.start == 8 and seq.tokens == [9]
    assert seq.block_table[:2] == table0[:2]
    assert seq.check_blocks == table0[:2]
    assert seq.check_fps == [(1000 + b,) for b in table0[:2]]


def test_eviction_swaps_out_then_a_match_swaps_back_in():
    sched, cm, port = engine([RequestSpec(0, PREFIX + [1], 1)])
    serve(sched)
    cached = sorted(e.gpu for e in cm.cache.evictable(10))
    assert len(cached) == 2
    cm.want_free(CFG.gpu_blocks)
    assert cm.evict_once()
    (out,) = port.tasks
    assert out.direction == S.TO_CPU and sorted(out.gpu_blocks) == cached
    assert out.fps == [(1000 + b,) for b in out.gpu_blocks] and port.waited == [out.task_id]
    assert cm.gpu.num_free == CFG.gpu_blocks and cm.cpu.num_free == CFG.cpu_blocks - 2
    assert not cm.evict_once()  # nothing left on the device

    later = Scheduler(CFG, 0, [RequestSpec(1, PREFIX + [4], 1)], cm)
    later.admit()
    (inn,) = port.tasks[1:]
    assert inn.direction == S.TO_GPU and inn.cpu_blocks == out.cpu_blocks
    assert inn.fps == out.fps and port.waited[-1] == inn.task_id  # synchronous swap-in
    (seq,) = later.schedule().seqs
    assert seq.block_table[:2] == inn.gpu_blocks and seq.start == 8
    assert cm.cpu.num_free == CFG.cpu_blocks  # the host copies are dropped once back in


def test_admission_stops_at_the_batch_size_and_at_a_full_pool():
    specs = [RequestSpec(i, [i] * 9, 2) for i in range(3)]  # 3 blocks each
    sched, _, _ = engine(specs)
    assert sched.admit() == [0, 1]  # max_batch 2
    small = CFG.with_(gpu_blocks=5, max_batch=8)
    sched, cm, _ = engine(specs, small)
    assert sched.admit() == [0] and cm.gpu.num_free == 2
    assert sched.blocks_wanted() == 6  # the next two need 3 each


def test_a_result_of_another_step_is_refused():
    sched, _, _ = engine([RequestSpec(0, PREFIX, 2)])
    sched.admit()
    batch = sched.schedule()
    with pytest.raises(ValueError):
        sched.update(batch, StepResult(batch.step + 1, batch.seq + 1, [1], {}))


def test_a_request_that_does_not_fit_waits_for_eviction_once():
    """As FastDeploy's scheduler in can_allocate_gpu_blocks: when the pool is short it waits
    for eviction (here done inline by the test's callback) and is admitted in the same call."""
    small = CFG.with_(gpu_blocks=4)
    sched, cm, port = engine([RequestSpec(0, PREFIX + [1], 1)], small)
    serve(sched)  # leaves the 2 prefix blocks cached on the device: 2 free
    asked = []

    def evict(n: int) -> None:
        asked.append(n)
        cm.want_free(n)
        while cm.evict_once():
            pass

    later = Scheduler(small, 0, [RequestSpec(1, [5] * 9, 1)], cm, wait_for_room=evict)
    assert later.admit() == [1]  # needs 3: evicted 2 to the host, then fitted
    assert asked == [3] and port.tasks[-1].direction == S.TO_CPU


def test_an_async_swap_in_waits_in_its_own_state_while_others_run():
    """vLLM's asynchronous KV loading: the request whose prefix comes back from the host is not
    scheduled until its swap-in has completed; a request that needs no swap runs meanwhile,
    and one that matches the same prefix waits for the same swap-in."""
    cfg = CFG.with_(swap_in="async", max_batch=4)
    sched, cm, port = engine([RequestSpec(0, PREFIX + [1], 1)], cfg)
    serve(sched)
    cm.want_free(cfg.gpu_blocks)
    assert cm.evict_once()  # the prefix is on the host only now
    specs = [RequestSpec(1, PREFIX + [2], 2), RequestSpec(2, [9] * 6, 3),
             RequestSpec(3, PREFIX + [3], 2)]  # fmt: skip
    later = Scheduler(cfg, 0, specs, cm)
    assert later.admit() == [1, 2, 3]
    (swap_in,) = [t for t in port.tasks if t.direction == S.TO_GPU]
    assert swap_in.task_id not in port.waited  # admission did not wait
    assert [r.spec.request_id for r in later.loading] == [1, 3]  # 3 shares 1's swap-in
    first = later.schedule()
    assert [s.request_id for s in first.seqs] == [2]  # the others keep running
    later.update(first, answer(first))
    second = later.schedule()
    assert [s.request_id for s in second.seqs] == [2]
    later.update(second, answer(second))
    port.completed.add(swap_in.task_id)
    b = later.schedule()
    assert [s.request_id for s in b.seqs] == [2, 1, 3]
    assert b.seqs[1].block_table[:2] == b.seqs[2].block_table[:2] == swap_in.gpu_blocks
    assert cm.cpu.num_free == cfg.cpu_blocks  # host copies dropped once the load was seen
