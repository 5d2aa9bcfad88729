"""Trace loading: fdprof vs HolisticTraceAnalysis on the same real traces, and synthetic runs.

Each measurement runs in a fresh child process: wall time of the load, and peak RSS growth
over the RSS after imports (``ru_maxrss``), compared with the in-memory columnar size of what
was loaded (``Trace.nbytes``: the tables' ``memory_usage(deep=True)`` and the typed attribute
columns' Arrow buffers). Ratios are printed side by side.

HTA (``holistictraceanalysis`` on PyPI) is optional: without it the comparison is skipped with a
message and the script still exits 0. Synthetic native runs of 1e5, 1e6 and 1e7 spans (4
processes; each span has ``fd.step``, every 10th a ``kv.gpu_read`` list and a sync) are
written straight from numpy in the record format, then loaded with ``fdprof.trace.load``.

    .venv/bin/python bench/bench_load.py [--sizes 100000,1000000,10000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
#: the real traces: ``../shared`` beside the checkout, or beside its worktree folder
HTA_DATA = next(
    (
        d
        for d in (
            ROOT / ".." / "shared" / "data" / "hta",
            ROOT / ".." / ".." / "shared" / "data" / "hta",
        )
        if d.is_dir()
    ),
    ROOT / ".." / "shared" / "data" / "hta",
)


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def child(kind: str, path: str) -> None:
    """Load once in this fresh process and print one JSON line of measurements."""
    if kind == "fdprof":
        from fdprof.trace import load

        base = _rss_kib()
        t0 = time.perf_counter()
        trace = load(path)
        seconds = time.perf_counter() - t0
        columnar = trace.nbytes
        rows = len(trace.spans)
    else:
        import logging

        logging.disable(logging.WARNING)
        from hta.common.trace_parser import parse_trace_dataframe
        from hta.configs.parser_config import ParserConfig

        base = _rss_kib()
        t0 = time.perf_counter()
        _, df, _ = parse_trace_dataframe(path, ParserConfig())
        seconds = time.perf_counter() - t0
        columnar = int(df.memory_usage(deep=True).sum())
        rows = len(df)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "seconds": seconds,
                "peak_mib": (peak - base) / 1024,
                "columnar_mib": columnar / 2**20,
                "rows": rows,
            }
        )
    )


def measure(kind: str, path: Path, repeat: int) -> dict:
    """Best of ``repeat`` fresh-process loads (the machine is shared; the best is least noisy)."""
    runs = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, __file__, "--child", kind, str(path)],
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    best = min(runs, key=lambda r: r["seconds"])
    best["peak_mib"] = min(r["peak_mib"] for r in runs)
    return best


def have_hta() -> bool:
    try:
        import hta  # noqa: F401
    except ImportError:
        return False
    return True


def bench_hta(repeat: int) -> None:
    print("== Chrome traces: fdprof.trace.load vs HTA parse_trace_dataframe (same file)")
    if not have_hta():
        print(
            "holistictraceanalysis is not installed: comparison skipped "
            "(pip install holistictraceanalysis into .venv to run it)"
        )
        return
    print(
        f"{'file':18} {'fdprof s':>9} {'HTA s':>8} {'time HTA/fd':>11} "
        f"{'fd MiB':>7} {'HTA MiB':>8} {'mem fd/HTA':>10} {'fd peak/col':>11}"
    )
    for path in sorted(HTA_DATA.glob("*.json.gz")):
        fd = measure("fdprof", path, repeat)
        hta = measure("hta", path, repeat)
        print(
            f"{path.name:18} {fd['seconds']:9.2f} {hta['seconds']:8.2f} "
            f"{hta['seconds'] / fd['seconds']:10.2f}x {fd['peak_mib']:7.0f} "
            f"{hta['peak_mib']:8.0f} {fd['peak_mib'] / hta['peak_mib']:9.2f}x "
            f"{fd['peak_mib'] / fd['columnar_mib']:10.2f}x"
        )


def write_synthetic(run_dir: Path, spans: int, procs: int = 4) -> None:
    """A native run of ``spans`` spans over ``procs`` processes, in the probe's record format."""
    from fdprof.formats import records as R
    from fdprof.formats.rundir import MANIFEST, RUN_FORMAT

    run_dir.mkdir(parents=True, exist_ok=True)
    per = spans // procs
    span_dt = np.dtype(
        [
            ("bh", "<u8"),
            ("b_id", "<u8"),
            ("b_parent", "<u8"),
            ("b_name", "<u4"),
            ("b_pad", "<u4"),
            ("b_t0", "<i8"),
            ("ah", "<u8"),
            ("a_id", "<u8"),
            ("a_key", "<u4"),
            ("a_pad", "<u4"),
            ("a_value", "<i8"),
            ("eh", "<u8"),
            ("e_id", "<u8"),
            ("e_t1", "<i8"),
        ]
    )

    def header(kind: int, length: int, tid: np.ndarray) -> np.ndarray:
        return (
            np.uint64(kind)
            | np.uint64(length) << np.uint64(16)
            | tid.astype(np.uint64) << np.uint64(32)
        )

    processes = []
    for p in range(procs):
        pid = 10_000 + p
        i = np.arange(per, dtype=np.int64)
        tid = (pid + (i % 2)).astype(np.uint64)
        rec = np.zeros(per, dtype=span_dt)
        ids = (np.uint64(pid) << np.uint64(40)) + i.astype(np.uint64) + np.uint64(1)
        t0 = 1_700_000_000_000_000_000 + i * 1000
        rec["bh"] = header(R.Kind.SPAN_BEGIN, R.SPAN_BEGIN.size, tid)
        rec["b_id"], rec["b_name"], rec["b_t0"] = ids, 1 + (i % 3), t0
        rec["ah"] = header(R.Kind.ATTR_INT, R.ATTR_INT.size, tid)
        rec["a_id"], rec["a_key"], rec["a_value"] = ids, 4, i // 8
        rec["eh"] = header(R.Kind.SPAN_END, R.SPAN_END.size, tid)
        rec["e_id"], rec["e_t1"] = ids, t0 + 700
        strings = b""
        for sid, text in enumerate(
            ["execute_model", "swap", "schedule", "fd.step", "kv.gpu_read", "queue:batch"], 1
        ):
            data = text.encode()
            strings += R.RECORD_HEADER.pack(R.Kind.STRING, 0, 4 + len(data), pid)
            strings += R.STRING.pack(sid) + data
        extra = bytearray()
        for j in range(0, per, 10):
            sid = (pid << 40) + j + 1
            blocks = np.arange(j % 97, j % 97 + 4, dtype="<i4").tobytes()
            extra += R.RECORD_HEADER.pack(R.Kind.ATTR_INTS, 0, R.ATTR_INTS.size + 16, pid)
            extra += R.ATTR_INTS.pack(sid, 5, 4) + blocks
            extra += R.RECORD_HEADER.pack(R.Kind.SYNC, 0, R.SYNC.size, pid)
            extra += R.SYNC.pack(
                sid, 6, R.SyncCode.ACQUIRE, j, 1_700_000_000_000_000_000 + j * 1000
            )
        head = R.pack_header(pid, 0, 0, "worker", -1, -1)
        name = f"worker-{p}-{pid}.rec"
        with open(run_dir / name, "wb") as f:
            f.write(head + strings)
            f.write(rec.tobytes())
            f.write(bytes(extra))
        processes.append(
            {
                "pid": pid,
                "role": "worker",
                "name": f"worker-{p}",
                "dp_rank": p,
                "record": name,
                "exitcode": 0,
            }
        )
    manifest = {
        "format": RUN_FORMAT,
        "config": {"synthetic": spans},
        "status": "ok",
        "processes": processes,
        "results": {},
        "error": None,
    }
    (run_dir / MANIFEST).write_text(json.dumps(manifest))


