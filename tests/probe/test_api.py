"""The probe API over its sinks: the recorder alone (methods bound straight to it), NVTX on
top, the no-op probe before configure() and the proxy that forwards to whatever is set later;
the API loads without the SDK."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from probe_records import decode, spans_of

from fdprof import probe
from fdprof.formats import records as R
from fdprof.probe.context import parse_traceparent, trace_id_for

SWAP = probe.name("swap", "swap")
STEP = probe.name("step", "step")
BLOCKS = probe.key("kv.gpu_read")
QUEUE = probe.obj("queue:swap")


def test_unconfigured_probe_does_nothing():
    p = probe.get()
    assert not p.enabled
    with p.span(SWAP) as sid:
        p.set_ints(sid, BLOCKS, [1])
        p.release(QUEUE, 1)


def test_recorder_probe_binds_recorder_methods(tmp_path, impl):
    p = probe.configure(probe.ProbeConfig(run_dir=str(tmp_path)), "transfer", dp_rank=1)
    try:
        assert p.begin.__self__ is p.recorder  # no Python frame between caller and recorder
        p.name_thread("main")
        with p.span(STEP) as step:
            sid = p.begin(SWAP, step)
            p.set_ints(sid, BLOCKS, [3, 4])
            p.set_str(sid, probe.key("swap.direction"), "to_cpu")
            p.acquire(QUEUE, 9, sid)
            ender = threading.Thread(target=p.end, args=(sid,))  # ends on another thread
            ender.start()
            ender.join()
        tid = trace_id_for("req", 1)
        tp = p.traceparent(step, tid)
        p.traceparent(step, tid)  # once per span is recorded
        p.link_context(sid, tp, link=True)
    finally:
        probe.shutdown()
    path = tmp_path / f"transfer-1-{os.getpid()}.rec"
    spans = spans_of(path)
    assert spans[sid]["parent"] == step and spans[sid]["attrs"]["kv.gpu_read"] == [3, 4]
    assert spans[sid]["t1"] <= spans[step]["t1"]
    _, recs = decode(path)
    ctx = [(fl, f) for k, fl, _, f in recs if k == R.Kind.CONTEXT]
    assert ctx == [(R.CONTEXT_PARENT, (step, tid, 0)), (R.CONTEXT_LINK, (sid, tid, step))]
    assert parse_traceparent(tp) == (tid, step)
    assert probe.get() is not p and not probe.get().enabled


def test_a_probe_taken_before_configure_records_once_configured(tmp_path, impl):
    early = probe.get()  # e.g. a module that takes the probe at import
    assert not early.enabled and early.begin(SWAP) == 0
    p = probe.configure(probe.ProbeConfig(run_dir=str(tmp_path)), "transfer")
    try:
        assert early.enabled and probe.get() is p  # configured: the probe itself, no proxy
        with early.span(STEP) as step:
            early.set_ints(step, BLOCKS, [7])
    finally:
        probe.shutdown()
    assert not early.enabled and probe.get() is early
    spans = spans_of(tmp_path / f"transfer-0-{os.getpid()}.rec")
    assert spans[step]["attrs"]["kv.gpu_read"] == [7]


def test_the_api_loads_no_sink():
    """Instrumented code imports the API; the SDK (recorder, NVTX, OpenTelemetry) loads only
    when a process is configured, through fdprof.probe.sdk or the documented forwarders."""
    code = (
        "import sys\n"
        "from fdprof import probe\n"
        "from fdprof.probe import context, handles\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('fdprof.probe.sdk'))\n"
        "assert not loaded, loaded\n"
        "from fdprof.probe import sdk\n"
        "assert probe.configure is sdk.configure\n"
        "assert probe.configure_from_env is sdk.configure_from_env\n"
        "assert probe.shutdown is sdk.shutdown\n"
        "from fdprof.probe.run_manifest import write_run_manifest\n"
        "from fdprof.formats import rundir\n"
        "assert write_run_manifest is rundir.write_run_manifest\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
