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

#: the reference run's directory inside the run directory
REFERENCE_DIR = "reference"
#: each request's generated tokens, in the run directory: ``{"<request id>": [tokens]}``
TOKENS_FILE = "tokens.json"


def reference_config(cfg: EngineConfig) -> EngineConfig:
    """``cfg`` without swaps, faults or lock (the lock changes timing, never tokens)."""
    return cfg.with_(
        workload="no-swap",
        fault=None,
        fault_delay_ms=None,
        kv_lock=S.LockMode.NONE,
        swap_in=S.SwapIn.SYNC,
    )


def compare_tokens(
    outputs: dict[int, list[int]], reference: RunResults, where: Path
) -> ReferenceCheck:
    theirs = reference.outputs
    ids = sorted(set(outputs) | set(theirs))
    mismatched = [i for i in ids if outputs.get(i) != theirs.get(i)]
    return ReferenceCheck(str(where), len(ids), mismatched)
