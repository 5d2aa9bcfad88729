"""Engine options shared by ``fdprof run`` and ``fdprof ab``: one definition, one parser."""

from __future__ import annotations

import argparse
import sys
import warnings


def add_engine_arguments(p: argparse.ArgumentParser, with_lock: bool = True) -> None:
    from engine.config import DEVICES, FAULTS, KV_LOCKS, WORKLOADS

    if with_lock:
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
        "(default 30 with --fault, else 0)",
    )
    p.add_argument("--device", choices=DEVICES, default="auto")


def engine_config(args: argparse.Namespace, kv_lock: str | None = None):
    """The EngineConfig of parsed options; ``kv_lock`` overrides ``--kv-lock`` (``ab`` sets it
    per run). A deprecated setting is reported on stderr, once."""
    from engine.config import DeprecatedSetting, EngineConfig, resolve_kv_lock

    if kv_lock is None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DeprecatedSetting)
            kv_lock = resolve_kv_lock(args.kv_lock)
        for w in caught:
            print(f"fdprof {args.command}: warning: {w.message}", file=sys.stderr)
    return EngineConfig(
        kv_lock=kv_lock,
        device=args.device,
        workload=args.workload,
        requests=args.requests,
        seed=args.seed,
        dp=args.dp,
        fault=args.fault,
        fault_delay_ms=args.fault_delay_ms,
    )
