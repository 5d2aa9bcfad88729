"""Swaps against compute on each side of the launch: the host calls and the device work.

Why: an asynchronous engine's host calls return once their work is queued, so a lock around
the host call to ``execute_model`` can look as if it kept swaps and compute apart while the
device ran them at the same time. The share of swap time overlapped with compute is measured
twice: on host lanes (the calls, as before) and on device lanes (the work itself: the CPU twin's
or CUDA's stream spans, or an Nsight export's projections). A baseline whose device-side share
is above zero did not exclude device work. (The per-step breakdown on device time, by kind of
work, is :func:`fdprof.analysis.breakdown.device_breakdown`.)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof.analysis.stats import RatioCI, paired_ratio_ci
from fdprof.analysis.timeline import covered, union


def on_device(spans: pd.DataFrame) -> np.ndarray:
    """Which spans are on device lanes."""
    return spans["lane"].astype(str).str.contains(S.DEVICE_LANE_PATTERN).to_numpy(bool)


def swap_compute_overlap(
    spans: pd.DataFrame, swaps: tuple[str, ...], compute: tuple[str, ...], seed: int = 0
) -> RatioCI | None:
    """Share of the swaps' time (summed over swaps) during which some compute span ran, with a
    95% CI over swaps resampled; None without swap time."""
    done = spans[spans["end"] != -1]
    sw = done[done["name"].isin(swaps)]
    start, end = sw["start"].to_numpy(np.int64), sw["end"].to_numpy(np.int64)
    if int((end - start).sum()) == 0:
        return None
    comp = done[done["name"].isin(compute)]
    cu = union(comp["start"].to_numpy(), comp["end"].to_numpy())
    return paired_ratio_ci(covered(cu, start, end), end - start, seed=seed)


def host_overlap(spans: pd.DataFrame, seed: int = 0) -> RatioCI | None:
    """Swap calls overlapped with ``execute_model`` calls, on host lanes."""
    host = spans[~on_device(spans)]
    return swap_compute_overlap(host, S.SWAP_SPANS, S.COMPUTE_SPANS, seed)


def device_overlap(spans: pd.DataFrame, seed: int = 0) -> RatioCI | None:
    """Copies overlapped with compute work, on device lanes; None without device swaps."""
    device = spans[on_device(spans)]
    return swap_compute_overlap(device, S.DEVICE_SWAP_SPANS, S.DEVICE_COMPUTE_SPANS, seed)
