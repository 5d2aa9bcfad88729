"""The plain-data messages between the engine's processes (lists and ints, never tensors)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SwapTask:
    """Engine → transfer: copy blocks between pools. ``fps`` are the fingerprints the blocks'
    content must have (the copy is checked against them)."""

    task_id: int
    direction: str  # "to_cpu" | "to_gpu"
    gpu_blocks: list[int]
    cpu_blocks: list[int]
    fps: list[int]
    traceparent: str = ""


@dataclass(frozen=True)
class BatchSeq:
    request_id: int
    tokens: list[int]
    start: int
    block_table: list[int]
    traceparent: str = ""
    #: cached blocks this sequence reads for the first time, and the fingerprints they must have
    check_blocks: list[int] = field(default_factory=list)
    check_fps: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Batch:
    """Engine → worker: one step. ``seq`` is the sync sequence number of ``queue:batch``."""

    step: int
    seq: int
    seqs: list[BatchSeq]


@dataclass(frozen=True)
class StepResult:
    """Worker → engine: each sequence's next token and the fingerprints of blocks it filled."""

    step: int
    seq: int
    next_tokens: list[int]
    filled: dict[int, int]
