"""The probe's cost, side by side in one run: ns per span (with two attributes) for each sink,
and the engine's throughput with each sink on and off.

    .venv/bin/python bench/bench_probe.py [--quick]

Each micro-benchmark runs in its own fresh process (NVTX reads its injection variable once per
process) and reports the best of several short repeats in CPU time of that process (all its
threads, so the OpenTelemetry SDK's export thread counts), which other processes on a busy
machine do not inflate the way they inflate wall time. The engine runs go through
``fdprof run`` and report its tokens/s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SPANS = 20_000
REPEATS = 15
BLOCKS = [3, 17, 42, 99]


def _best_ns_per_span(one_round) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.process_time_ns()
        one_round()
        best = min(best, (time.process_time_ns() - t0) / SPANS)
    return best


def micro(mode: str, out_dir: str) -> float:
    """ns per span + 2 attributes (an int and a 4-block list) for ``mode``, in this process."""
    if mode == "otel-sdk":
        return _otel_sdk()
    if mode == "nvtx-package":
        return _nvtx_package()
    if mode.startswith("device"):
        return _device(mode, out_dir)
    from fdprof import probe

    config = probe.ProbeConfig(run_dir=None if mode == "noop" else out_dir, nvtx="nvtx" in mode)
    p = probe.configure(config, "worker")
    name, k_int, k_ints = probe.name("swap", "swap"), probe.key("i"), probe.key("kv.gpu_read")
    if mode.startswith("nvtx-capture"):
        assert getattr(p, "nvtx", None) is not None, "NVTX capture library not attached"

    def ctx_round():
        for i in range(SPANS):
            with p.span(name) as sid:
                p.set_int(sid, k_int, i)
                p.set_ints(sid, k_ints, BLOCKS)

    def begin_end_round():
        for i in range(SPANS):
            sid = p.begin(name)
            p.set_int(sid, k_int, i)
            p.set_ints(sid, k_ints, BLOCKS)
            p.end(sid)

    result = _best_ns_per_span(begin_end_round if mode.endswith("begin-end") else ctx_round)
    probe.shutdown()
    return result


def _device(mode: str, out_dir: str) -> float:
    """ns per device span: a no-op launched on a CPU-twin stream and run by its thread, with
    the probe off (``device-off``) or recording (``device-on``); or the probe's own calls for
    one device span (the host's launch record, the stream's span, lane and launch acquire),
    without a stream (``device-probe``)."""
    from fdprof import probe
    from fdprof.engine.device import CpuDevice

    p = probe.configure(probe.ProbeConfig(run_dir=None if mode == "device-off" else out_dir),
                        "worker")  # fmt: skip
    name = probe.name("kernel", "device")
    if mode == "device-probe":
        sp = p.stream("1/cpu:0/stream:1")

        def one_round():
            for _ in range(SPANS):
                sid, seq = sp.launched()
                t = time.monotonic_ns()
                sp.ran(name, sid, 0, seq, t, t)

    else:
        dev = CpuDevice()
        stream = dev.stream()

        def nothing():
            pass

        def one_round():
            for _ in range(SPANS):
                stream.launch(name, nothing)
            stream.synchronize()

    result = _best_ns_per_span(one_round)
    if mode != "device-probe":
        dev.close()
    probe.shutdown()
    return result


def _otel_sdk() -> float:
    """The same span built directly through the OpenTelemetry SDK (batch processor, exporter
    that drops everything): what the probe avoids on the hot path."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Null(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Null()))
    tracer = provider.get_tracer("bench")

    def one_round():
        for i in range(SPANS):
            with tracer.start_as_current_span("swap") as span:
                span.set_attribute("i", i)
                span.set_attribute("kv.gpu_read", BLOCKS)

    result = _best_ns_per_span(one_round)
    provider.shutdown()
    return result


def _nvtx_package() -> float:
    """The nvtx package's own start/end with a payload (no attributes: NVTX cannot carry them)."""
    import nvtx

    dom = nvtx.get_domain("fdprof")
    attrs = dom.get_event_attributes(message="swap", category="swap")

    def one_round():
        for i in range(SPANS):
            if attrs is not None:  # None: no tool, the package hands out a dummy domain
                attrs.payload = i
            dom.end_range(dom.start_range(attrs))

    return _best_ns_per_span(one_round)


