"""Synthetic engine-shaped traces, built with numpy: for benchmarks (10^5..10^7 accesses)
and for tests that need a whole run without starting the engine. A fixture, not fdprof: tests
import it from here (``tests/conftest.py`` puts this folder on the path), the benchmarks too.

The protocol is the engine's: the scheduler (lane ``1/1``) issues swap task *i* on
``queue:swap``, the transfer process (``2/1``) copies cpu blocks into the gpu blocks step *i*
will read and releases ``signal:swap_done`` *i*, the scheduler waits on it, dispatches the
batch on ``queue:batch`` and collects ``queue:result``; the worker (``3/1``) runs
``execute_model``. ``baseline`` serializes swap and compute under ``lock:kv``; ``lockless``
issues step *i+1*'s swap while step *i* computes. ``fault="no-wait-swap-in"`` skips the wait
on every ``fault_every``-th step: a real race for the detector to find.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from fdprof.errors import FdprofError
from fdprof.trace import attrs as A
from fdprof.trace.conventions import accesses_from_attrs
from fdprof.trace.model import Trace, frame

ENGINE, TRANSFER, WORKER = "1/1", "2/1", "3/1"
MODES = ("baseline", "lockless")


def engine_trace(
    steps: int,
    *,
    mode: str = "lockless",
    blocks_per_step: int = 16,
    swap_blocks: int = 4,
    writes_per_step: int = 2,
    compute_ns: int = 2_000_000,
    swap_ns: int = 1_500_000,
    tokens_per_step: int = 64,
    fault: str | None = None,
    fault_every: int = 10,
    seed: int = 0,
    ownership: bool = False,
    ownership_every: int = 1,
) -> Trace:
    """A run of ``steps`` steps with ``blocks_per_step + writes_per_step + 2*swap_blocks``
    accesses each. ``ownership``: each step is also one request's: before the step is
    dispatched, the request two steps back releases its blocks and the pool frees (``unref``)
    the ones it wrote, the step's written blocks are handed out fresh and the step's request
    holds all its blocks; its ``execute_model`` has a ``scheduled_request`` child naming them
    (a clean ownership history, for the cost of the check). ``ownership_every`` k: only every
    k-th step is a request's (the others write as the same content's generation): about 1.7
    events per access at k=1, 0.17 at k=10, as a vLLM run's 0.15."""
    if mode not in MODES:
        raise FdprofError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if fault not in (None, "no-wait-swap-in"):
        raise FdprofError(f"unknown synthetic fault {fault!r}")
    rng = np.random.default_rng(seed)
    i = np.arange(steps, dtype=np.int64)
    comp = (compute_ns * rng.lognormal(0, 0.1, steps)).astype(np.int64)
    swap = (swap_ns * rng.lognormal(0, 0.2, steps)).astype(np.int64)
    waits = np.ones(steps, dtype=bool)
    if fault:
        waits[i % fault_every == fault_every - 1] = False
    serial = mode == "baseline"
    dur = swap + comp + 17 if serial else np.maximum(comp + 5, swap + 8) + 1
    t0 = 1_000 + np.concatenate([[0], np.cumsum(dur + 2)[:-1]])
    end = t0 + dur
    s = _Tables()
    s.span(ENGINE, "step", t0, end, "engine", i)
    if mode == "baseline":
        issue = t0 + 3
        swap_start = t0 + 6
        s.sync("acquire", "lock:kv", t0 + 1, ENGINE)
        s.span(ENGINE, "lock_hold", t0 + 1, t0 + 9 + swap, "cache_manager", i)
        s.sync("release", "lock:kv", t0 + 9 + swap, ENGINE)
        dispatch = t0 + 10 + swap
        s.span(WORKER, "lock_wait", dispatch + 1, dispatch + 2, "worker", i)
        s.sync("acquire", "lock:kv", dispatch + 2, WORKER)
        ex_start = dispatch + 3
        s.span(WORKER, "lock_hold", dispatch + 2, ex_start + comp + 1, "worker", i)
        s.sync("release", "lock:kv", ex_start + comp + 1, WORKER)
        swap_seq = i
        wait_at = t0 + 8 + swap
        s.span(ENGINE, "issue_swap_task", t0 + 2, t0 + 9 + swap, "cache_manager", i)
    else:
        # step i's batch goes out first; step i+1's swap runs under its compute
        dispatch = t0 + 1
        ex_start = t0 + 3
        issue = t0 + 3
        swap_start = t0 + 5
        swap_seq = i + 1
        wait_at = t0 + 7 + swap
        s.span(ENGINE, "issue_swap_task", t0 + 2, wait_at + 1, "cache_manager", i + 1)
    s.sync("release", "queue:swap", issue, ENGINE, swap_seq)
    s.sync("acquire", "queue:swap", issue + 1, TRANSFER, swap_seq)
    sw = s.span(TRANSFER, "swap", swap_start, swap_start + swap, "transfer", swap_seq)
    s.sync("release", "signal:swap_done", swap_start + swap + 1, TRANSFER, swap_seq)
    waited = waits[np.minimum(swap_seq, steps - 1)]
    s.sync("acquire", "signal:swap_done", wait_at[waited], ENGINE, swap_seq[waited])
    s.sync("release", "queue:batch", dispatch, ENGINE, i)
    s.sync("acquire", "queue:batch", dispatch + 1, WORKER, i)
    ex = s.span(WORKER, "execute_model", ex_start, ex_start + comp, "worker", i)
    s.sync("release", "queue:result", ex_start + comp + 1, WORKER, i)
    s.sync("acquire", "queue:result", end - 1, ENGINE, i)

    window = 2 * blocks_per_step + 2 * writes_per_step
    gpu = (i[:, None] % 2) * (window // 2) + np.arange(blocks_per_step + writes_per_step)
    s.access(ex, "gpu", gpu[:, :blocks_per_step], "read")
    s.access(ex, "gpu", gpu[:, blocks_per_step:], "write")
    target = (swap_seq[:, None] % 2) * (window // 2) + np.arange(swap_blocks)
    s.access(sw, "cpu", (swap_seq[:, None] * swap_blocks + np.arange(swap_blocks)), "read")
    s.access(sw, "gpu", target, "write")
    s.attr(ex, "batch.tokens", np.full(steps, tokens_per_step))
    if ownership:
        _ownership(s, gpu, blocks_per_step, t0, ex, ex_start, ownership_every)
    return s.build({"source": "synthetic", "mode": mode, "fault": fault, "seed": seed})


def _ownership(s, gpu, reads, t0, ex, ex_start, every) -> None:
    """The ownership events of :func:`engine_trace` (its docstring), on the engine lane at
    every ``every``-th step's start: release and unref (by the last such request on the same
    window of blocks), alloc, hold; then the uses."""
    i = np.arange(0, len(t0), every, dtype=np.int64)
    lag = 1 if every % 2 == 0 else 2  # the last request on the same window of blocks
    back, later = i[:-lag], i[lag:]
    rel = s.span(ENGINE, "block_release", t0[later], t0[later], "engine", later)
    s.access(rel, "gpu", gpu[back], "release")
    s.attr(rel, "fd.request_id", back)
    unref = s.span(ENGINE, "block_free", t0[later], t0[later], "engine", later)
    s.access(unref, "gpu", gpu[back, reads:], "unref")
    alloc = s.span(ENGINE, "block_alloc", t0[i], t0[i], "engine", i)
    s.access(alloc, "gpu", gpu[i, reads:], "alloc")
    s.attr(alloc, "fd.request_id", i)
    hold = s.span(ENGINE, "block_hold", t0[i], t0[i], "engine", i)
    s.access(hold, "gpu", gpu[i], "hold")
    s.attr(hold, "fd.request_id", i)
    at = ex_start[i]
    use = s.span(WORKER, "scheduled_request", at, at, "worker", i, parent=ex[i])
    s.access(use, "kv", gpu[i], "blocks")
    s.attr(use, "fd.request_id", i)


class _Tables:
    """Column chunks appended per span kind, concatenated once; attributes typed as the native
    reader types them, and accesses derived from the ``kv.*`` lists by the trace conventions,
    exactly as for a recorded run."""

    def __init__(self) -> None:
        self.spans: list[dict] = []
        self.syncs: list[dict] = []
        self.attrs = A.AttrsBuilder()
        self.next_id = 1

    def span(self, lane, name, start, end, role, step, parent=None) -> np.ndarray:
        n = len(start)
        ids = np.arange(self.next_id, self.next_id + n, dtype=np.int64)
        self.next_id += n
        pid, tid = (int(x) for x in lane.split("/"))
        parents = np.zeros(n, np.int64) if parent is None else parent
        self.spans.append({"span_id": ids, "parent_id": parents, "name": name,
                           "start": start, "end": end, "pid": pid, "tid": tid, "lane": lane,
                           "role": role, "step": step, "trace_id": ""})  # fmt: skip
        return ids

    def sync(self, op, obj, time, lane, seq=None) -> None:
        n = len(time)
        pid, tid = (int(x) for x in lane.split("/"))
        self.syncs.append({"op": op, "obj": obj, "seq": np.full(n, -1) if seq is None else seq,
                           "keyed": np.full(n, seq is not None), "time": time, "pid": pid,
                           "tid": tid, "lane": lane, "span_id": np.zeros(n, np.int64)})  # fmt: skip

    def access(self, ids, pool, blocks, mode) -> None:
        """The ``kv.<pool>_<mode>`` block-list attribute (a row of ``blocks`` per span), as the
        probe records it (``kv.kv_blocks``: ``kv.blocks``)."""
        rows, width = blocks.shape
        offsets = pa.array(np.arange(0, rows * width + 1, width, dtype=np.int32))
        lists = pa.ListArray.from_arrays(offsets, pa.array(blocks.ravel().astype(np.int64)))
        key = "kv.blocks" if pool == "kv" else f"kv.{pool}_{mode}"
        self.attrs.add(key, ids, lists, A.INTS)

    def attr(self, ids, key, values) -> None:
        self.attrs.add(key, ids, pa.array(np.asarray(values, dtype=np.int64)), A.INT)

    def build(self, meta: dict) -> Trace:
        attrs = self.attrs.build()
        return Trace(
            spans=_concat("spans", self.spans),
            accesses=accesses_from_attrs(attrs),
            syncs=_concat("syncs", self.syncs),
            attrs=attrs,
            meta=meta,
        )


def _concat(table: str, chunks: list[dict]) -> pd.DataFrame:
    cols: dict[str, list] = {}
    for chunk in chunks:
        n = max(len(v) for v in chunk.values() if isinstance(v, np.ndarray | list))
        for c, v in chunk.items():
            cols.setdefault(c, []).append(
                np.asarray(v) if isinstance(v, np.ndarray | list) else np.full(n, v)
            )
    return frame(table, {c: np.concatenate(v) for c, v in cols.items()})
