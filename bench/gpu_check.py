"""``make gpu-check``: the one check to run where a CUDA device is present (docs/engine.md,
"The GPU check").

Why one script: a GPU is lent rarely and briefly, so what only a GPU can show runs in one go,
within about 8 minutes, and leaves one table behind: the CUDA paths' tests, ``fdprof ab`` on
CUDA for the old path and Cache Manager V1 (lock against lockless), every fault on CUDA, and an
Nsight Systems capture where ``nsys`` is installed. Each step runs as a subprocess with its
share of the time and is cut off (and marked so) if it runs over; the summary is printed and
written to ``OUT/summary.md`` with each step's log beside it.

Exit 0 when every step did what it should, 1 otherwise; without a CUDA device one line and 0.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the whole check's time, seconds (the brief: under 8 minutes)
BUDGET_S = 450
#: requests per engine run: enough for swaps both ways, few engine-seconds
REQUESTS = 24
#: concurrent fault runs (the machine has cores to spare; each run is small on the GPU)
PARALLEL = 4


@dataclass
class Row:
    step: str
    what: str
    result: str
    ok: bool
    seconds: float


def cuda_device() -> str | None:
    """The first CUDA device's name, or None when there is none (or no torch)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(0)


class Check:
    def __init__(self, out: Path, budget_s: float, device: str) -> None:
        self.out = out
        self.device = device
        self.deadline = time.monotonic() + budget_s
        self.rows: list[Row] = []

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, name: str, argv: list[str], timeout_s: float) -> tuple[int | None, str, float]:
        """Run ``argv`` with at most ``timeout_s`` (and what is left of the budget); its exit
        code (None: cut off), its stdout, its seconds. Output goes to ``OUT/<name>.log``."""
        limit = max(1.0, min(timeout_s, self.left()))
        log = self.out / f"{name}.log"
        t0 = time.monotonic()
        with log.open("w") as f:
            f.write("$ " + " ".join(argv) + "\n")
            f.flush()
            try:
                done = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=f,
                                      text=True, timeout=limit)  # fmt: skip
                code, stdout = done.returncode, done.stdout
            except subprocess.TimeoutExpired as exc:
                code, stdout = None, exc.stdout or ""
                stdout = stdout if isinstance(stdout, str) else stdout.decode(errors="replace")
            f.write(stdout)
        return code, stdout, time.monotonic() - t0

    def add(self, step: str, what: str, result: str, ok: bool, seconds: float) -> None:
        self.rows.append(Row(step, what, result, ok, seconds))
        mark = "ok" if ok else "FAIL"
        print(f"[{mark:>4}] {step}: {what}: {result} ({seconds:.0f} s)", flush=True)


FDPROF = [sys.executable, "-m", "fdprof"]


def cut(code: int | None) -> str:
    return "cut off (out of time)" if code is None else f"exit {code}"


def step_tests(c: Check) -> None:
    if c.device != "cuda":
        c.add("tests", "pytest -m cuda", "skipped: a dry run on the CPU", True, 0.0)
        return
    argv = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider",
            "tests"]  # fmt: skip
    code, out, s = c.run("tests", argv, 150)
    tail = out.strip().splitlines()[-1] if out.strip() else ""
    passed = int(m[1]) if (m := re.search(r"(\d+) passed", tail)) else 0
    c.add("tests", "pytest -m cuda", tail or cut(code), code == 0 and passed > 0, s)


def step_ab(c: Check, cache_manager: str) -> None:
    out = c.out / f"ab-{cache_manager}"
    argv = [*FDPROF, "ab", "--device", c.device, "--cache-manager", cache_manager, "--runs", "2",
            "--requests", str(REQUESTS), "--json", "--out", str(out)]  # fmt: skip
    code, stdout, s = c.run(f"ab-{cache_manager}", argv, 110)
    what = f"fdprof ab --cache-manager {cache_manager} (lock vs lockless, 2 pairs)"
    try:
        ab = json.loads(stdout)
    except json.JSONDecodeError:
        c.add("ab", what, cut(code), False, s)
        return
    gain, ideal = ab["gain"], ab["ideal"]
    lo, hi = gain["ci95"]
    verdict = f"{ab['verdict']['safety']}, {ab['verdict']['speed']}"
    result = (f"gain {gain['ratio']:.3f} [{lo:.3f}, {hi:.3f}], ideal {ideal['ratio']:.3f}, "
              f"{verdict}")  # fmt: skip
    c.add("ab", what, result, code == 0, s)


