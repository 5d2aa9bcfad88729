"""Engine and capture options shared by ``fdprof run`` and ``fdprof ab``: defined once."""

from __future__ import annotations

import argparse
import importlib.util
import warnings
from enum import StrEnum

from fdprof import settings
from fdprof.capture.plan import CapturePlan
from fdprof.cli import warn
from fdprof.semconv import CacheManagerMode, Fault, LockMode, SwapIn


def values(kind: type[StrEnum]) -> list[str]:
    """An enum's values as plain strings: argparse quotes choices with repr()."""
    return [member.value for member in kind]


def add_engine_arguments(p: argparse.ArgumentParser, with_lock: bool = True) -> None:
    from fdprof.engine.config import DEVICES, WORKLOADS

    if with_lock:
        p.add_argument(
            "--kv-lock",
            choices=values(LockMode),
            default=None,
            help="ipc: the baseline as FastDeploy ran it (flock through one descriptor the "
            "cache manager's threads share, so they do not exclude each other); "
            "ipc-per-thread: the corrected lock (a descriptor per thread); none: lockless "
            "(default; USE_KVCACHE_LOCK=1 or FD_USE_KVCACHE_LOCK=1 still select ipc, deprecated)",
        )
    p.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="prefix-swap",
        help="prefix-swap (default): shared prefixes and a device pool smaller than the working "
        "set, so blocks swap both ways every few steps; swap-heavy: the same requests with a "
        "device pool half the prefixes' size (swaps all the time, both ways at once); no-swap: "
        "the control; nested-prefix: requests share 1 to 4 blocks of a family's prefix, so "
        "prefixes are often partly on the device, partly on the host",
    )
    p.add_argument("--requests", type=int, default=48, help="requests to serve (default 48)")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the workload and the model's weights (default 0; ab: run i uses SEED+i)",
    )
    p.add_argument("--dp", type=int, default=1, help="data-parallel engine groups")
    p.add_argument(
        "--tp",
        type=int,
        default=1,
        help="tensor-parallel ranks per DP group, each with its shard of the KV pool and its "
        "own transfer process (default 1)",
    )
    p.add_argument(
        "--ep",
        action="store_true",
        help="expert parallelism (needs --dp 2 or more): the decoder's MLP becomes a mixture of "
        "experts split across the DP groups' workers, exchanged by all-to-all; a worker with "
        "no requests keeps joining with empty batches",
    )
    p.add_argument(
        "--swap-in",
        choices=values(SwapIn),
        default=SwapIn.SYNC,
        help="sync (default): admission waits for a request's swap-in, as FastDeploy's "
        "is_sync=True; async: the request waits in its own state until its swap-in has "
        "completed while the others keep running (lockless only; ab: the candidate)",
    )
    p.add_argument(
        "--device-async",
        action="store_true",
        help="asynchronous device work: the worker's forward pass and the transfer's copies "
        "are queued on streams (CPU twin: FIFO threads; CUDA: streams) and ordered by events; "
        "host calls return once their work is queued (--tp 1, no --ep)",
    )
    p.add_argument(
        "--sync-before-unlock",
        action="store_true",
        help="with --device-async: the baseline worker synchronises its compute stream before "
        "it unlocks, so the lock covers the kernel and not only its launch (off by default)",
    )
    p.add_argument(
        "--store-on-fill",
        action="store_true",
        help="with --device-async and --kv-lock none: store every block a step fills to the "
        "host pool as the step is queued (write-through; the copy waits on the step's "
        "compute-done event), so an eviction only drops the device copy",
    )
    p.add_argument(
        "--cache-manager",
        choices=values(CacheManagerMode),
        default=CacheManagerMode.OLD,
        help="old (default): the path FastDeploy's lock guarded (whole-block swaps, completion "
        "awaited); v1: Cache Manager V1 (FastDeploy PR #7097): swap-ins layer by layer on an "
        "input stream, the forward waiting for each layer's event just before its attention, "
        "swap-outs on an output stream without a host wait",
    )
    p.add_argument(
        "--chunk-tokens",
        type=int,
        default=None,
        metavar="N",
        help="with --cache-manager v1: the transfer chunk in tokens (default: the block size, "
        "16); copies are split at chunk boundaries, as LMCache moves chunks",
    )
    p.add_argument("--fault", choices=values(Fault), default=None, metavar="FAULT",
                   help=fault_help())  # fmt: skip
    p.add_argument(
        "--fault-delay-ms",
        type=float,
        default=None,
        help="the fault's window: a delay before each copy (V1's loads: spread over the "
        "layers), or in the worker's forward for the faults whose copy should have waited for "
        "the kernel (store-before-compute-done, compute-races-store, load-back-unfenced); "
        "default 150 with --fault (shared-prefix-streams needs none), else 0",
    )
    p.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="where the KV pools and the model live; auto (default): cuda if present, else cpu",
    )


