"""What a run produces, as typed data: each process's statistics, the run's results and the
processes' records in ``run.json``. Every class has one ``to_json`` (the ``--json`` object and
``run.json`` are made from it); nothing else builds these dicts."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import TypeVar

import numpy as np

from fdprof.semconv import CacheManagerMode

C = TypeVar("C", bound="Counts")


@dataclass
class Counts:
    """Counters that add up over processes (every field an int, 0 by default)."""

    @classmethod
    def total(cls: type[C], parts: Iterable[C]) -> C:
        out = cls()
        for part in parts:
            for f in fields(cls):
                setattr(out, f.name, getattr(out, f.name) + getattr(part, f.name))
        return out

    def to_json(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class SwapStats(Counts):
    """The swap tasks an engine process issued, and the blocks they moved."""

    to_cpu: int = 0
    to_gpu: int = 0
    blocks: int = 0


@dataclass
class IntegrityStats(Counts):
    """What the KV checks found (:mod:`fdprof.engine.integrity`): blocks compared with their
    fingerprints, those that differed, and non-finite values seen."""

    blocks_checked: int = 0
    mismatches: int = 0
    nan: int = 0


@dataclass(frozen=True)
class EngineStats:
    """What an engine process reports when it has served its requests."""

    steps: int
    step_ns: list[int]
    generated_tokens: int
    requests: int
    swaps: SwapStats
    #: request id -> generated tokens
    outputs: dict[int, list[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkerStats:
    """What a worker or a transfer process reports at the end."""

    integrity: IntegrityStats
    device: str = ""


@dataclass(frozen=True)
class StepLatency:
    """p50/p90/p99/max of the steps' wall times, ms: one run's spread, the only uncertainty a
    single run has (run-to-run spread needs repeats: ``fdprof ab``)."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None

    @staticmethod
    def of(step_ns: list[int]) -> StepLatency:
        if not step_ns:
            return StepLatency()
        ms = np.asarray(step_ns, dtype=float) / 1e6
        p50, p90, p99 = (round(float(v), 3) for v in np.percentile(ms, [50, 90, 99]))
        return StepLatency(p50, p90, p99, round(float(ms.max()), 3))

    def to_json(self) -> dict[str, float | None]:
        return asdict(self)


@dataclass(frozen=True)
class RunResults:
    """One run's results: ``fdprof run --json`` prints :meth:`to_json`, ``run.json`` keeps it."""

    kv_lock: str
    device: str
    workload: str
    seed: int
    dp: int
    tp: int
    fault: str | None
    requests: int
    generated_tokens: int
    wall_s: float
    tokens_per_s: float
    steps: int
    step_ms: StepLatency
    swaps: SwapStats
    integrity: IntegrityStats
    trace: str
    #: request id -> its generated tokens (``tokens.json`` in the run directory, not the JSON)
    outputs: dict[int, list[int]] = field(default_factory=dict, repr=False)
    #: the tokens compared with a run of the same seed without swaps (``--reference``)
    reference: ReferenceCheck | None = None
    #: the cache manager's design (:class:`~fdprof.semconv.CacheManagerMode`)
    cache_manager: str = CacheManagerMode.OLD
    #: the settings the fault turned on itself (``{"device_async": true, ...}``; empty: none)
    fault_modes: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "outputs"}
        for k in ("step_ms", "swaps", "integrity", "reference"):
            out[k] = out[k].to_json() if out[k] is not None else None
        return out


@dataclass(frozen=True)
class ReferenceCheck:
    """A run's tokens against the reference run's, request by request."""

    run: str
    requests: int
    #: ids of the requests whose tokens differ (or that only one of the runs served)
    mismatched: list[int]

    @property
    def equal(self) -> bool:
        return not self.mismatched

    def to_json(self) -> dict:
        return {**asdict(self), "equal": self.equal}


@dataclass(frozen=True)
class ProcessRecord:
    """One engine process as ``run.json`` lists it."""

    pid: int
    role: str
    name: str
    dp_rank: int
    #: -1 for the engine process (it serves every TP rank of its DP group)
    tp_rank: int
    record: str
    #: the device KV cache: "owner" (the transfer process creates it), "attached" (the worker)
    kv_cache: str | None = None
    exitcode: int | None = None

    def to_json(self) -> dict:
        return asdict(self)