def _child(mode: str, env: dict[str, str]) -> float:
    with tempfile.TemporaryDirectory() as out:
        full_env = {**os.environ, **env}
        if "NVTX_INJECTION64_PATH" in env:
            full_env["FDPROF_NVTX_DIR"] = out
        cmd = [sys.executable, __file__, "--micro", mode, "--dir", out]
        res = subprocess.run(cmd, env=full_env, capture_output=True, text=True, check=True)
        return float(res.stdout.strip())


class _Sink(BaseHTTPRequestHandler):
    """A collector that accepts everything (for the engine run with OTLP export on)."""

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def engine_tokens_per_s(flags: list[str], env: dict[str, str], requests: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "fdprof", "run", "--requests", str(requests)]
        cmd += ["--kv-lock", "ipc", "--json", "--out", out, *flags]
        res = subprocess.run(
            cmd, env={**os.environ, **env}, capture_output=True, text=True, check=True
        )
        return json.loads(res.stdout)["tokens_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--micro")
    parser.add_argument("--dir")
    parser.add_argument("--quick", action="store_true", help="fewer engine runs")
    parser.add_argument("--skip-engine", action="store_true", help="only the ns-per-span table")
    args = parser.parse_args()
    if args.micro:
        print(micro(args.micro, args.dir))
        return
    from fdprof.capture.nvtx import INJECTION_ENV, library_path

    inject = {INJECTION_ENV: str(library_path())}
    c, py = {"FDPROF_RECORDER": "c"}, {"FDPROF_RECORDER": "python"}
    rows = [
        ("probe, unconfigured (no-op)", "noop", c),
        ("recorder C, with-span", "recorder", c),
        ("recorder C, begin/end", "recorder-begin-end", c),
        ("recorder Python twin, with-span", "recorder", py),
        ("recorder C + NVTX on, no tool", "nvtx-on", c),
        ("nvtx package start/end, no tool", "nvtx-package", {}),
        ("nvtx package start/end, capture lib", "nvtx-package", inject),
        ("recorder C + NVTX + capture lib", "nvtx-capture", {**c, **inject}),
        ("OpenTelemetry SDK span, direct", "otel-sdk", {}),
    ]
    print(f"== CPU ns per span incl. 2 attributes (best of {REPEATS} x {SPANS:,} spans)")
    results = {}
    for label, mode, env in rows:
        results[label] = _child(mode, env)
    base = results["recorder C, with-span"]
    otel = results["OpenTelemetry SDK span, direct"]
    for label, ns in results.items():
        vs = f"x{ns / base:6.2f} of recorder C   OTel SDK / this {otel / ns:6.1f}"
        print(f"{label:40s} {ns:9.0f} ns   {vs}")
    device_rows = [
        ("CPU-twin launch + run, probe off", "device-off", c),
        ("CPU-twin launch + run, recorder C", "device-on", c),
        ("probe calls of one device span, C", "device-probe", c),
        ("probe calls of one device span, Python", "device-probe", py),
    ]
    print(f"\n== CPU ns per device span (no-op work; best of {REPEATS} x {SPANS:,})")
    device = {label: _child(mode, env) for label, mode, env in device_rows}
    off = device["CPU-twin launch + run, probe off"]
    for label, ns in device.items():
        print(f"{label:40s} {ns:9.0f} ns   x{ns / off:5.2f} of the probe-off launch")
    on = device["CPU-twin launch + run, recorder C"]
    print(f"{'probe cost per device span (on - off)':40s} {on - off:9.0f} ns")
    if args.skip_engine:
        return

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    requests = 24 if args.quick else 48
    runs = 1 if args.quick else 3
    configs = [
        ("recorder C only", [], c),
        ("recorder Python twin only", [], py),
        ("recorder C + NVTX capture", ["--nvtx-capture"], c),
        ("recorder C + OTLP export", ["--otlp-endpoint", endpoint], c),
    ]
    print(f"\n== engine tokens/s, fdprof run --kv-lock ipc --requests {requests}")
    print(f"   (best of {runs}; the configurations take turns, so a busy spell hits them alike)")
    tput: dict[str, float] = {}
    for _ in range(runs):
        for label, flags, env in configs:
            tps = engine_tokens_per_s(flags, env, requests)
            tput[label] = max(tput.get(label, 0.0), tps)
    ref = tput["recorder C only"]
    for label, tps in tput.items():
        print(f"{label:40s} {tps:9.1f} tok/s   x{tps / ref:5.2f} of recorder C only")
    server.shutdown()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
