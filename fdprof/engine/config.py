"""The engine's settings: a plain dataclass that crosses into each process and lands in run.json."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

from fdprof import semconv as S
from fdprof import settings
from fdprof.errors import FdprofError
from fdprof.semconv import CacheManagerMode, Fault, LockMode, SwapIn

DEVICES = ("auto", S.DEVICE_CPU, S.DEVICE_CUDA)
WORKLOADS = ("prefix-swap", "swap-heavy", "no-swap", "nested-prefix")
#: the asynchronous engine's faults (``--device-async``), after bugs engines shipped:
#: store-before-compute-done (vLLM #45704: a store copies blocks the compute stream is still
#: writing; needs ``--store-on-fill``), foreign-stream-write (LMCache PR #2671: a swap-in
#: written on a stream of its own, which the event the worker waits on does not cover),
#: reuse-staging-buffer (TensorRT-LLM PR #15546: the staging buffer refilled while the copy
#: out of it is in flight; needs ``--swap-in async``, where swap-ins overlap)
ASYNC_FAULTS = (
    Fault.STORE_BEFORE_COMPUTE_DONE,
    Fault.FOREIGN_STREAM_WRITE,
    Fault.REUSE_STAGING_BUFFER,
)
#: Cache Manager V1's faults (``--cache-manager v1``), the field's fixed bugs as a zoo: see
#: FAULT_HELP for what each breaks and the public bug it reproduces
V1_FAULTS = (
    Fault.V1_WRONG_LAYER_EVENT,
    Fault.LOAD_BACK_UNFENCED,
    Fault.COMPUTE_RACES_STORE,
    Fault.SHARED_PREFIX_STREAMS,
)
#: what each fault breaks and, for those after a public bug, which one (``--help``, docs)
FAULT_HELP: dict[Fault, str] = {
    Fault.NO_WAIT_SWAP_IN: "the scheduler does not wait for a swap-in before scheduling its "
    "request",
    Fault.FREE_BEFORE_SWAP_OUT: "evicted blocks return to the free list when the copy-out is "
    "issued",
    Fault.ACK_BEFORE_COPY: "the transfer process signals completion before it copies",
    Fault.STORE_BEFORE_COMPUTE_DONE: "vLLM #45704 (fixed by PR #46278): a store copies blocks the "
    "compute stream is still writing",
    Fault.FOREIGN_STREAM_WRITE: "LMCache PR #2671: a swap-in is written on a stream the worker's "
    "event does not cover",
    Fault.REUSE_STAGING_BUFFER: "TensorRT-LLM PR #15546: the pinned staging buffer is refilled "
    "while the copy out of it is in flight",
    Fault.V1_WRONG_LAYER_EVENT: "Cache Manager V1's per-layer wait (FastDeploy PR #7097, "
    "LayerDoneCounter.wait_for_layer) is off by one: layer l waits on layer l-1's event, so "
    "its attention reads blocks whose layer-l copy is still in flight",
    Fault.LOAD_BACK_UNFENCED: "SGLang PR #36738: a load back from the host tier is not fenced "
    "behind the forward that still uses the blocks it overwrites (a finishing request's "
    "blocks, which overlap scheduling hands to the load while its last step runs)",
    Fault.COMPUTE_RACES_STORE: "SGLang #20611: under memory pressure V1 writes the blocks a step "
    "fills back to the host, and the copy does not wait for the kernel that writes them",
    Fault.SHARED_PREFIX_STREAMS: "LMCache PR #2706: a load places its pieces from the transfer "
    "chunk's boundary instead of from the first block not on the device, so with a chunk that "
    "is not the block size it writes into a prefix block another request holds and reads "
    "(LMCache's tests missed it: their chunk was the block size)",
    Fault.LOST_REF_ON_HIT: "an ownership bug: a prefix hit takes no reference, so eviction frees, "
    "and the allocator hands out again, a block a running request holds (hazards: an ownership "
    "finding)",
    Fault.FREE_UNDER_SWAP_IN: "an ownership bug: a swap-in's host blocks are freed when it is "
    "issued, not once copied, so an eviction may overwrite them while the swap-in reads them",
}
#: the settings each fault needs (it turns them on itself; docs/engine.md, "Faults")
_FAULT_NEEDS: dict[Fault, dict] = {
    Fault.STORE_BEFORE_COMPUTE_DONE: {"device_async": True, "store_on_fill": True},
    Fault.FOREIGN_STREAM_WRITE: {"device_async": True},
    Fault.REUSE_STAGING_BUFFER: {"device_async": True, "swap_in": SwapIn.ASYNC},
    **{fault: {"cache_manager": CacheManagerMode.V1} for fault in V1_FAULTS},
    Fault.SHARED_PREFIX_STREAMS: {"cache_manager": CacheManagerMode.V1, "chunk_tokens": 24},
}
#: the load each fault's reproduction runs under (``make regress``, the tests, the GPU check),
#: as the field's bugs showed only under pressure: a device pool half the prefixes' size;
#: prefixes shared at many lengths, and enough requests that a shared block is being read
#: while the load lands (LMCache's single-request test had too little concurrency)
FAULT_PRESSURE: dict[Fault, dict] = {
    Fault.COMPUTE_RACES_STORE: {"workload": "swap-heavy"},
    Fault.LOAD_BACK_UNFENCED: {"workload": "swap-heavy"},
    Fault.SHARED_PREFIX_STREAMS: {"workload": "nested-prefix", "requests": 48},
}
#: where a fault's delay widens its window: before each copy (default), before each swap-in's
#: copy only, in the worker's forward (a slow kernel the copy should have waited for), or
#: nowhere (the fault needs no window)
_FAULT_WINDOW: dict[Fault, str | None] = {
    Fault.STORE_BEFORE_COMPUTE_DONE: "in-forward",
    Fault.COMPUTE_RACES_STORE: "in-forward",
    Fault.LOAD_BACK_UNFENCED: "in-forward",
    Fault.FREE_UNDER_SWAP_IN: "before-swap-in",
    Fault.SHARED_PREFIX_STREAMS: None,
}


def fault_modes(cfg: EngineConfig) -> dict:
    """The settings ``cfg``'s fault turned on, as they are in ``cfg`` (run.json, the report)."""
    return {name: getattr(cfg, name) for name in fault_settings(cfg.fault)}


