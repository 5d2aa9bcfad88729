"""KV integrity: a block's fingerprint is an exact checksum of its bytes over all layers, K and V.

The writer of a block records the fingerprint of what it wrote (the worker when a block fills,
reported to the scheduler); every later copy or read of that block is checked against it, so a
block overwritten or copied at the wrong moment is detected, not guessed.
"""

from __future__ import annotations

import torch

from engine.results import IntegrityStats


def _blocks(pool: torch.Tensor, ids: list[int]) -> torch.Tensor:
    """``[len(ids), -1]`` rows of the blocks ``ids`` of a ``[L, 2, N, ...]`` pool."""
    idx = torch.tensor(ids, device=pool.device)
    return pool.index_select(2, idx).transpose(0, 2).reshape(len(ids), -1)


def fingerprints(pool: torch.Tensor, ids: list[int]) -> list[int]:
    if not ids:
        return []
    rows = _blocks(pool, ids).contiguous().view(torch.int32)
    return rows.sum(dim=1, dtype=torch.int64).tolist()


class IntegrityChecker:
    """Checks blocks against the fingerprints they must have, counting into :attr:`stats`."""

    def __init__(self) -> None:
        self.stats = IntegrityStats()

    def check(self, pool: torch.Tensor, ids: list[int], expected: list[int]) -> list[int]:
        """Compare blocks ``ids`` with their ``expected`` fingerprints; the ids that differ.
        Non-finite values in them are counted too."""
        if not ids:
            return []
        rows = _blocks(pool, ids).contiguous()
        self.stats.nan += int((~torch.isfinite(rows)).sum())
        got = rows.view(torch.int32).sum(dim=1, dtype=torch.int64).tolist()
        bad = [b for b, g, e in zip(ids, got, expected, strict=True) if g != e]
        self.stats.blocks_checked += len(ids)
        self.stats.mismatches += len(bad)
        return bad
