"""``export-otlp`` against loading: how long replaying a trace to a local OTLP/HTTP receiver
takes, as a ratio to loading the same file, measured in the same process right after the load.

Each measurement is a fresh child process: ``fdprof.trace.load(path)`` timed, then
``fdprof.probe.sdk.otel_replay.replay(OtelView(trace), endpoint)`` to a receiver that runs in its
own process
(a real OTLP/HTTP server decoding every ``ExportTraceServiceRequest`` and counting its spans).
``--before DIR`` measures another checkout of fdprof too (e.g. ``git archive main``), its
children alternating with this tree's, so both see the same machine load. Prints each run and,
per tree, the mean ratio with its 95% CI (Student t over the runs).

    .venv/bin/python bench/bench_export_otlp.py [--trace PATH] [--repeat 3] [--before DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT / ".." / "shared" / "data" / "hta" / "control.json.gz"


def receiver() -> None:
    """Serve OTLP/HTTP traces on a free port (printed first), counting the spans received;
    ``GET /count`` answers the count."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    received = [0]
    reply = ExportTraceServiceResponse().SerializeToString()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            request = ExportTraceServiceRequest.FromString(body)
            received[0] += sum(
                len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans
            )
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def do_GET(self):  # noqa: N802
            data = str(received[0]).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


def child(path: str, endpoint: str) -> None:
    """Load, then export, in this fresh process; one JSON line of measurements."""
    from fdprof.trace import load

    try:
        from fdprof.probe.sdk.otel_replay import replay
        from fdprof.trace.export import OtelView

        def send(trace) -> None:
            replay(OtelView(trace), endpoint)
    except ImportError:  # a checkout from before the probe's API/SDK split (--before)
        from fdprof.trace.export import export

        def send(trace) -> None:
            export(trace, endpoint)

    t0 = time.perf_counter()
    trace = load(path)
    loaded = time.perf_counter() - t0
    t0 = time.perf_counter()
    send(trace)
    exported = time.perf_counter() - t0
    print(json.dumps({"load_s": loaded, "export_s": exported, "spans": len(trace.spans)}))


def measure(source: Path, path: Path, endpoint: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(source)}
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(path), endpoint],
        capture_output=True, text=True, env=env, cwd=source, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"{source}: measurement failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def ci95(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% CI (Student t; 0 for one value)."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    sd = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    return mean, float(stats.t.ppf(0.975, n - 1)) * sd / n**0.5


def main() -> int:
    if sys.argv[1:2] == ["--receiver"]:
        receiver()
        return 0
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", type=Path, default=None, help="another fdprof checkout")
    args = parser.parse_args()
    if not args.trace.exists():
        print(f"{args.trace}: not found (the shared HTA traces)", file=sys.stderr)
        return 2
    server = subprocess.Popen([sys.executable, __file__, "--receiver"], stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    try:
        endpoint = f"http://127.0.0.1:{server.stdout.readline().strip()}"
        trees = [("after", ROOT)] + ([("before", args.before.resolve())] if args.before else [])
        print(f"# {platform.node()} {platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
              f"{time.strftime('%Y-%m-%d')}; trace {args.trace.name}")  # fmt: skip
        ratios: dict[str, list[float]] = {name: [] for name, _ in trees}
        for run in range(args.repeat):
            for name, source in trees if run % 2 == 0 else trees[::-1]:
                m = measure(source, args.trace, endpoint)
                ratio = m["export_s"] / m["load_s"]
                ratios[name].append(ratio)
                print(f"{name:6} run {run}: load {m['load_s']:6.1f} s, export {m['export_s']:6.1f}"
                      f" s, ratio {ratio:5.2f} ({m['spans']} spans)", flush=True)  # fmt: skip
        for name, values in ratios.items():
            mean, half = ci95(values)
            print(f"{name:6} export/load: {mean:.2f} ± {half:.2f} (95% CI, {len(values)} runs)")
    finally:
        server.terminate()
        server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
