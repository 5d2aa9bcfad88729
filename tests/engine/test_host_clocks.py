"""A simulated host's clock: a process that joins its time namespace reads CLOCK_MONOTONIC
offset by the host's seconds, and the namespaces go with the run (tests/trace/test_hosts.py
runs whole engines on three hosts)."""

import multiprocessing
import os
import time

import pytest

from fdprof.engine import hosts
from fdprof.errors import FdprofError


def _available() -> bool:
    try:
        hosts.check()
    except FdprofError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _available(), reason="no Linux time namespaces here")


def _read_clock(namespace: str, out) -> None:
    hosts.join(namespace)
    out.send((time.monotonic(), os.getpid()))


def test_a_process_that_joins_a_hosts_clock_reads_it():
    mp = multiprocessing.get_context("fork")
    with hosts.Hosts((0, 5, -3)).clocks() as clocks:
        assert set(clocks) == {1, 2}  # host 0's clock is this machine's
        for rank, seconds in ((1, 5), (2, -3)):
            ours, theirs = mp.Pipe()
            child = mp.Process(target=_read_clock, args=(clocks[rank], theirs))
            child.start()
            before = time.monotonic()
            child_now, pid = ours.recv()
            assert hosts.monotonic_of(pid) == seconds * 10**9
            child.join(10)
            assert child.exitcode == 0
            assert abs(child_now - before - seconds) < 1.0
        holders = [path.split("/")[2] for path in clocks.values()]
    assert not [pid for pid in holders if os.path.exists(f"/proc/{pid}")]  # they went