def walk_seconds(run_dir: Path) -> tuple[float, float]:
    """Seconds to find the records of the run's files: the C walk and its Python twin, side by
    side on the same bytes, best of 3 each, interleaved."""
    from fdprof.formats import records as R

    if R._c_offsets is None:
        return float("nan"), float("nan")
    blobs = [p.read_bytes() for p in sorted(run_dir.glob("*.rec"))]
    best_c = best_py = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        c = [R.record_offsets(b) for b in blobs]
        t1 = time.perf_counter()
        py = [R._python_offsets(b, R.FILE_HEADER.size) for b in blobs]
        t2 = time.perf_counter()
        assert all(np.array_equal(a, b) for a, b in zip(c, py, strict=True))
        best_c, best_py = min(best_c, t1 - t0), min(best_py, t2 - t1)
    return best_c, best_py


def bench_synthetic(sizes: list[int]) -> None:
    print("== Synthetic native runs: fdprof.trace.load; record walk C vs Python on the same files")
    print(
        f"{'spans':>10} {'files MiB':>9} {'load s':>8} {'spans/s':>10} {'peak MiB':>9} "
        f"{'columnar MiB':>12} {'peak/col':>8} {'walk C s':>9} {'walk Py s':>9} {'Py/C':>6}"
    )
    for n in sizes:
        tmp = Path(tempfile.mkdtemp(prefix="fdprof-bench-"))
        try:
            write_synthetic(tmp / "run", n)
            size = sum(p.stat().st_size for p in (tmp / "run").iterdir()) / 2**20
            r = measure("fdprof", tmp / "run", 1)
            walk_c, walk_py = walk_seconds(tmp / "run")
            print(
                f"{n:10d} {size:9.0f} {r['seconds']:8.2f} {n / r['seconds']:10.0f} "
                f"{r['peak_mib']:9.0f} {r['columnar_mib']:12.0f} "
                f"{r['peak_mib'] / r['columnar_mib']:8.2f} "
                f"{walk_c:9.3f} {walk_py:9.3f} {walk_py / walk_c:6.0f}"
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default="100000,1000000,10000000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-hta", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return 0
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    if not args.skip_hta:
        bench_hta(args.repeat)
    bench_synthetic([int(s) for s in args.sizes.split(",") if s])
    return 0


if __name__ == "__main__":
    sys.exit(main())
