"""The realistic trace shape for the detector's benchmark, written as Chrome JSON.

A trace of a lock-striped block store, the shape of issue 26's measurements: ``lanes`` threads
of one process, ``locks`` locks (``lock:s<k>``), ``blocks`` KV blocks, every access its own span
(one ``X`` event listing one block), about ``sync_share`` of the events lock acquires and
releases. A thread's work is a run of episodes: mostly a hold of one lock (acquire, ~16 access
spans to blocks of that lock's stripe, ``block % locks == lock``, release), now and then a run
of unguarded reads of any block (``unguarded`` of the accesses: what races). A scheduler starts
each episode on the thread that is free first, and a hold not before its lock is free, so
holds of one lock never overlap (no broken lock), while holds of different locks run at once
on different threads. No sync falls inside a span, and timestamps on a lane are distinct:
every ordering the detector sees is also expressible in RAPID's STD format
(``bench/rapid_std.py``).

Times are epoch nanoseconds written as exact decimal microseconds, as fdprof's writer writes
them. Usage: ``python bench/hazards_shape.py EVENTS OUT.json [--seed N] ...``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: the first timestamp (ns): an epoch time, as a real trace's
T0 = 1_700_000_000_000_000_000
PID = 4242


@dataclass(frozen=True)
class Shape:
    events: int
    lanes: int = 8
    locks: int = 4
    blocks: int = 4096
    sync_share: float = 0.11
    unguarded: float = 0.01
    write_share: float = 0.3
    seed: int = 0

    @property
    def name(self) -> str:
        return (f"shape-{self.events}-l{self.lanes}-k{self.locks}-b{self.blocks}-s{self.sync_share}"
                f"-u{self.unguarded}-w{self.write_share}-r{self.seed}")  # fmt: skip


@dataclass(frozen=True)
class Events:
    """One row per event in global time order: ``kind`` 0 access span, 1 acquire, 2 release;
    ``lane`` (thread index), ``time`` (ns; an access span's start), ``dur`` (an access
    span's), ``block`` and ``write`` (an access's), ``lock`` (a sync's)."""

    kind: np.ndarray
    lane: np.ndarray
    time: np.ndarray
    dur: np.ndarray
    block: np.ndarray
    write: np.ndarray
    lock: np.ndarray


def generate(shape: Shape) -> Events:
    """The events of ``shape`` (module doc), about ``shape.events`` of them."""
    rng = np.random.default_rng(shape.seed)
    # a hold of k accesses is k + 2 events, 2 of them syncs: k = 2 / share - 2 on average
    mean_k = max(1.0, 2.0 / shape.sync_share - 2.0)
    guarded_share = 1.0 - shape.unguarded
    # episodes: holds (k ~ uniform around mean_k) and unguarded runs (4 reads each)
    per_episode = guarded_share * (mean_k + 2) + (1 - guarded_share) * 4
    n_episodes = max(1, int(shape.events / per_episode * 1.05))
    is_hold = rng.random(n_episodes) < guarded_share * (mean_k + 2) / per_episode
    lo, hi = max(1, int(mean_k * 0.5)), max(2, int(round(mean_k * 1.5)))
    size = np.where(is_hold, rng.integers(lo, hi + 1, n_episodes), 4)
    lock = rng.integers(0, shape.locks, n_episodes)
    gap = rng.integers(1, 200, n_episodes)  # ns between a thread's episodes
    span_len = rng.integers(100, 2000, n_episodes)  # ns per access span of the episode
    step = span_len + 50  # a span and the gap after it
    length = size * step + np.where(is_hold, 100, 0)  # an acquire and a release 50 ns around
    free = np.zeros(shape.lanes, dtype=np.int64)  # when each thread is free
    lock_free = np.zeros(shape.locks, dtype=np.int64)
    start = np.empty(n_episodes, dtype=np.int64)
    lane = np.empty(n_episodes, dtype=np.int64)
    # one Python step per episode (about events / 17 of them): the schedule is sequential
    order_rng = rng.random((n_episodes, shape.lanes))
    for e in range(n_episodes):
        f = free + order_rng[e]  # the thread free first, ties broken at random
        th = int(np.argmin(f))
        t = int(free[th]) + int(gap[e])
        if is_hold[e]:
            t = max(t, int(lock_free[lock[e]]) + int(gap[e]))
        end = t + int(length[e])
        if is_hold[e]:
            lock_free[lock[e]] = end
        free[th] = end
        start[e], lane[e] = t, th
    total = size + np.where(is_hold, 2, 0)
    ep = np.repeat(np.arange(n_episodes), total)
    nth = np.arange(len(ep)) - np.repeat(np.cumsum(total) - total, total)
    hold_e = is_hold[ep]
    first, last = hold_e & (nth == 0), hold_e & (nth == total[ep] - 1)
    idx = np.where(hold_e, nth - 1, nth)  # the access's index within its episode
    kind = np.where(first, 1, np.where(last, 2, 0)).astype(np.int8)
    base = start[ep] + np.where(hold_e, 50, 0)
    time = np.where(first, start[ep], np.where(last, start[ep] + length[ep] - 50,
                                                base + idx * step[ep]))  # fmt: skip
    n = len(ep)
    stripe = rng.integers(0, max(1, shape.blocks // shape.locks), n) * shape.locks + lock[ep]
    any_block = rng.integers(0, shape.blocks, n)
    block = np.where(hold_e, np.minimum(stripe, shape.blocks - 1), any_block)
    write = hold_e & (rng.random(n) < shape.write_share) & (kind == 0)
    order = np.lexsort((np.arange(n), time))
    ev = Events(kind[order], lane[ep][order].astype(np.int32), time[order] + T0,
                np.where(kind == 0, span_len[ep], 0)[order], block[order], write[order],
                lock[ep][order].astype(np.int32))  # fmt: skip
    return _cut(ev, shape.events)


def _cut(ev: Events, events: int) -> Events:
    """The first ``events`` events (a hold cut at the end keeps its acquire only: the lock is
    left held, which orders nothing more)."""
    return Events(*(getattr(ev, f)[:events] for f in Events.__dataclass_fields__))


def _us(ns: np.ndarray) -> np.ndarray:
    """Nanoseconds as exact decimal microsecond texts."""
    whole, frac = np.divmod(ns, 1000)
    return np.char.add(np.char.add(whole.astype(str), "."),
                       np.char.zfill(frac.astype(str), 3))  # fmt: skip


def write_chrome(ev: Events, path: Path, chunk: int = 1 << 20) -> None:
    """``ev`` as a Chrome trace, one event per line (as fdprof's writer and PyTorch write)."""
    with path.open("w") as f:
        f.write('{"traceEvents":[\n')
        f.write(f'{{"ph":"M","name":"process_name","pid":{PID},"tid":0,'
                '"args":{"name":"store","fd.anchored":true}}')  # fmt: skip
        for lo in range(0, len(ev.kind), chunk):
            sl = slice(lo, lo + chunk)
            kind, lane = ev.kind[sl], ev.lane[sl]
            ts, dur = _us(ev.time[sl]), _us(ev.dur[sl])
            tid = (lane + 1).astype(str)
            block, write, lock = ev.block[sl].astype(str), ev.write[sl], ev.lock[sl].astype(str)
            lines = []
            for k, t, d, th, b, w, lk in zip(kind.tolist(), ts.tolist(), dur.tolist(),
                                             tid.tolist(), block.tolist(), write.tolist(),
                                             lock.tolist(), strict=True):  # fmt: skip
                if k == 0:
                    mode = "write" if w else "read"
                    lines.append(
                        f',\n{{"ph":"X","name":"{mode}","pid":{PID},"tid":{th},'
                        f'"ts":{t},"dur":{d},"args":{{"kv.gpu_{mode}":[{b}]}}}}'
                    )
                else:
                    op = "acquire" if k == 1 else "release"
                    lines.append(f',\n{{"ph":"i","s":"t","name":"{op}","pid":{PID},'
                                 f'"tid":{th},"ts":{t},"args":{{"sync.op":"{op}",'
                                 f'"sync.obj":"lock:s{lk}"}}}}')  # fmt: skip
            f.write("".join(lines))
        f.write("\n]}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("events", type=float)
    ap.add_argument("out", type=Path)
    for field in ("lanes", "locks", "blocks", "seed"):
        ap.add_argument(f"--{field}", type=int, default=Shape.__dataclass_fields__[field].default)
    for field in ("sync_share", "unguarded", "write_share"):
        ap.add_argument(f"--{field.replace('_', '-')}", dest=field, type=float,
                        default=Shape.__dataclass_fields__[field].default)  # fmt: skip
    a = ap.parse_args()
    shape = Shape(int(a.events), a.lanes, a.locks, a.blocks, a.sync_share, a.unguarded,
                  a.write_share, a.seed)  # fmt: skip
    write_chrome(generate(shape), a.out)


if __name__ == "__main__":
    main()