def fault_help() -> str:
    """``--fault``'s help: every fault, what it breaks, the public bug it reproduces."""
    from fdprof.engine.config import FAULT_HELP, fault_settings

    def needs(fault: Fault) -> str:
        flags = as_flags(fault_settings(fault))
        return f" (turns on {flags})" if flags else ""

    faults = "; ".join(f"{f}: {FAULT_HELP.get(f, 'a seeded bug')}{needs(f)}" for f in Fault)
    return (
        f"seed a protocol bug; it turns on the modes it needs itself (run.json and the "
        f"summary say which). {faults}"
    )


def as_flags(settings: dict) -> str:
    """Engine settings as the command-line flags that set them."""
    return " ".join(
        f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in settings.items()
    )


def engine_config(args: argparse.Namespace, kv_lock: str | None = None):
    """The EngineConfig of parsed options; ``kv_lock`` overrides ``--kv-lock`` (``ab`` sets it
    per run). A deprecated setting is reported on stderr, once."""
    from fdprof.engine.config import DeprecatedSetting, EngineConfig, resolve_kv_lock

    if importlib.util.find_spec("torch") is None:  # before any process starts
        raise ModuleNotFoundError("the engine runs its model on torch", name="torch")

    if kv_lock is None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DeprecatedSetting)
            kv_lock = resolve_kv_lock(args.kv_lock)
        for w in caught:
            warn(args, w.message)
    return EngineConfig(
        kv_lock=kv_lock,
        device=args.device,
        workload=args.workload,
        requests=args.requests,
        seed=args.seed,
        dp=args.dp,
        tp=args.tp,
        ep=args.ep,
        swap_in=args.swap_in,
        cache_manager=args.cache_manager,
        chunk_tokens=args.chunk_tokens,
        device_async=args.device_async,
        sync_before_unlock=args.sync_before_unlock,
        store_on_fill=args.store_on_fill,
        fault=args.fault,
        fault_delay_ms=args.fault_delay_ms,
    )


def add_capture_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--otlp-endpoint",
        default=None,
        help="export spans and metrics over OTLP/HTTP to this URL (else OTEL_EXPORTER_OTLP_* "
        "from the environment, if set)",
    )
    p.add_argument(
        "--metrics-port",
        type=port_number,
        default=None,
        help="serve Prometheus metrics on this port while the engine runs (on 127.0.0.1 "
        "unless --metrics-host says otherwise)",
    )
    p.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="ADDR",
        help="the address --metrics-port binds (default 127.0.0.1: this machine only; "
        "0.0.0.0 for every interface, e.g. a Prometheus in a container)",
    )
    p.add_argument(
        "--nvtx-capture",
        action="store_true",
        help="emit NVTX ranges and capture them without Nsight Systems into RUN_DIR/nvtx/",
    )
    p.add_argument("--py-spy", action="store_true", help="sample every process with py-spy")


def port_number(text: str) -> int:
    """A TCP port for argparse: a bad one is a usage error, not a traceback at bind time."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0-65535)")
    return port


def capture_plan(args: argparse.Namespace) -> CapturePlan:
    return CapturePlan(
        args.otlp_endpoint, args.metrics_port, args.nvtx_capture, args.py_spy, args.workload,
        nsys=settings.nsys_inner(), metrics_host=args.metrics_host,
        parquet=getattr(args, "parquet", None), roll_s=getattr(args, "roll_s", 10.0),
    )  # fmt: skip
