"""``fdprof run``: serve a workload with the engine and record it into a run directory."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import warnings
from pathlib import Path

from fdprof.errors import FdprofError


def register(subparsers) -> None:
    from engine.config import DEVICES, FAULTS, KV_LOCKS, WORKLOADS

    p = subparsers.add_parser("run", help="run the engine and record a trace")
    p.add_argument(
        "--kv-lock",
        choices=KV_LOCKS,
        default=None,
        help="ipc: the baseline flock lock; none: lockless (default; "
        "FD_USE_KVCACHE_LOCK=1 still selects ipc, deprecated)",
    )
    p.add_argument("--workload", choices=WORKLOADS, default="prefix-swap")
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dp", type=int, default=1, help="data-parallel engine groups")
    p.add_argument("--fault", choices=FAULTS, default=None, help="seed a protocol bug")
    p.add_argument(
        "--fault-delay-ms",
        type=float,
        default=None,
        help="transfer delay before each copy, widening the fault window "
        "(default 150 with --fault, else 0)",
    )
    p.add_argument("--device", choices=DEVICES, default="auto")
    p.add_argument("--out", required=True, type=Path, help="run directory to write")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--otlp-endpoint", default=None, help="export spans and metrics over OTLP")
    p.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus metrics")
    p.add_argument("--nvtx-capture", action="store_true", help="emit and capture NVTX ranges")
    p.add_argument("--py-spy", action="store_true", help="sample every process with py-spy")
    p.set_defaults(func=handle)


def _optional(module: str, attr: str, flag: str):
    """A feature another part of fdprof provides, or a clear error if this build lacks it."""
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        raise FdprofError(f"{flag}: {module}.{attr} is not available") from None


class _ProgressBar:
    def __init__(self, stream) -> None:
        self._stream = stream

    def __call__(self, done: int, total: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        bar = "#" * filled + "." * (width - filled)
        self._stream.write(f"\r[{bar}] {done}/{total} requests")
        if done >= total:
            self._stream.write("\n")
        self._stream.flush()


def _summary(r: dict) -> str:
    sw, integ = r["swaps"], r["integrity"]
    return (
        f"kv_lock={r['kv_lock']} device={r['device']} requests={r['requests']} "
        f"tokens={r['generated_tokens']} in {r['wall_s']:.2f}s ({r['tokens_per_s']:.1f} tok/s), "
        f"steps={r['steps']}\n"
        f"swaps: {sw['to_cpu']} to_cpu, {sw['to_gpu']} to_gpu, {sw['blocks']} blocks; "
        f"integrity: {integ['blocks_checked']} blocks checked, {integ['mismatches']} mismatches, "
        f"{integ['nan']} NaN/Inf\ntrace: {r['trace']}"
    )


def handle(args: argparse.Namespace) -> int:
    from engine.config import DeprecatedSetting, EngineConfig, resolve_kv_lock
    from engine.launcher import run_engine
    from fdprof.probe import ProbeConfig

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecatedSetting)
        kv_lock = resolve_kv_lock(args.kv_lock)
    for w in caught:
        print(f"fdprof run: warning: {w.message}", file=sys.stderr)
    config = EngineConfig(
        kv_lock=kv_lock,
        device=args.device,
        workload=args.workload,
        requests=args.requests,
        seed=args.seed,
        dp=args.dp,
        fault=args.fault,
        fault_delay_ms=args.fault_delay_ms,
    )
    run_dir = args.out.resolve()
    probe_config = ProbeConfig(
        run_dir=str(run_dir),
        nvtx=args.nvtx_capture,
        otlp_endpoint=args.otlp_endpoint,
        metrics_port=args.metrics_port,
        resource={"fd.kv_lock": kv_lock, "fd.workload": args.workload},
    )
    observers, env = [], {}
    if args.otlp_endpoint or args.metrics_port is not None:
        flag = "--otlp-endpoint" if args.otlp_endpoint else "--metrics-port"
        observers += _optional("fdprof.probe.otel_export", "observers_for", flag)(probe_config)
    if args.nvtx_capture:
        env.update(_optional("fdprof.capture.nvtx", "injection_env", "--nvtx-capture")(run_dir))
    if args.py_spy:
        observers.append(_optional("fdprof.capture.pyspy", "PySpyObserver", "--py-spy")(run_dir))
    progress = None if args.json else _ProgressBar(sys.stderr)
    results = run_engine(config, probe_config, observers, progress, env)
    print(json.dumps(results) if args.json else _summary(results))
    return 0 if results["integrity"]["mismatches"] == 0 or config.fault else 1
