"""py-spy sampling of real spawned processes through the run-observer interface."""

from __future__ import annotations

import json
import multiprocessing as mp
import time

from fdprof.capture.pyspy import PySpyObserver


def _busy(seconds: float) -> None:
    end = time.monotonic() + seconds
    total = 0
    while time.monotonic() < end:
        total += sum(range(1000))


def test_samples_every_process_into_chrome_traces(tmp_path):
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_busy, args=(1.5,)) for _ in range(2)]
    for p in procs:
        p.start()
    infos = [
        {"pid": p.pid, "role": role, "name": role, "dp_rank": 0, "record": ""}
        for p, role in zip(procs, ("worker", "transfer"), strict=True)
    ]
    obs = PySpyObserver(tmp_path, rate=50)
    obs.start(tmp_path, infos)
    for p in procs:
        p.join(60)
    obs.stop()
    index = json.loads((tmp_path / "pyspy" / "index.json").read_text())
    assert [e["pid"] for e in index] == [p.pid for p in procs]
    for entry in index:
        assert entry["ok"], entry
        events = json.loads((tmp_path / "pyspy" / entry["file"]).read_text())
        names = {e["name"] for e in events}
        assert "_busy" in names and {e["pid"] for e in events} == {entry["pid"]}
