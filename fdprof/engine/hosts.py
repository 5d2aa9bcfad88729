"""Simulated hosts: each DP group of one run on a "host" of its own, whose clock differs.

Why: a deployment's DP groups run on different machines, each with its own monotonic clock and
a wall clock only as good as its synchronisation; merging their traces must find how their
clocks relate from the traces themselves (:mod:`fdprof.trace.hosts`). On one machine the
difference is made real with Linux time namespaces: DP group ``r``'s processes run in a
namespace whose CLOCK_MONOTONIC is offset by ``monotonic_s[r]`` seconds. The supervisor makes
one namespace per host for the run (:meth:`Hosts.clocks`: a process that holds it, started by
``unshare --time --monotonic``); each engine process of that host joins it first thing, while
it is still single-threaded (:func:`join`, ``setns(2)``), so the processes fork from the same
warm fork server as any run's. CLOCK_REALTIME is not namespaced: the record headers' epoch
anchors still agree, which is what a host with a perfectly synchronised wall clock would write.
Needs root (or CAP_SYS_ADMIN) and Linux 5.6+; :func:`check` says so in one line where it is
missing.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import subprocess
import time
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
    def clocks(self) -> Iterator[dict[int, str]]:
        """For the block: each host whose clock is offset, its time namespace (the path a
        process joins with :func:`join`), by DP rank; the namespaces go when the block ends."""
        offset = {r: int(s) for r, s in enumerate(self.monotonic_s) if s}
        if offset:
            check()  # one line now, rather than children that die at start
        holders: dict[int, subprocess.Popen] = {}
        try:
            for rank, seconds in offset.items():
                holders[rank] = subprocess.Popen(
                    ["unshare", "--time", "--monotonic", str(seconds), "--", "sleep", "infinity"],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                )  # fmt: skip
            yield {rank: _joined(holder) for rank, holder in holders.items()}
        finally:
            for holder in holders.values():
                holder.kill()
                holder.wait()
                holder.stderr.close()


def _joined(holder: subprocess.Popen, timeout_s: float = 10.0) -> str:
    """The time namespace ``holder`` is in, once it is there (the kernel moves it at the exec
    of ``sleep``, after ``unshare`` set the offsets)."""
    ours = os.readlink("/proc/self/ns/time")
    path = f"/proc/{holder.pid}/ns/time"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if holder.poll() is not None:
            why = (holder.stderr.read().decode(errors="replace").strip().splitlines()
                   or [f"unshare exited with {holder.returncode}"])[-1]  # fmt: skip
            raise FdprofError(f"simulated hosts: no time namespace: {why}")
        with contextlib.suppress(OSError):
            if os.readlink(path) != ours:
                return path
        time.sleep(0.005)
    raise FdprofError(f"simulated hosts: no time namespace after {timeout_s:.0f} s")


#: setns(2)'s namespace type for time namespaces (linux/sched.h)
CLONE_NEWTIME = 0x80


def join(namespace: str) -> None:
    """Move this process into the time namespace ``namespace`` (a path from :meth:`Hosts.clocks`).
    Only a single-threaded process may: an engine process calls it before anything else."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(namespace, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWTIME) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {namespace}: {os.strerror(err)}")
    finally:
        os.close(fd)


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