def _fault_run(c: Check, fault: str | None, flags: list[str]) -> Row:
    name = f"run-{fault or 'v1-correct'}"
    out = c.out / "runs" / (fault or "v1-correct")
    argv = [*FDPROF, "run", "--device", c.device, "--requests", str(REQUESTS), "--reference",
            "--json", *flags, "--out", str(out)]  # fmt: skip
    code, stdout, s = c.run(name, argv, 120)
    what = f"fdprof run {' '.join(flags)}"
    try:
        res = json.loads(stdout)
    except json.JSONDecodeError:
        return Row("faults", what, cut(code), False, s)
    differ = len(res["reference"]["mismatched"]) if res.get("reference") else -1
    hcode, hout, hs = c.run(f"hazards-{fault or 'v1-correct'}",
                            [*FDPROF, "hazards", str(out), "--json"], 60)  # fmt: skip
    try:
        counts = json.loads(hout)["counts"]
    except (json.JSONDecodeError, KeyError):
        return Row("faults", what, f"hazards {cut(hcode)}", False, s + hs)
    result = (f"tokens differ {differ}/{res['requests']}, mismatches "
              f"{res['integrity']['mismatches']}, races {counts['races']}, lifetime "
              f"{counts['lifetime']}, hazards exit {hcode}")  # fmt: skip
    ok = hcode == 1 if fault else (hcode == 0 and res["integrity"]["mismatches"] == 0)
    return Row("faults", what, result, ok, s + hs)


def step_faults(c: Check) -> None:
    from fdprof.engine.config import FAULT_PRESSURE
    from fdprof.semconv import Fault

    jobs: list[tuple[str | None, list[str]]] = [(None, ["--cache-manager", "v1"])]
    for fault in Fault:
        pressure = FAULT_PRESSURE.get(fault, {})
        flags = [f for k, v in pressure.items() for f in (f"--{k.replace('_', '-')}", str(v))]
        jobs.append((fault, ["--fault", fault, *flags]))
    with ThreadPoolExecutor(PARALLEL) as pool:
        for row in pool.map(lambda job: _fault_run(c, *job), jobs):
            c.add(row.step, row.what, row.result, row.ok, row.seconds)


def step_nsys(c: Check) -> None:
    if shutil.which("nsys") is None:
        c.add("nsys", "Nsight Systems capture", "skipped: nsys is not on the PATH", True, 0.0)
        return
    out = c.out / "nsys-run"
    argv = [*FDPROF, "run", "--nsys", "--device", c.device, "--cache-manager", "v1",
            "--requests", "16", "--json", "--out", str(out)]  # fmt: skip
    code, _, s = c.run("nsys-run", argv, 120)
    if code != 0:
        c.add("nsys", "fdprof run --nsys --cache-manager v1", cut(code), False, s)
        return
    argv = [*FDPROF, "hazards", str(out / "nsys" / "report.sqlite"), "--join", str(out),
            "--json"]  # fmt: skip
    hcode, hout, hs = c.run("nsys-hazards", argv, 60)
    try:
        counts = json.loads(hout)["counts"]
        result = f"joined trace: races {counts['races']}, hazards exit {hcode}"
    except (json.JSONDecodeError, KeyError):
        result = f"hazards {cut(hcode)}"
    c.add("nsys", "fdprof run --nsys --cache-manager v1, hazards --join", result, hcode == 0,
          s + hs)  # fmt: skip


def summary(c: Check, device: str, seconds: float) -> str:
    import torch

    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    head = (f"# GPU check, {when}\n\n{device}, torch {torch.__version__} (CUDA "
            f"{torch.version.cuda}), {os.cpu_count()} CPUs, {platform.node()}; "
            f"{seconds:.0f} s in all\n")  # fmt: skip
    lines = ["| step | what | result | ok | s |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r.step} | {r.what} | {r.result} | {'ok' if r.ok else 'FAIL'} | "
              f"{r.seconds:.0f} |" for r in c.rows]  # fmt: skip
    passed = sum(r.ok for r in c.rows)
    return f"{head}\n" + "\n".join(lines) + f"\n\n{passed}/{len(c.rows)} ok\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/gpu_check.py", description=__doc__)
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "gpu-check")
    ap.add_argument("--budget-s", type=float, default=BUDGET_S)
    ap.add_argument(
        "--dry-run-on-cpu",
        action="store_true",
        help="run the check's steps on the CPU twin (the check's own logic, where no GPU is)",
    )
    args = ap.parse_args(argv)
    device = "CPU twin (dry run)" if args.dry_run_on_cpu else cuda_device()
    if device is None:
        print("gpu-check: no CUDA device on this machine; nothing to check")
        return 0
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    c = Check(out, args.budget_s, "cpu" if args.dry_run_on_cpu else "cuda")
    t0 = time.monotonic()
    print(f"gpu-check on {device}: {args.budget_s:.0f} s at most, logs in {out}", flush=True)
    step_tests(c)
    for cache_manager in ("old", "v1"):
        step_ab(c, cache_manager)
    step_faults(c)
    step_nsys(c)
    text = summary(c, device, time.monotonic() - t0)
    (out / "summary.md").write_text(text)
    print("\n" + text)
    return 0 if all(r.ok for r in c.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
