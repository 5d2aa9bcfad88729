"""Convert an fdprof trace into RAPID's STD format, the same events in the same order.

RAPID (github.com/umangm/rapid, the Java implementation of the predictive-race papers) reads
``thread|op(decor)|loc`` lines: ``r(V)``/``w(V)`` accesses, ``acq(L)``/``rel(L)`` lock events,
in one global order. Here each KV-block access of a finished span becomes an ``r``/``w`` of
variable ``<pool>_<block>`` at its span's start, each sync event of a seq-less object an
``acq``/``rel`` of it, and a lane a thread; events are ordered by time, then release, acquire,
access at one instant (fdprof pairs an acquire with the release at its instant, and an access
follows the acquires at or before its start). That ordering is exactly fdprof's where no sync
falls strictly inside a span and no two events of one lane share a time, as in
``bench/hazards_shape.py``'s traces; the converter counts the syncs inside spans and refuses
keyed syncs (queues, signals: STD has no such edge).

    python bench/rapid_std.py TRACE OUT.std
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fdprof.trace import load  # noqa: E402


def convert(trace_path: Path, out: Path, chunk: int = 1 << 20) -> dict[str, int]:
    """Write ``out``; returns how many events of each kind, and syncs inside spans."""
    trace = load(trace_path)
    spans, acc, syncs = trace.spans, trace.accesses, trace.syncs
    if syncs["keyed"].any():
        raise SystemExit(f"{trace_path}: keyed sync objects (queues, signals) have no STD form")
    acc = acc[acc["mode"].isin(["read", "write"])]
    order = np.argsort(spans["span_id"].to_numpy(np.int64))
    srow = order[np.searchsorted(spans["span_id"].to_numpy(np.int64)[order],
                                 acc["span_id"].to_numpy(np.int64))]  # fmt: skip
    end = spans["end"].to_numpy(np.int64)[srow]
    done = end != -1
    lanes = pd_codes(spans["lane"].astype(str).to_numpy(dtype=object)[srow][done],
                     syncs["lane"].astype(str).to_numpy(dtype=object))  # fmt: skip
    a_lane, s_lane = lanes
    a_time = spans["start"].to_numpy(np.int64)[srow][done]
    a_var = (acc["pool"].astype(str).to_numpy(dtype=object)[done] + "_"
             + acc["block"].to_numpy(np.int64)[done].astype(str).astype(object))  # fmt: skip
    a_op = np.where(acc["mode"].to_numpy(dtype=object)[done] == "write", "w", "r")
    s_time = syncs["time"].to_numpy(np.int64)
    is_rel = (syncs["op"] == "release").to_numpy(bool)
    # inside a span of its lane: start < t < end (fdprof's edges skip such a span; STD's don't)
    inside = _inside(a_lane, a_time, end[done], s_lane, s_time)
    n_a, n_s = len(a_time), len(s_time)
    time = np.concatenate([a_time, s_time])
    rank = np.concatenate([np.full(n_a, 2), np.where(is_rel, 0, 1)])
    seq = np.lexsort((np.arange(n_a + n_s), rank, time))
    lane = np.concatenate([a_lane, s_lane])
    text = np.concatenate([
        np.char.add(np.char.add(a_op.astype(object), "("), a_var + ")").astype(object),
        np.where(is_rel, "rel(", "acq(").astype(object)
        + syncs["obj"].astype(str).to_numpy(dtype=object) + ")",
    ])  # fmt: skip
    with out.open("w") as f:
        for lo in range(0, len(seq), chunk):
            part = seq[lo : lo + chunk]
            f.write("".join(f"T{t}|{e}|{i % 1000}\n" for t, e, i in
                            zip(lane[part].tolist(), text[part].tolist(), part.tolist(),
                                strict=True)))  # fmt: skip
    return {"accesses": n_a, "syncs": n_s, "syncs_inside_spans": inside}


def pd_codes(*columns: np.ndarray) -> list[np.ndarray]:
    """Each column's values as codes of one shared numbering."""
    codes = pd.factorize(np.concatenate(columns))[0]
    return np.split(codes, np.cumsum([len(c) for c in columns])[:-1])


def _inside(a_lane, a_start, a_end, s_lane, s_time) -> int:
    """How many sync events fall strictly inside an access span of their lane."""
    count = 0
    for lane in np.unique(s_lane).tolist():
        on = a_lane == lane
        starts, ends = a_start[on], a_end[on]
        order = np.argsort(starts, kind="stable")
        starts, run_end = starts[order], np.maximum.accumulate(ends[order]) if on.any() else ends
        t = s_time[s_lane == lane]
        at = np.searchsorted(starts, t, "left") - 1  # the last span starting before t
        ok = at >= 0
        count += int((run_end[np.maximum(at, 0)][ok] > t[ok]).sum())
    return count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("out", type=Path)
    a = ap.parse_args()
    print(convert(a.trace, a.out))


if __name__ == "__main__":
    main()
