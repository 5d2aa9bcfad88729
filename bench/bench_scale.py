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


def write_store(path: Path, accesses: int, seed: int = 0) -> None:
    """The synthetic trace of ``accesses`` accesses as a store at ``path``, chunk by chunk."""
    rng = np.random.default_rng(seed)
    holds = accesses // HOLD
    buckets = store.buckets_for(accesses)
    writer = store.StoreWriter(path, buckets)
    lanes = np.array([f"{1 + lane // 4}/{lane}" for lane in range(LANES)], dtype=object)
    for c, first in enumerate(range(0, holds, HOLDS_PER_CHUNK)):
        h = np.arange(first, min(holds, first + HOLDS_PER_CHUNK), dtype=np.int64)
        slot, lock = h // LOCKS, h % LOCKS
        lane = _lane_of(slot, lock)
        t0 = 1_700_000_000_000_000_000 + slot * SLOT_NS
        n = len(h) * HOLD
        hold_of = np.repeat(np.arange(len(h)), HOLD)
        j = np.tile(np.arange(HOLD), len(h))
        span_id = first * HOLD + np.arange(n, dtype=np.int64) + 1
        start = t0[hold_of] + 1 + 10 * j
        a_lane = lane[hold_of]
        pid = 1 + a_lane // 4
        spans = frame("spans", {
            "span_id": span_id, "parent_id": np.zeros(n, np.int64),
            "name": np.full(n, "access", dtype=object), "start": start, "end": start + 8,
            "pid": pid, "tid": a_lane, "lane": lanes[a_lane], "role": np.full(n, "worker", object),
            "step": np.full(n, -1, np.int64), "trace_id": np.full(n, None, object),
        })  # fmt: skip
        block = rng.integers(0, BLOCKS // LOCKS, n) * LOCKS + lock[hold_of]
        acc = frame("accesses", {
            "span_id": span_id, "pool": np.full(n, "gpu", object), "block": block,
            "mode": np.where(rng.random(n) < 0.25, "write", "read").astype(object),
            "layer_lo": np.full(n, -1, np.int64), "layer_hi": np.full(n, -1, np.int64),
        })  # fmt: skip
        m = len(h)
        syncs = frame("syncs", {
            "op": np.repeat(np.array([["acquire", "release"]], object), m, 0).ravel(),
            "obj": np.repeat(np.array([f"lock:{k}" for k in range(LOCKS)], object)[lock], 2),
            "seq": np.full(2 * m, -1, np.int64), "keyed": np.zeros(2 * m, bool),
            "time": np.stack([t0, t0 + SLOT_NS - 40], 1).ravel(),
            "pid": np.repeat(1 + lane // 4, 2), "tid": np.repeat(lane, 2),
            "lane": np.repeat(lanes[lane], 2), "span_id": np.zeros(2 * m, np.int64),
        })  # fmt: skip
        writer.add_tables(spans, syncs, acc, f"{c:06d}")
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
