"""``fdprof convert`` of a real PyTorch trace, as ratios to loading the same file in the same run.

For each repetition, in fresh child processes and interleaved (load, convert to ``.json``,
convert to ``.json.gz``, then again): the wall time of ``fdprof.trace.load`` alone and of a whole
conversion (load + write, what ``fdprof convert IN OUT`` does). Each conversion's ratio is to
the load of its own repetition, so the machine's load at the time cancels out; the script
prints the median ratio with its range over the repetitions, of wall time and of CPU time
(user + system of the child: less disturbed by other work sharing the machine).

Runs whichever fdprof is first on ``sys.path``: point ``PYTHONPATH`` at another checkout's
source to measure it (that is how BENCHMARKS.md's "before" column was taken).

    .venv/bin/python bench/bench_convert.py [--trace PATH] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / ".." / "shared" / "data" / "hta" / "control.json.gz"
KINDS = ("load", ".json", ".json.gz")


def child(kind: str, trace: str, out: str) -> None:
    """One measurement in this fresh process: one JSON line."""
    from fdprof.trace import load, save

    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = usage.ru_utime + usage.ru_stime
    t0 = time.perf_counter()
    loaded = load(trace)
    if kind != "load":
        save(loaded, Path(out) / f"out{kind}")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"kind": kind, "seconds": time.perf_counter() - t0,
                      "cpu": usage.ru_utime + usage.ru_stime - cpu0}))  # fmt: skip


def measure(kind: str, trace: Path, out: Path) -> dict[str, float]:
    got = subprocess.run([sys.executable, __file__, "--child", kind, str(trace), str(out)],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(got.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return 0
    if not args.trace.exists():
        print(f"{args.trace}: not found (../shared/data beside the checkout); nothing measured")
        return 0
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in KINDS}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            for kind in KINDS:
                runs[kind].append(measure(kind, args.trace, Path(tmp)))
    import fdprof

    print(f"fdprof from {Path(fdprof.__file__).parent}; {args.trace.name}, "
          f"{args.repeat} repetitions, each in fresh processes")  # fmt: skip
    for clock in ("seconds", "cpu"):
        load = [r[clock] for r in runs["load"]]
        what = "wall" if clock == "seconds" else "CPU "
        print(f"  {what} load:            median {statistics.median(load):6.2f} s "
              f"(range {min(load):.2f}-{max(load):.2f})")  # fmt: skip
        for kind in KINDS[1:]:
            took = [r[clock] for r in runs[kind]]
            ratios = [c / ld for c, ld in zip(took, load, strict=True)]
            print(f"  {what} convert to {kind:8} median {statistics.median(took):6.2f} s, "
                  f"{statistics.median(ratios):.2f}x a load (range {min(ratios):.2f}-"
                  f"{max(ratios):.2f}x)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
