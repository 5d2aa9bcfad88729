"""The engine's settings: one plain dataclass that crosses spawn and lands in run.json."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

from fdprof import semconv as S
from fdprof import settings
from fdprof.errors import FdprofError
from fdprof.semconv import Fault, LockMode, SwapIn

DEVICES = ("auto", S.DEVICE_CPU, S.DEVICE_CUDA)
WORKLOADS = ("prefix-swap", "swap-heavy", "no-swap")
#: the asynchronous engine's faults (``--device-async``): store-before-compute-done (vLLM
#: #45704: a store copies blocks the compute stream is still writing; needs
#: ``--store-on-fill``), foreign-stream-write (LMCache PR #2671: a swap-in written on a stream
#: of its own, which the event the worker waits on does not cover), reuse-staging-buffer
#: (TensorRT-LLM PR #15546: the staging buffer refilled while the copy out of it is in
#: flight; needs ``--swap-in async``, where swap-ins overlap)
ASYNC_FAULTS = (
    Fault.STORE_BEFORE_COMPUTE_DONE,
    Fault.FOREIGN_STREAM_WRITE,
    Fault.REUSE_STAGING_BUFFER,
)
#: what each asynchronous fault needs besides ``device_async`` (see ASYNC_FAULTS)
_FAULT_NEEDS: dict[Fault, dict] = {
    Fault.STORE_BEFORE_COMPUTE_DONE: dict(store_on_fill=True),
    Fault.REUSE_STAGING_BUFFER: dict(swap_in=SwapIn.ASYNC),
}


def fault_settings(fault: str) -> dict:
    """The EngineConfig settings under which ``fault`` runs: none for the synchronous engine's
    faults; ``device_async`` (and what else it needs) for the asynchronous engine's."""
    if fault not in ASYNC_FAULTS:
        return {}
    return {"device_async": True, **_FAULT_NEEDS.get(fault, {})}


class DeprecatedSetting(FutureWarning):
    """A deprecated setting still honoured. A FutureWarning, so users see it by default."""


