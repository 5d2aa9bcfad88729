"""What makes a run safe, for every command that judges one, and how a verdict names a lock
that did not exclude.

Why one place: ``fdprof hazards`` and ``fdprof ab`` judged the same run differently (a broken
lock was exit 1 for one and SAFE for the other). The rule (docs/analysis.md, "Verdicts and
exit codes"): a run is unsafe when a pair of conflicting KV-block accesses is unordered (a
race, overlapping this run or latent), an access falls outside its block's lifetime, a block's
ownership is broken (:mod:`fdprof.analysis.ownership`), or, where the command checks content,
a block's content did not match. A lock whose holds overlapped on
two lanes is *named* in the verdict, not counted: the detector already left its edges out of
the order before it looked for races, so it hides none; a run that relied on it has races and
is unsafe for them, one that did not is safe whatever the lock did.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: the finding counts (``HazardReport.counts`` keys) that make a run unsafe
UNSAFE_FINDINGS = ("races", "lifetime", "ownership")


def safe(counts: Mapping[str, int], mismatches: int = 0) -> bool:
    """Whether a run with these finding counts (and corrupted blocks) is safe."""
    return mismatches == 0 and all(counts.get(k, 0) == 0 for k in UNSAFE_FINDINGS)


def broken_lock_clause(locks: Iterable[str], where: str = "") -> str:
    """The words every verdict line uses for locks that did not exclude (``where``: in which
    runs, or how often), e.g. ``BROKEN LOCK lock:kv/dp0 (3 overlapping holds): it did not
    exclude its threads, so the accesses were judged without it``."""
    return (f"BROKEN LOCK {', '.join(locks)}{where}: it did not exclude its threads, so the "
            "accesses were judged without it")  # fmt: skip
