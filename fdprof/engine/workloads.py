"""Workloads: the requests a run serves, made from the seed.

``prefix-swap`` draws each request's prompt from a few long shared prefixes plus a short unique
suffix; the prefixes together outgrow the device pool, so cached prefix blocks are evicted to the
host pool and swapped back in when a later request matches them. ``swap-heavy``: the same
requests with a device pool half the prefixes' size, so evictions and swap-ins run all
the time, often both at once. ``no-swap`` is the control (and the reference run): the same
requests with a device pool large enough that nothing is ever evicted. ``nested-prefix``: each
request shares only the first 1 to 4 blocks of its family's prefix (a system prompt, then more
or less of a shared context), so a family's later blocks are used by fewer requests, go cold
first and are evicted while its first ones stay on the device: a request then finds its prefix
partly on the device and partly on the host, as an engine with prefixes of many lengths does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from fdprof.engine.config import EngineConfig

PREFIXES = 12
PREFIX_BLOCKS = 4
#: the device pool of ``swap-heavy``: room for a few requests and a few prefixes at a time
SWAP_HEAVY_GPU_BLOCKS = 24
#: the workload whose requests share prefixes of different lengths
NESTED_PREFIX = "nested-prefix"


@dataclass(frozen=True)
class RequestSpec:
    request_id: int
    prompt: list[int]
    max_new_tokens: int


def make_requests(cfg: EngineConfig, dp_rank: int = 0) -> list[RequestSpec]:
    """This DP rank's share of the run's requests (request ids are global, dealt round robin)."""
    rng = random.Random(cfg.seed)
    prefixes = [
        [rng.randrange(cfg.vocab) for _ in range(PREFIX_BLOCKS * cfg.block_size)]
        for _ in range(PREFIXES)
    ]
    specs = []
    for rid in range(cfg.requests):
        prefix = prefixes[rng.randrange(PREFIXES)]
        if cfg.workload == NESTED_PREFIX:
            prefix = prefix[: rng.randint(1, PREFIX_BLOCKS) * cfg.block_size]
        suffix = [rng.randrange(cfg.vocab) for _ in range(rng.randint(4, 2 * cfg.block_size))]
        if rid % cfg.dp == dp_rank:
            specs.append(RequestSpec(rid, prefix + suffix, cfg.max_new_tokens))
    return specs


def blocks_for(cfg: EngineConfig, spec: RequestSpec) -> int:
    """Device blocks a request needs for its whole life (the last token's K/V is never written)."""
    kv_len = len(spec.prompt) + spec.max_new_tokens - 1
    return -(-kv_len // cfg.block_size)


def sized_for_workload(cfg: EngineConfig) -> EngineConfig:
    """The config the engine really runs: ``swap-heavy`` a small device pool, ``no-swap`` one
    nothing is evicted from."""
    if cfg.workload == "swap-heavy":
        return cfg.with_(gpu_blocks=min(cfg.gpu_blocks, SWAP_HEAVY_GPU_BLOCKS))
    if cfg.workload != "no-swap":
        return cfg
    return cfg.with_(gpu_blocks=max(cfg.gpu_blocks, _no_eviction_blocks(cfg)))


def without_swaps(cfg: EngineConfig) -> EngineConfig:
    """``cfg``'s requests served from a device pool nothing is evicted from (the reference
    run's): the ``no-swap`` workload, or for nested prefixes the same prompts, pool enlarged."""
    if cfg.workload == NESTED_PREFIX:
        return cfg.with_(gpu_blocks=max(cfg.gpu_blocks, _no_eviction_blocks(cfg)))
    return cfg.with_(workload="no-swap")


def _no_eviction_blocks(cfg: EngineConfig) -> int:
    """Device blocks for every prefix and every request at once."""
    requests = make_requests(cfg.with_(dp=1, ep=False))
    return PREFIXES * PREFIX_BLOCKS + sum(blocks_for(cfg, s) for s in requests)
