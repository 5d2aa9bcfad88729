"""``hazards`` at scale: in process against ``--dask local:N``, on synthetic Parquet stores of
10^5..10^8 KV-block accesses.

The shape is the realistic one of issue 26: 8 lanes (threads of 2 processes), 4 locks
(``lock:k`` guards the blocks ``block % 4 == k``), 4,096 blocks, every access its own span, a
hold of 16 accesses between an acquire and a release (sync events ~11% of the events), a
quarter of the accesses writes. Four lanes hold the four locks at a time and the holders rotate,
so every lock's holds pass from lane to lane: a correct trace (0 races) with 2.5% of its events
cross-lane edges. The store is written chunk by chunk (never the whole trace in memory); it has
no attributes (the analyses read the access table).

Each (path, size) runs the real command line (``fdprof hazards STORE --json``, with or without
``--dask local:N``) in a fresh process tree; CPU is the user+system time of the whole tree
(client, scheduler, workers: every descendant is reaped, so ``RUSAGE_CHILDREN`` holds it),
peak memory the largest sum of the tree's resident sets (sampled every 0.2 s). Prints, side by
side, wall and CPU seconds, CPU µs per access, peak RSS, the growth of CPU per 10x, and the
ratio of the Dask path's CPU per access at the largest size to the in-process path's at its
largest. Usage: ``python bench/bench_scale.py [--sizes 1e5,1e6,1e7] [--dask-sizes 1e5,...,1e8]
[--workers 2] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fdprof.trace import store  # noqa: E402
from fdprof.trace.model import frame  # noqa: E402

LANES, LOCKS, BLOCKS, HOLD = 8, 4, 4096, 16
SLOT_NS = 256  # one hold: acquire, 16 accesses of 8 ns every 10 ns, release
HOLDS_PER_CHUNK = 1 << 17


def _lane_of(slot: np.ndarray, lock: np.ndarray) -> np.ndarray:
    """The lane holding ``lock`` in ``slot``: lanes of the slot's parity, rotating."""
    return 2 * ((lock - slot) % LOCKS) + slot % 2


def _text(values: list[str], codes: np.ndarray) -> pa.Array:
    """Strings by code, as the store's large strings (one take from the distinct ones)."""
    return pa.array(values, store.TEXT).take(pa.array(codes))


def _table(name: str, columns: dict) -> pa.Table:
    schema = store.table_schema(name)
    arrays = [c if isinstance(c := columns[f.name], pa.Array) else pa.array(c, f.type)
              for f in schema]  # fmt: skip
    return pa.Table.from_arrays(arrays, schema=schema)