def fault_settings(fault: Fault | str | None) -> dict:
    """The EngineConfig settings ``fault`` needs (and turns on itself): none for the
    synchronous engine's faults; ``device_async`` (and what else it needs) for the
    asynchronous engine's; ``cache_manager="v1"`` for V1's."""
    return dict(_FAULT_NEEDS.get(fault, {})) if fault else {}


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
    #: the cache manager's design (:class:`~fdprof.semconv.CacheManagerMode`)
    cache_manager: CacheManagerMode = CacheManagerMode.OLD
    #: Cache Manager V1's transfer chunk in tokens (None: the block size); a copy is split at
    #: chunk boundaries of the request's tokens, as LMCache moves chunks of 256
    chunk_tokens: int | None = None
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
        modes = (("kv_lock", LockMode), ("swap_in", SwapIn), ("cache_manager", CacheManagerMode),
                 ("fault", Fault))  # fmt: skip
        for name, kind in modes:
            value = getattr(self, name)
            if value is None and name == "fault":
                continue
            if value not in tuple(kind):
                raise FdprofError(f"--{name.replace('_', '-')} must be one of {', '.join(kind)}")
            object.__setattr__(self, name, kind(value))
        self._turn_on_fault_needs()
        v1 = self.v1
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
                not v1 or (self.swap_in == SwapIn.SYNC and not self.device_async),
                "--cache-manager v1 runs without --swap-in async and --device-async (its "
                "swap-ins are asynchronous by design; its worker waits per layer)",
            ),
            (
                self.chunk_tokens is None or self.chunk_tokens >= 1,
                "--chunk-tokens must be at least 1",
            ),
            (
                self.fault is None or (self.fault in V1_FAULTS) == v1,
                f"--fault {self.fault} runs on the old cache manager",
            ),
            (self.max_new_tokens >= 1, "max_new_tokens must be at least 1"),
            (self.heads % self.kv_heads == 0, "heads must be a multiple of kv_heads"),
        ]
        for ok, message in checks:
            if not ok:
                raise FdprofError(message)

    def _turn_on_fault_needs(self) -> None:
        """Turn on the settings this config's fault needs (a fault runs as ``fdprof run
        --fault NAME`` alone); a transfer chunk other than the block size is kept (what
        shared-prefix-streams needs is only that it is not the block size)."""
        for name, value in fault_settings(self.fault).items():
            if name != "chunk_tokens" or self.chunk == self.block_size:
                object.__setattr__(self, name, value)

    @property
    def chunk(self) -> int:
        """Cache Manager V1's transfer chunk in tokens."""
        return self.chunk_tokens or self.block_size

    @property
    def v1(self) -> bool:
        return self.cache_manager == CacheManagerMode.V1

    @property
    def event_kinds(self) -> tuple[str, ...]:
        """The kinds of shared event (:mod:`fdprof.engine.streams`) each TP rank of this engine
        has, in the order the set-up message carries them: none on the synchronous old path."""
        if self.v1:
            layers = (S.layer_loaded_event(layer) for layer in range(self.layers))
            return (S.COMPUTE_DONE_EVENT, *layers)
        if self.device_async:
            return (S.COMPUTE_DONE_EVENT, S.SWAP_IN_EVENT)
        return ()

    @property
    def fault_delay_s(self) -> float:
        if self.fault_delay_ms is not None:
            return self.fault_delay_ms / 1000
        return 0.15 if self.fault else 0.0

    @property
    def _window(self) -> str | None:
        return _FAULT_WINDOW.get(self.fault, "before-copy") if self.fault else None

    def copy_delay_s(self, direction: str) -> float:
        """How long the transfer waits before a copy in ``direction`` (V1: before each layer's
        copy of a swap-in, a share of it); free-under-swap-in delays swap-ins only (the
        swap-outs that overwrite its freed host blocks land in the window), some faults slow
        the worker's forward instead (a slow kernel the copy should have waited for),
        shared-prefix-streams nothing."""
        window = self._window
        if window == "before-copy" or (window == "before-swap-in" and direction == S.TO_GPU):
            return self.fault_delay_s
        return 0.0

    @property
    def compute_delay_s(self) -> float:
        """How long the worker's forward waits (on its stream) before a step that fills
        blocks: the window of the faults whose copy should have waited for the kernel."""
        return self.fault_delay_s if self._window == "in-forward" else 0.0

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
