"""Lock what-if: drop the lock's edges from a (baseline) trace and look again.

Why: the accesses that become unordered without the lock are exactly those the lockless
protocol must order by itself. On a correct protocol the answer is "none"; on a seeded fault
it is the fault.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from fdprof import semconv as S
from fdprof.analysis.columns import json_records
from fdprof.analysis.hazards import HazardReport, find_hazards
from fdprof.trace.model import Trace

#: the baseline's inter-process KV lock (``lock:kv``) and any other ``lock:*`` object
LOCK_OBJECTS = (S.LOCK_OBJECTS,)


@dataclass(frozen=True)
class WhatIf:
    """``with_lock``: the trace as recorded; ``without_lock``: its lock edges dropped;
    ``newly_unordered``: races of the latter that the former did not have."""

    dropped: tuple[str, ...]
    with_lock: HazardReport
    without_lock: HazardReport
    newly_unordered: pd.DataFrame

    @property
    def safe(self) -> bool:
        return self.newly_unordered.empty

    def to_json(self) -> dict[str, Any]:
        return {
            "dropped": list(self.dropped),
            "newly_unordered": json_records(self.newly_unordered),
            "count": len(self.newly_unordered),
            "with_lock": self.with_lock.counts,
            "without_lock": self.without_lock.counts,
        }


def what_if_drop_lock(trace: Trace, lock_objects: Iterable[str] = LOCK_OBJECTS) -> WhatIf:
    dropped = tuple(lock_objects)
    before = find_hazards(trace)
    after = find_hazards(trace, drop_objects=dropped)
    known = set(zip(before.races["span_a"], before.races["span_b"], strict=True))
    fresh = [
        (a, b) not in known
        for a, b in zip(after.races["span_a"], after.races["span_b"], strict=True)
    ]
    return WhatIf(dropped, before, after, after.races[fresh].reset_index(drop=True))