@dataclass(frozen=True)
class EngineConfig:
    kv_lock: LockMode = LockMode.NONE
    device: str = "auto"
    workload: str = "prefix-swap"
    requests: int = 48
    seed: int = 0
    dp: int = 1
    #: tensor-parallel ranks per DP group: each has its shard of the KV heads (of the device
    #: pool) and its own transfer process
    tp: int = 1
    #: expert parallelism: the decoder's MLP is a mixture of experts split across the DP
    #: groups' workers, exchanged by all-to-all every layer of every step
    ep: bool = False
    #: experts each DP group's worker holds under ``ep``
    experts_per_rank: int = 2
    swap_in: SwapIn = SwapIn.SYNC
    fault: Fault | None = None
    #: asynchronous device work (docs/engine.md, "Asynchronous device work"): the worker's
    #: forward pass and the transfer's copies are queued on streams and ordered by events
    device_async: bool = False
    #: the baseline worker synchronises its compute stream before it unlocks (with
    #: ``device_async``; no effect without a lock)
    sync_before_unlock: bool = False
    #: the lockless asynchronous engine stores every block a step fills to the host pool as
    #: soon as the step is queued (write-through, as vLLM's CPU offload connector does)
    store_on_fill: bool = False
    #: ms the transfer process sleeps before a copy; None: 0 without a fault, 150 with one
    fault_delay_ms: float | None = None
    # model
    layers: int = 4
    hidden: int = 256
    heads: int = 8
    kv_heads: int = 8
    head_dim: int = 64
    vocab: int = 512
    # KV cache
    block_size: int = 16
    gpu_blocks: int = 60
    cpu_blocks: int = 256
    #: most blocks one swap-out task moves
    swap_batch: int = 16
    #: bandwidth (GB/s) of the device-host link the transfer process paces its copies to; on
    #: CPU both pools sit in one RAM, so without pacing a swap would cost a memcpy, far less,
    #: relative to a step, than a PCIe copy costs a GPU engine. 0: no pacing.
    link_gbps: float = 0.1
    # scheduling
    max_batch: int = 8
    max_new_tokens: int = 16

    def __post_init__(self) -> None:
        # the modes as their enums, whether given as members or as their strings (run.json)
        for name, kind in (("kv_lock", LockMode), ("swap_in", SwapIn), ("fault", Fault)):
            value = getattr(self, name)
            if value is None and name == "fault":
                continue
            if value not in tuple(kind):
                raise FdprofError(f"--{name.replace('_', '-')} must be one of {', '.join(kind)}")
            object.__setattr__(self, name, kind(value))
        checks = [
            (self.device in DEVICES, f"--device must be one of {', '.join(DEVICES)}"),
            (self.workload in WORKLOADS, f"--workload must be one of {', '.join(WORKLOADS)}"),
            (self.requests >= 1, "--requests must be at least 1"),
            (self.dp >= 1, "--dp must be at least 1"),
            (self.tp >= 1, "--tp must be at least 1"),
            (
                self.swap_in == SwapIn.SYNC or not self.locked,
                "--swap-in async needs --kv-lock none (the baseline holds its lock until a "
                "swap has completed)",
            ),
            (
                not self.ep or self.dp >= 2,
                "--ep needs --dp 2 or more (experts are split across the DP groups)",
            ),
            (not self.ep or self.tp == 1, "--ep with --tp above 1 is not supported"),
            (
                self.tp < 1 or self.kv_heads % self.tp == 0 == self.heads % self.tp,
                f"--tp {self.tp} does not divide the model's {self.kv_heads} KV heads",
            ),
            (
                self.fault_delay_ms is None or self.fault_delay_ms >= 0,
                "--fault-delay-ms must not be negative",
            ),
            (
                self.device_async or not (self.sync_before_unlock or self.store_on_fill),
                "--sync-before-unlock and --store-on-fill need --device-async",
            ),
            (
                not self.store_on_fill or not self.locked,
                "--store-on-fill needs --kv-lock none (the lock cannot cover a copy that must "
                "follow a kernel queued after it)",
            ),
            (
                not self.device_async or (self.tp == 1 and not self.ep),
                "--device-async runs with --tp 1 and without --ep",
            ),
            (
                self.fault not in ASYNC_FAULTS or self.device_async,
                f"--fault {self.fault} needs --device-async",
            ),
            (
                self.fault != Fault.STORE_BEFORE_COMPUTE_DONE or self.store_on_fill,
                "--fault store-before-compute-done needs --store-on-fill",
            ),
            (
                self.fault != Fault.REUSE_STAGING_BUFFER or self.swap_in == SwapIn.ASYNC,
                "--fault reuse-staging-buffer needs --swap-in async (swap-ins overlap only there)",
            ),
            (self.max_new_tokens >= 1, "max_new_tokens must be at least 1"),
            (self.heads % self.kv_heads == 0, "heads must be a multiple of kv_heads"),
        ]
        for ok, message in checks:
            if not ok:
                raise FdprofError(message)

    @property
    def fault_delay_s(self) -> float:
        if self.fault_delay_ms is not None:
            return self.fault_delay_ms / 1000
        return 0.15 if self.fault else 0.0

    @property
    def copy_delay_s(self) -> float:
        """How long the transfer waits before each copy; store-before-compute-done slows the
        worker's forward pass instead (a slow kernel the store should have waited for)."""
        return 0.0 if self.fault == Fault.STORE_BEFORE_COMPUTE_DONE else self.fault_delay_s

    @property
    def compute_delay_s(self) -> float:
        """How long the worker's forward waits (on its stream) before a step that fills
        blocks: store-before-compute-done's window."""
        return self.fault_delay_s if self.fault == Fault.STORE_BEFORE_COMPUTE_DONE else 0.0

    @property
    def locked(self) -> bool:
        return self.kv_lock.locked

    @property
    def experts(self) -> int:
        return self.dp * self.experts_per_rank

    def kv_shape(self, num_blocks: int) -> tuple[int, ...]:
        """A TP rank's KV pool: ``[layers, K|V, num_blocks, block_size, kv_heads / tp,
        head_dim]`` (each rank holds its shard of the KV heads)."""
        return (
            self.layers,
            2,
            num_blocks,
            self.block_size,
            self.kv_heads // self.tp,
            self.head_dim,
        )

    def pool_bytes(self, num_blocks: int) -> int:
        return math.prod(self.kv_shape(num_blocks)) * 4

    def to_dict(self) -> dict:
        return asdict(self)

    def with_(self, **changes) -> EngineConfig:
        return replace(self, **changes)


def resolve_kv_lock(flag: str | None, env: Mapping[str, str] | None = None) -> LockMode:
    """The lock mode: an explicit flag wins; else ``USE_KVCACHE_LOCK=1`` or
    ``FD_USE_KVCACHE_LOCK=1`` selects the baseline (deprecated, so old scripts keep working);
    else the lockless engine."""
    if flag is not None:
        return LockMode(flag)
    name = settings.legacy_lock_switch(env)
    if name is not None:
        warnings.warn(f"{name}=1 is deprecated; use --kv-lock ipc", DeprecatedSetting, stacklevel=2)
        return LockMode.IPC
    return LockMode.NONE
