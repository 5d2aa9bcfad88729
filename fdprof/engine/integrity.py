"""KV integrity: a block's fingerprint is an exact checksum of its bytes over all layers, K and V.

The writer of a block records the fingerprint of what it wrote (the worker when a block fills,
reported to the scheduler); every later copy or read of that block is checked against it, so a
block overwritten or copied at the wrong moment is detected, not guessed.
"""

from __future__ import annotations

import math

import torch

from fdprof.engine.results import IntegrityStats


def _gathered(pool: torch.Tensor, ids: list[int]) -> torch.Tensor:
    """Blocks ``ids`` of a ``[L, 2, N, ...]`` pool, one gather: ``[L * 2, len(ids), -1]``."""
    picked = pool.index_select(2, torch.tensor(ids, device=pool.device))
    return picked.view(pool.shape[0] * pool.shape[1], len(ids), -1)


def _sums(blocks: torch.Tensor) -> torch.Tensor:
    """The fingerprint of each block of ``blocks`` (:func:`_gathered`): its words as int32,
    summed in int64 (exact in any order, so no copy puts a block's layers together first)."""
    return blocks.view(torch.int32).sum(dim=2, dtype=torch.int64).sum(dim=0)


def fingerprint_tensor(pool: torch.Tensor, ids: list[int]) -> torch.Tensor:
    """The fingerprints of blocks ``ids`` as a tensor on the pool's device (no host read: the
    asynchronous worker reads it after its step's event)."""
    if not ids:
        return torch.zeros(0, dtype=torch.int64)
    return _sums(_gathered(pool, ids))


def fingerprints(pool: torch.Tensor, ids: list[int]) -> list[int]:
    return fingerprint_tensor(pool, ids).tolist()


def run_sums(pool: torch.Tensor, ids: list[int]) -> torch.Tensor:
    """One sum per run of consecutive blocks of ``ids`` (sorted): finite unless the run holds
    a NaN/Inf (see :meth:`IntegrityChecker.count_nonfinite_blocks`)."""
    runs = _runs(ids)
    if not runs:
        return torch.zeros(0)
    return torch.stack([pool[:, :, lo:hi].sum() for lo, hi in runs])


def _nonfinite(t: torch.Tensor) -> int:
    """NaN/Inf values in ``t``: none when its sum is finite (finite values this small cannot sum
    to an infinity), else counted value by value."""
    return 0 if bool(torch.isfinite(t.sum())) else int((~torch.isfinite(t)).sum())


def _runs(ids: list[int]) -> list[tuple[int, int]]:
    """``[start, end)`` runs of consecutive ids (``ids`` sorted)."""
    runs: list[tuple[int, int]] = []
    for b in ids:
        if runs and b == runs[-1][1]:
            runs[-1] = (runs[-1][0], b + 1)
        else:
            runs.append((b, b + 1))
    return runs


class IntegrityChecker:
    """Checks blocks against the fingerprints they must have, and values for NaN/Inf, counting
    into :attr:`stats`."""

    def __init__(self) -> None:
        self.stats = IntegrityStats()

    def count_nonfinite(self, t: torch.Tensor) -> int:
        """NaN/Inf values in ``t`` (e.g. a step's logits), counted."""
        bad = int((~torch.isfinite(t)).sum()) if t.numel() else 0
        self.stats.nan += bad
        return bad

    def count_nonfinite_runs(self, pool: torch.Tensor, ids: list[int], sums: list[float]) -> int:
        """:meth:`count_nonfinite_blocks` given the runs' sums (:func:`run_sums`)."""
        bad = 0
        for (lo, hi), total in zip(_runs(ids), sums, strict=True):
            if not math.isfinite(total):
                bad += int((~torch.isfinite(pool[:, :, lo:hi])).sum())
        self.stats.nan += bad
        return bad

    def count_nonfinite_blocks(self, pool: torch.Tensor, ids: list[int]) -> int:
        """NaN/Inf values in blocks ``ids`` (sorted) of a pool, counted. A run of consecutive
        blocks is summed in place (no copy)."""
        bad = sum(_nonfinite(pool[:, :, lo:hi]) for lo, hi in _runs(ids))
        self.stats.nan += bad
        return bad

    def check(self, pool: torch.Tensor, ids: list[int], expected: list[int]) -> list[int]:
        """Compare blocks ``ids`` with their ``expected`` fingerprints; the ids that differ.
        Non-finite values in them are counted too."""
        if not ids:
            return []
        blocks = _gathered(pool, ids)
        self.stats.nan += _nonfinite(blocks)
        return self.tally(ids, _sums(blocks).tolist(), expected)

    def tally(self, ids: list[int], got: list[int], expected: list[int]) -> list[int]:
        """Count blocks ``ids`` whose fingerprints ``got`` differ from ``expected``; those ids."""
        bad = [b for b, g, e in zip(ids, got, expected, strict=True) if g != e]
        self.stats.blocks_checked += len(ids)
        self.stats.mismatches += len(bad)
        return bad
