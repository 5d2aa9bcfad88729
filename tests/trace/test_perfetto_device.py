"""Device work in the Perfetto export: each stream is a track of its own, named by its lane,
and every launch is a flow from the host call that queued the work to the work itself."""

from __future__ import annotations

import json
import time

from fdprof import probe
from fdprof import semconv as S
from fdprof.engine.device import CpuDevice
from fdprof.probe import handles as H
from fdprof.trace import load
from fdprof.trace.perfetto import write

KERNEL = probe.name("kernel", S.CATEGORY_DEVICE)


def test_device_lanes_are_tracks_with_a_flow_from_each_launch(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    p = probe.configure(probe.ProbeConfig(run_dir=str(run_dir)), S.ROLE_WORKER)
    dev = CpuDevice()
    try:
        stream = dev.stream()
        for _ in range(3):
            with p.span(H.EXECUTE_MODEL) as host:
                stream.launch(KERNEL, time.sleep, 0.002, parent=host)
        stream.synchronize()
    finally:
        dev.close()
        probe.shutdown()
    out = tmp_path / "run.json"
    write(load(run_dir), out)
    events = json.loads(out.read_text())["traceEvents"]
    names = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"
    }
    lane = stream.lane
    device_tracks = {k for k, v in names.items() if v == lane}
    assert len(device_tracks) == 1  # the stream's own track, named by its lane
    slices = [e for e in events if e["ph"] == "X"]
    kernels = [e for e in slices if e["name"] == "kernel"]
    hosts = [e for e in slices if e["name"] == S.EXECUTE_MODEL]
    assert len(kernels) == len(hosts) == 3
    assert {(e["pid"], e["tid"]) for e in kernels} == device_tracks
    assert not {(e["pid"], e["tid"]) for e in hosts} & device_tracks
    launch = S.DEVICE_LAUNCH_PREFIX + lane
    starts = [e for e in events if e["ph"] == "s" and e["name"] == launch]
    ends = [e for e in events if e["ph"] == "f" and e["name"] == launch]
    assert len(starts) == len(ends) == 4  # three kernels, and synchronize's event record
    assert all((e["pid"], e["tid"]) in device_tracks for e in ends)  # arrows end on the work
    assert not any((e["pid"], e["tid"]) in device_tracks for e in starts)
    # an arrow ends where each kernel began (flows bind to the slice at their end time)
    assert {e["ts"] for e in kernels} <= {e["ts"] for e in ends}
