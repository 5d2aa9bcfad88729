"""The run's own safety verdict, for its metrics: the happens-before check of ``fdprof
hazards`` over the run's records once they are all in, as counts per finding, so a dashboard's
safety row shows what ``fdprof hazards RUN_DIR`` would say of the very same run."""

from __future__ import annotations

from pathlib import Path

from fdprof.metric_names import Finding


def hazard_counts(run_dir: Path) -> dict[str, int]:
    """Finding (:class:`fdprof.metric_names.Finding`) → count, for ``run_dir``."""
    from fdprof.analysis.hazards import find_hazards
    from fdprof.trace import load

    counts = find_hazards(load(run_dir)).counts
    return {
        Finding.RACE: counts["overlaps"],
        Finding.LATENT_RACE: counts["latent"],
        Finding.LIFETIME: counts["lifetime"],
        Finding.BROKEN_LOCK: counts["broken_locks"],
    }
