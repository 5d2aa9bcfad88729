"""The plain-data messages between the engine's processes (lists and ints, never tensors).

A block's fingerprint (:mod:`fdprof.engine.integrity`) is one int per TP rank: each rank's pool
holds its own shard of the block (``Fingerprint``, a tuple of ``tp`` ints). Sync sequence numbers of
TP rank ``t`` are offset by ``t * TP_SEQ_STRIDE`` (:func:`tp_seq`) where each rank sends or
receives its own copy of a message, so every release has exactly one matching acquire.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Fingerprint = tuple[int, ...]
#: part of a block copied: (host block, first host token, device block, first device token,
#: tokens)
Piece = tuple[int, int, int, int, int]

#: above every DP group's task ids and step numbers (``dp_rank * 10**9 + n``)
TP_SEQ_STRIDE = 10**12


def tp_seq(seq: int, tp_rank: int) -> int:
    """The sequence number of TP rank ``tp_rank``'s copy of message ``seq``."""
    return seq + tp_rank * TP_SEQ_STRIDE


@dataclass(frozen=True)
class SwapTask:
    """Engine → transfer: copy blocks between pools. ``fps`` are the fingerprints the blocks'
    content must have, one per TP rank (the copy is checked against its rank's)."""

    task_id: int
    direction: str  # "to_cpu" | "to_gpu"
    gpu_blocks: list[int]
    cpu_blocks: list[int]
    fps: list[Fingerprint]
    traceparent: str = ""
    #: asynchronous engine and Cache Manager V1: the step (sequence number) whose forward pass
    #: the copy must wait for: a store of the blocks that step fills, a V1 load into blocks
    #: that step may still use; 0: none
    after_step: int = 0
    #: Cache Manager V1's loads: the copy as ``(host block, host token, device block, device
    #: token, tokens)`` pieces, split at transfer-chunk boundaries; empty: whole blocks
    #: (``cpu_blocks[i]`` to ``gpu_blocks[i]``)
    pieces: list[Piece] = field(default_factory=list)


@dataclass(frozen=True)
class BatchSeq:
    request_id: int
    tokens: list[int]
    start: int
    block_table: list[int]
    traceparent: str = ""
    #: cached blocks this sequence reads for the first time, and the fingerprints they must have
    check_blocks: list[int] = field(default_factory=list)
    check_fps: list[Fingerprint] = field(default_factory=list)


@dataclass(frozen=True)
class Batch:
    """Engine → worker: one step. ``seq`` is the sync sequence number of ``queue:batch``; an
    empty ``seqs`` is a step a worker takes only to join its expert-parallel collectives."""

    step: int
    seq: int
    seqs: list[BatchSeq]
    #: asynchronous engine: the last swap-in (task id) whose blocks this step reads for the
    #: first time; the forward waits on its event (swap-ins complete in task order); 0: none
    after_swap_in: int = 0


@dataclass(frozen=True)
class StepResult:
    """Worker → engine: each sequence's next token and the fingerprints of blocks it filled
    (from one TP rank: its shard; :func:`merge_shards` joins the ranks' results)."""

    step: int
    seq: int
    next_tokens: list[int]
    filled: dict[int, Fingerprint]
    tp_rank: int = 0


def merge_shards(results: list[StepResult]) -> StepResult:
    """One step's results from every TP rank as one: the tokens (equal on every rank: the
    logits are all-reduced) and each filled block's fingerprint over the ranks' shards."""
    results = sorted(results, key=lambda r: r.tp_rank)
    first = results[0]
    if len(results) == 1:
        return first
    for r in results[1:]:
        if r.next_tokens != first.next_tokens or r.step != first.step:
            raise RuntimeError(f"TP rank {r.tp_rank} disagrees with rank 0 on step {r.step}")
    filled = {b: tuple(fp for r in results for fp in r.filled[b]) for b in first.filled}
    return StepResult(first.step, first.seq, first.next_tokens, filled)
