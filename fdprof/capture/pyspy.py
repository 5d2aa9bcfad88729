"""``fdprof run --py-spy``: sample every engine process's Python stacks with py-spy.

One ``py-spy record --pid`` per process, started once the processes are up, writing a Chrome
trace (open it in Perfetto) to ``<run>/pyspy/<role>-<dp rank>-<pid>.json``. py-spy samples,
so it shows where Python time goes between the probe's exact spans, not range boundaries.
Idle threads are sampled too (``--idle``): a thread blocked on the KV lock shows where it
waits. Its timestamps start at zero when sampling starts: ``pyspy/index.json`` brackets each
sampler's start on the monotonic clock (read before ``Popen`` and when it returned), so
:mod:`fdprof.trace.pyspy` can place the samples on the run's timebase.

Sampling needs ptrace rights over the engine processes (root, or ``ptrace_scope`` 0). A
sampler that cannot attach is reported in ``index.json`` and the run goes on without it.
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from fdprof.errors import FdprofError

log = logging.getLogger(__name__)

SUBDIR = "pyspy"
#: samples per second per process
RATE = 100


def pyspy_path() -> str:
    """The py-spy binary beside this interpreter, else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.is_file() else shutil.which("py-spy")
    if not found:
        raise FdprofError("--py-spy: the py-spy binary is not installed (pip install py-spy)")
    return found


class PySpyObserver:
    """A run observer: ``start`` attaches one sampler per process, ``stop`` collects them."""

    def __init__(self, run_dir: str | Path, rate: int = RATE, stop_timeout_s: float = 20.0) -> None:
        self.out = Path(run_dir) / SUBDIR
        self._binary = pyspy_path()
        self._rate = rate
        self._stop_timeout_s = stop_timeout_s
        self._samplers: list[tuple[dict, subprocess.Popen, Path]] = []

    def start(self, run_dir: Path, processes: list[dict]) -> None:
        self.out = Path(run_dir) / SUBDIR
        self.out.mkdir(parents=True, exist_ok=True)
        for proc in processes:
            stem = f"{proc.get('role', 'proc')}-{proc.get('dp_rank', 0)}-{proc['pid']}"
            out = self.out / f"{stem}.json"
            cmd = [
                self._binary,
                "record",
                "--pid",
                str(proc["pid"]),
                "--format",
                "chrometrace",
                "--output",
                str(out),
                "--rate",
                str(self._rate),
                "--nonblocking",
                "--threads",
                "--idle",
            ]
            log_file = (self.out / f"{stem}.log").open("wb")
            before = time.monotonic_ns()
            sampler = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
            returned = time.monotonic_ns()
            log_file.close()
            entry = {**proc, "file": out.name, "rate": self._rate, "started_epoch_ns":
                     time.time_ns(), "started_monotonic_ns": before,
                     "popen_returned_monotonic_ns": returned}  # fmt: skip
            self._samplers.append((entry, sampler, out))

    def stop(self) -> None:
        """Let each sampler finish (it stops when its process exits; SIGINT makes it write
        what it has), then write ``index.json``."""
        deadline = time.monotonic() + self._stop_timeout_s
        for _, sampler, _ in self._samplers:
            if sampler.poll() is None:
                sampler.send_signal(signal.SIGINT)
        index = []
        for entry, sampler, out in self._samplers:
            try:
                sampler.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                sampler.kill()
                sampler.wait()
            ok = out.is_file() and out.stat().st_size > 0
            if not ok:
                log.warning("py-spy wrote nothing for pid %s (see %s)", entry["pid"], out.stem)
            index.append({**entry, "ok": ok, "exitcode": sampler.returncode})
        (self.out / "index.json").write_text(json.dumps(index, indent=1))
        self._samplers.clear()
