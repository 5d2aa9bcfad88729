"""Shared-memory housekeeping: what a killed supervisor left behind is removed by the next run."""

import os

from engine.ipc import remove_stale


def test_stale_files_of_dead_supervisors_are_removed(tmp_path):
    stale = tmp_path / "fdprof-999999999-deadbeef-control"
    live = tmp_path / f"fdprof-{os.getpid()}-deadbeef-control"
    other = tmp_path / "fdprof-notes"
    for p in (stale, live, other):
        p.write_bytes(b"")
    assert remove_stale(tmp_path) == [stale]
    assert live.exists() and other.exists()