def write_store(path: Path, accesses: int, seed: int = 0) -> None:
    """The synthetic trace of ``accesses`` accesses as a store at ``path``, chunk by chunk,
    straight from numpy into Arrow (the trace is never whole in memory)."""
    rng = np.random.default_rng(seed)
    holds = accesses // HOLD
    buckets = store.buckets_for(accesses)
    writer = store.StoreWriter(path, buckets)
    lanes = [f"{1 + lane // 4}/{lane}" for lane in range(LANES)]
    locks = [f"lock:{k}" for k in range(LOCKS)]
    for c, first in enumerate(range(0, holds, HOLDS_PER_CHUNK)):
        window = f"{c:06d}"
        h = np.arange(first, min(holds, first + HOLDS_PER_CHUNK), dtype=np.int64)
        slot, lock = h // LOCKS, h % LOCKS
        lane = _lane_of(slot, lock)
        t0 = 1_700_000_000_000_000_000 + slot * SLOT_NS
        n = len(h) * HOLD
        hold_of = np.repeat(np.arange(len(h)), HOLD)
        span_id = first * HOLD + np.arange(n, dtype=np.int64) + 1
        start = t0[hold_of] + 1 + 10 * np.tile(np.arange(HOLD), len(h))
        a_lane = lane[hold_of]
        pid = 1 + a_lane // 4
        lane_text = _text(lanes, a_lane)
        zeros, minus = np.zeros(n, np.int64), np.full(n, -1, np.int64)
        writer.put(_table("spans", {
            "span_id": span_id, "parent_id": zeros, "name": _text(["access"], zeros),
            "start": start, "end": start + 8, "pid": pid, "tid": a_lane, "lane": lane_text,
            "role": _text(["worker"], zeros), "step": minus,
            "trace_id": pa.nulls(n, store.TEXT),
        }), "spans", window)  # fmt: skip
        block = rng.integers(0, BLOCKS // LOCKS, n) * LOCKS + lock[hold_of]
        write = (rng.random(n) < 0.25).astype(np.int64)
        acc = _table("accesses", {
            "span_id": span_id, "pool": _text(["gpu"], zeros), "block": block,
            "mode": _text(["read", "write"], write), "layer_lo": minus, "layer_hi": minus,
            "span_start": start, "span_end": start + 8, "span_lane": lane_text, "span_pid": pid,
        })  # fmt: skip
        bucket = block % buckets
        order = np.argsort(bucket, kind="stable")
        bounds = np.searchsorted(bucket[order], np.arange(buckets + 1))
        for b in range(buckets):
            writer.put(acc.take(pa.array(order[bounds[b] : bounds[b + 1]])),
                       f"accesses/bucket={b}", window)  # fmt: skip
        m = len(h)
        s_lane = np.repeat(lane, 2)
        writer.put(_table("syncs", {
            "op": _text(["acquire", "release"], np.tile([0, 1], m)),
            "obj": _text(locks, np.repeat(lock, 2)), "seq": np.full(2 * m, -1, np.int64),
            "keyed": np.zeros(2 * m, bool), "time": np.stack([t0, t0 + SLOT_NS - 40], 1).ravel(),
            "pid": 1 + s_lane // 4, "tid": s_lane, "lane": _text(lanes, s_lane),
            "span_id": np.zeros(2 * m, np.int64),
        }), "syncs", window)  # fmt: skip
    processes = frame("processes", {
        "pid": np.array([1, 2]), "role": np.array(["worker"] * 2, object),
        "name": np.array(["worker"] * 2, object), "anchored": np.ones(2, bool),
        "dp_rank": np.full(2, -1), "tp_rank": np.full(2, -1),
    })  # fmt: skip
    writer.finish(processes, {"format": "synthetic", "accesses": accesses, "seed": seed})


def _tree_rss(pid: int) -> int:
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += p.memory_info().rss
    return total


def measure(cmd: list[str]) -> dict:
    """Wall, CPU of the whole process tree, peak of its summed RSS, and its JSON output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.2):
            peak[0] = max(peak[0], _tree_rss(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    stop.set()
    sampler.join()
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}: {err.strip()[-2000:]}")
    counts = json.loads(out)["counts"]
    return {"wall_s": wall, "cpu_s": cpu, "peak_gib": peak[0] / 2**30, "counts": counts}


def _sizes(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1e5,1e6,1e7", help="in-process sizes")
    ap.add_argument("--dask-sizes", default="1e5,1e6,1e7", help="--dask sizes (e.g. ...,1e8)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dir", type=Path, default=ROOT / "out" / "bench_scale")
    ap.add_argument("--keep", action="store_true", help="keep the stores")
    args = ap.parse_args()
    fdprof = [sys.executable, "-m", "fdprof", "hazards"]
    rows = []
    for n in sorted(set(_sizes(args.sizes)) | set(_sizes(args.dask_sizes))):
        path = args.dir / f"store-{n:.0e}"
        if not store.is_store(path):
            shutil.rmtree(path, ignore_errors=True)
            t0 = time.monotonic()
            write_store(path, n)
            print(f"wrote {n:.0e} accesses in {time.monotonic() - t0:.0f} s "
                  f"({_du(path) / 2**30:.2f} GiB)", flush=True)  # fmt: skip
        ways = [("in-process", [], n in _sizes(args.sizes)),
                (f"dask local:{args.workers}", ["--dask", f"local:{args.workers}"],
                 n in _sizes(args.dask_sizes))]  # fmt: skip
        for how, extra, wanted in ways:
            if not wanted:
                continue
            r = measure([*fdprof, str(path), "--json", *extra])
            rows.append({"n": n, "how": how, **r})
            print(
                f"{how:>14} {n:>11,} accesses: wall {r['wall_s']:7.1f} s  cpu "
                f"{r['cpu_s']:7.1f} s  {1e6 * r['cpu_s'] / n:6.2f} µs/access  peak "
                f"{r['peak_gib']:5.2f} GiB  races {r['counts']['races']}",
                flush=True,
            )
        if not args.keep and n >= 10**8:
            shutil.rmtree(path, ignore_errors=True)
    _report(rows)


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _report(rows: list[dict]) -> None:
    print("\ngrowth of CPU per 10x:")
    for how in sorted({r["how"] for r in rows}):
        mine = sorted((r for r in rows if r["how"] == how), key=lambda r: r["n"])
        pairs = zip(mine, mine[1:], strict=False)
        steps = [f"{b['n']:.0e}: {b['cpu_s'] / a['cpu_s']:.1f}x" for a, b in pairs
                 if b["n"] == 10 * a["n"]]  # fmt: skip
        print(f"  {how}: {', '.join(steps) or '-'}")
    local = [r for r in rows if r["how"] == "in-process"]
    dask = [r for r in rows if r["how"] != "in-process"]
    if local and dask:
        a, b = max(local, key=lambda r: r["n"]), max(dask, key=lambda r: r["n"])
        ratio = (b["cpu_s"] / b["n"]) / (a["cpu_s"] / a["n"])
        wall = (b["wall_s"] / b["n"]) / (a["wall_s"] / a["n"])
        print(f"dask at {b['n']:.0e} vs in-process at {a['n']:.0e}, per access: CPU {ratio:.2f}x, "
              f"wall {wall:.2f}x")  # fmt: skip
    print(json.dumps({"machine": f"{os.cpu_count()} cores", "rows": rows}))


if __name__ == "__main__":
    main()
