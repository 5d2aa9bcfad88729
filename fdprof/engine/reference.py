"""The reference run: the same requests, seed, model and parallel layout, served without swaps
(a device pool big enough that nothing is evicted) and without a seeded fault. A correct run's
tokens equal the reference's exactly on the CPU: the model's products are batch-invariant
(:mod:`fdprof.engine.model`), so neither a swap round trip nor a different batching can change them;
KV corrupted by a race does."""

from __future__ import annotations

from pathlib import Path

from fdprof import semconv as S
from fdprof.engine.config import EngineConfig
from fdprof.engine.results import ReferenceCheck, RunResults
from fdprof.engine.workloads import without_swaps

#: the reference run's directory inside the run directory
REFERENCE_DIR = "reference"
#: each request's generated tokens, in the run directory: ``{"<request id>": [tokens]}``
TOKENS_FILE = "tokens.json"


def reference_config(cfg: EngineConfig) -> EngineConfig:
    """``cfg`` without swaps, faults or lock, on the synchronous old path: the lock, the cache
    manager and asynchronous device work change timing, never tokens (so runs that differ only
    in them share a reference)."""
    return without_swaps(cfg).with_(
        fault=None,
        fault_delay_ms=None,
        kv_lock=S.LockMode.NONE,
        swap_in=S.SwapIn.SYNC,
        cache_manager=S.CacheManagerMode.OLD,
        chunk_tokens=None,
        device_async=False,
        sync_before_unlock=False,
        store_on_fill=False,
    )


def compare_tokens(
    outputs: dict[int, list[int]], reference: RunResults, where: Path
) -> ReferenceCheck:
    theirs = reference.outputs
    ids = sorted(set(outputs) | set(theirs))
    mismatched = [i for i in ids if outputs.get(i) != theirs.get(i)]
    return ReferenceCheck(str(where), len(ids), mismatched)
