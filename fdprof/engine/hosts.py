"""Simulated hosts: each DP group of one run on a "host" of its own, whose clock differs.

Why: a deployment's DP groups run on different machines, each with its own monotonic clock and
a wall clock only as good as its synchronisation; merging their traces must find how their
clocks relate from the traces themselves (:mod:`fdprof.trace.hosts`). On one machine the
difference is made real with Linux time namespaces: DP group ``r``'s processes start in a
namespace whose CLOCK_MONOTONIC is offset by ``monotonic_s[r]`` seconds (``unshare --time
--monotonic``; the kernel switches a process into it at exec, so the spawned interpreter keeps
its pid). CLOCK_REALTIME is not namespaced: the record headers' epoch anchors still agree,
which is what a host with a perfectly synchronised wall clock would write. Needs root (or
CAP_SYS_ADMIN) and Linux 5.6+; :func:`check` says so in one line where it is missing.

Only the engine's launcher uses this (``run_engine(..., hosts=Hosts(...))``); nothing here
runs in the engine's processes.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from fdprof.errors import FdprofError


@dataclass(frozen=True)
class Hosts:
    """DP group ``r`` runs on host ``r``: CLOCK_MONOTONIC offset by ``monotonic_s[r]`` whole
    seconds; ``faulty``: the groups that run the configuration's ``fault`` (None: all)."""

    monotonic_s: tuple[int, ...]
    faulty: frozenset[int] | None = None

    def config(self, cfg, rank: int):
        """The engine configuration of DP group ``rank``'s processes."""
        if self.faulty is None or rank in self.faulty:
            return cfg
        return replace(cfg, fault=None)

    @contextlib.contextmanager
    def spawning(self, mp, rank: int) -> Iterator[None]:
        """Processes started inside the block start on host ``rank`` (its clock)."""
        if rank >= len(self.monotonic_s) or self.monotonic_s[rank] == 0:
            yield
            return
        check()  # one line now, rather than children that die at start
        # the wrapper outlives the block: a child's shell may read it after start() returned
        tmp = tempfile.mkdtemp(prefix="fdprof-host-")
        atexit.register(shutil.rmtree, tmp, True)
        wrapper = Path(tmp) / "python"
        python = shlex.quote(sys.executable)
        wrapper.write_text(f"#!/bin/sh\nexec unshare --time --monotonic "
                           f"{int(self.monotonic_s[rank])} -- {python} \"$@\"\n")  # fmt: skip
        wrapper.chmod(0o700)
        mp.set_executable(str(wrapper))
        try:
            yield
        finally:
            mp.set_executable(sys.executable)


@functools.cache
def check() -> None:
    """One line, as bad input, where this machine cannot give a process its own clock."""
    probe = subprocess.run(["unshare", "--time", "--monotonic", "1", "--", "true"],
                           capture_output=True, text=True)  # fmt: skip
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or ["unshare failed"])[-1]
        raise FdprofError(f"simulated hosts need Linux time namespaces (root, Linux 5.6+): {why}")


def monotonic_of(pid: int) -> int:
    """How far ``pid``'s CLOCK_MONOTONIC is from this process's (ns): its namespace's offset."""
    try:
        text = Path(f"/proc/{pid}/timens_offsets").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        name, sec, nsec = line.split()
        if name in ("monotonic", "1"):
            return int(sec) * 1_000_000_000 + int(nsec)
    return 0
