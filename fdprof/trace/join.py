"""Join an Nsight Systems trace (or an NVTX capture) to the native run it profiled, by span id.

NVTX ranges carry only a name and a payload; the probe puts the span id in the int64 payload
(an Nsight export keeps it in ``nvtx.payload``; the NVTX capture reader already makes it the
span id), so each range finds its native span and gets back what NVTX cannot carry
(attributes, KV accesses, step, role, parent, trace id). The result is on the Nsight timebase:
matched spans keep Nsight's start/end; everything else from the run (unmatched spans, sync
events) is shifted by the median offset between the two clocks measured on the matched pairs.
Device work and launch edges from the export stay as they are.

Device spans of the run (the probe's stream work, on its device lanes) are matched too: their
NVTX range timed the *launch* on the host, so they keep their own interval (shifted) and stay
out of the clock offset; the export's projection of their range (:mod:`nsys_projection`) is
the GPU's own account of the same work, and how far the two differ goes to
``meta["device_vs_nsys_ns"]``. A host span whose range launched device work hands its KV-block
accesses to its projections, so the analyses judge the work where and when it ran.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof.errors import FdprofError
from fdprof.trace import attrs as A
from fdprof.trace.assemble import assemble
from fdprof.trace.attrs import Attrs
from fdprof.trace.model import Trace
from fdprof.trace.nsys import PAYLOAD
from fdprof.trace.nsys_projection import accesses_to_device


def join(profile: Trace, run: Trace) -> Trace:
    pay = profile.attrs.column(PAYLOAD)
    if pay is not None:
        if pay.kind != A.INT:
            raise FdprofError(f"{profile.meta.get('path')}: {PAYLOAD} should be integers")
        ids, values = pay.span_id, pay.values.to_numpy()
    else:  # the reader already made the payload the span id (NVTX capture)
        ids = values = profile.spans["span_id"].to_numpy()
    payload = pd.Series(values, index=ids)
    native = run.spans.set_index("span_id")
    matched = payload[payload.isin(native.index)]
    if not len(matched):
        raise FdprofError(
            f"{profile.meta.get('path')}: no NVTX range carries a span id of "
            f"{run.meta.get('path')} (was the run recorded with NVTX on?)"
        )
    ranges = profile.spans.set_index("span_id")
    on_device = native["lane"].str.match(S.DEVICE_LANE_PATTERN).fillna(False)
    device = on_device.loc[matched.to_numpy()].to_numpy(bool)
    host = ~device if (~device).any() else np.ones(len(device), bool)
    offset = int(
        np.median(
            ranges.loc[matched.index[host], "start"].to_numpy()
            - native.loc[matched.to_numpy()[host], "start"].to_numpy()
        )
    )
    # ids of the profile's other spans move above the run's, so none collides
    base = int(max(run.spans["span_id"].max(), 0))
    others = ranges.index.difference(matched.index)
    renumber = pd.Series(np.arange(base + 1, base + 1 + len(others)), index=others)
    new_id = pd.concat([pd.Series(matched.to_numpy(), index=matched.index), renumber])

    mine = ranges.loc[matched.index].copy()
    theirs = native.loc[matched.to_numpy()]
    for col in ("parent_id", "name", "role", "trace_id"):
        mine[col] = theirs[col].to_numpy()
    for col in ("start", "end"):  # device work: when it ran, not when it was launched
        own = theirs[col].to_numpy()
        mine.loc[device, col] = np.where(own[device] < 0, -1, own[device] + offset)
    mine.index = matched.to_numpy()
    rest = ranges.loc[others].copy()
    at = new_id.index.get_indexer(rest["parent_id"].to_numpy())  # exact: ids need all 64 bits
    rest["parent_id"] = np.where(at >= 0, new_id.to_numpy()[np.maximum(at, 0)], 0)
    rest.index = renumber.to_numpy()
    unmatched = native.drop(index=matched.to_numpy()).copy()
    unmatched["start"] = unmatched["start"] + offset
    unmatched["end"] = unmatched["end"].where(unmatched["end"] < 0, unmatched["end"] + offset)
    spans = pd.concat([mine, rest, unmatched]).rename_axis("span_id").reset_index()

    prof_attrs = profile.attrs.without(PAYLOAD).with_span_ids(
        lambda ids: new_id.reindex(ids).to_numpy()
    )
    projections = new_id.loc[profile.attr(S.NVTX_GPU_OPS).index].to_numpy()
    moves, several = _host_moves(rest.loc[projections, "parent_id"], run, on_device)
    all_attrs = accesses_to_device(Attrs.concat([run.attrs, prof_attrs]), moves)

    run_syncs = run.syncs.copy()
    run_syncs["time"] = run_syncs["time"] + offset
    prof_syncs = profile.syncs.copy()
    linked = prof_syncs["span_id"] != 0
    prof_syncs.loc[linked, "span_id"] = new_id.reindex(
        prof_syncs.loc[linked, "span_id"].to_numpy()
    ).to_numpy()
    syncs = pd.concat([run_syncs, prof_syncs], ignore_index=True)

    procs = pd.concat([run.processes, profile.processes]).drop_duplicates("pid")
    trace = Trace(
        meta={
            "format": "nsys+native",
            "path": profile.meta.get("path"),
            "join": run.meta.get("path"),
            "clock_offset_ns": offset,
            "ranges_joined": len(matched),
            "device_vs_nsys_ns": _device_vs_nsys(rest.loc[projections], mine, on_device),
        }
        | {k: run.meta[k] for k in ("config", "results") if k in run.meta}
    )
    span_cols = {c: spans[c].to_numpy() for c in spans.columns if c not in ("lane", "step")}
    span_cols["lane"] = np.full(len(spans), None, dtype=object)
    span_cols["trace_id"] = spans["trace_id"].to_numpy(object, na_value=None)
    is_device = spans["lane"].str.contains(S.DEVICE_LANE_PATTERN).fillna(False).to_numpy()
    span_cols["lane"][is_device] = spans["lane"].to_numpy(object)[is_device]
    assemble(
        trace,
        span_cols,
        all_attrs,
        {c: syncs[c].to_numpy(object if c in ("op", "obj", "lane") else None) for c in syncs},
        {c: procs[c].to_numpy() for c in procs.columns},
    )
    trace.meta.setdefault("warnings", []).extend(profile.warnings + run.warnings)
    if several:
        trace.warn(f"{several} span(s) with KV accesses launched device work on several "
                   "streams: their accesses stay on the host span", "join_several_streams",
                   several)  # fmt: skip
    trace.warn(
        f"joined {len(matched)} of {len(payload)} NVTX ranges with a payload to native spans; "
        f"{len(unmatched)} unmatched native spans and the run's syncs shifted by {offset} ns "
        "onto the Nsight timebase",
        "join",
        len(matched),
    )
    return trace


def _host_moves(
    parents: pd.Series, run: Trace, on_device: pd.Series
) -> tuple[dict[int, list[int]], int]:
    """Host spans of the run with KV accesses -> the projection of their range, where it ran
    on one lane. A range whose work ran on several lanes keeps its accesses on the host span
    (warned): copied to each lane they would race with themselves, and the export does not say
    which lane's work touched which block."""
    with_accesses = set(run.accesses["span_id"].tolist())
    moves: dict[int, list[int]] = {}
    for proj, parent in parents.items():
        if parent in with_accesses and not on_device.get(parent, True):
            moves.setdefault(int(parent), []).append(int(proj))
    several = sum(len(projs) > 1 for projs in moves.values())
    return {host: projs for host, projs in moves.items() if len(projs) == 1}, several


def _device_vs_nsys(projections: pd.DataFrame, mine: pd.DataFrame, on_device: pd.Series):
    """How the run's device spans' starts differ from the GPU's (their ranges' projections onto
    one lane each): what the probe's clock mapping is off by, in ns; None without any."""
    ok = projections["parent_id"].map(on_device).fillna(False).astype(bool)
    one_lane = ~projections["parent_id"].duplicated(keep=False)
    pairs = projections[ok & one_lane]
    if not len(pairs):
        return None
    delta = mine.loc[pairs["parent_id"].to_numpy(), "start"].to_numpy() - pairs["start"].to_numpy()
    return {"spans": len(delta), "median": int(np.median(delta)),
            "max_abs": int(np.abs(delta).max())}  # fmt: skip
