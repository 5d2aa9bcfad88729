"""The cache transfer process's parts: it creates the device KV cache the worker attaches to;
its two executors run a swap-out and a swap-in at once; copies merge consecutive blocks."""

import multiprocessing
import os
import queue
import secrets
import threading

import pytest
import torch

from fdprof import semconv as S
from fdprof.engine.config import EngineConfig
from fdprof.engine.integrity import fingerprints
from fdprof.engine.ipc import Control, RunPaths, SwapSignal
from fdprof.engine.messages import SwapTask
from fdprof.engine.process import GroupQueues, ProcessContext, StdStreams
from fdprof.engine.transfer import Transfer, block_runs, create_device_cache
from fdprof.engine.worker import attach_device_cache
from fdprof.probe import ProbeConfig

CFG = EngineConfig(layers=2, kv_heads=2, heads=2, head_dim=4, block_size=2, gpu_blocks=12,
                   cpu_blocks=12, link_gbps=0)  # fmt: skip


@pytest.fixture
def ctx():
    paths = RunPaths(f"fdprof-test-{os.getpid()}-{secrets.token_hex(4)}")
    SwapSignal(paths.signal(0, 0), create=True)
    Control(paths.control, 1, create=True)
    queues = GroupQueues([None], [None], [queue.Queue()], None)
    yield ProcessContext(CFG, ProbeConfig(), 0, paths, queues, None, None, {}, StdStreams(), 0)
    for leftover in paths.leftovers():
        leftover.unlink()


def test_consecutive_pairs_merge_into_runs():
    assert block_runs([3, 4, 5, 9, 10], [0, 1, 2, 7, 9]) == [(3, 0, 3), (9, 7, 1), (10, 9, 1)]
    assert block_runs([2, 1], [5, 6]) == [(2, 5, 1), (1, 6, 1)]
    assert block_runs([], []) == []


def _attach_and_write(c: ProcessContext, done) -> None:
    _, pool, _ = attach_device_cache(c)
    pool[1, 0, 7].fill_(42.0)
    done.set()


def test_the_transfer_process_creates_the_device_cache_and_the_worker_attaches(ctx):
    assert not ctx.paths.gpu_pool(0, 0).exists()
    pool = create_device_cache(ctx, "cpu")
    assert ctx.paths.gpu_pool(0, 0).exists() and pool.shape == CFG.kv_shape(CFG.gpu_blocks)
    mp = multiprocessing.get_context("spawn")
    setup = mp.Queue()
    setup.put(ctx.queues.setup[0].get())  # what create_device_cache told the worker
    done = mp.Event()
    child = ProcessContext(CFG, ProbeConfig(), 0, ctx.paths, GroupQueues([None], [None], [setup],
                           None), None, None, os.getpid(), 0)  # fmt: skip
    worker = mp.Process(target=_attach_and_write, args=(child, done))
    worker.start()
    worker.join(120)
    assert worker.exitcode == 0 and done.is_set()
    assert bool((pool[1, 0, 7] == 42.0).all())  # one memory: the worker's write is seen here


def test_both_directions_are_in_flight_at_once(ctx, monkeypatch):
    """A swap-out and a swap-in meet inside their copies: with one executor for both, the
    second would wait for the first and the barrier would break."""
    meet = threading.Barrier(2, timeout=30)
    copy = Transfer._copy

    def copy_when_both_are_copying(self, *args):
        meet.wait()
        copy(self, *args)

    monkeypatch.setattr(Transfer, "_copy", copy_when_both_are_copying)
    dev = torch.randn(CFG.kv_shape(CFG.gpu_blocks))
    t = Transfer(ctx, "cpu", dev)
    t.host.copy_(torch.randn_like(t.host))
    out_fps = [(fp,) for fp in fingerprints(dev, [3, 4, 5, 9])]
    in_fps = [(fp,) for fp in fingerprints(t.host, [6, 8])]
    swap_out = t.submit(SwapTask(1, S.TO_CPU, [3, 4, 5, 9], [0, 1, 2, 7], out_fps))
    swap_in = t.submit(SwapTask(2, S.TO_GPU, [0, 1], [6, 8], in_fps))
    swap_out.result(60), swap_in.result(60)
    stats = t.close()
    assert torch.equal(t.host[:, :, [0, 1, 2, 7]], dev[:, :, [3, 4, 5, 9]].clone())
    assert torch.equal(dev[:, :, [0, 1]], t.host[:, :, [6, 8]])
    assert (stats.blocks_checked, stats.mismatches) == (6, 0)
    signal = SwapSignal(ctx.paths.signal(0, 0))
    assert signal.done(1) and signal.done(2)
