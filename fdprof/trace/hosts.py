"""Several hosts' traces on one timebase, from the sync edges between them and their anchors.

Why: each host records on its own monotonic clock; its wall clock (the anchor that puts a
trace on the epoch) is only as good as its synchronisation, milliseconds with NTP, anything
without. Happens-before does not need the hosts' clocks to agree, but everything else does:
which accesses overlapped, time windows, the order of unkeyed events. What the traces
themselves say is exact: a message is received after it was sent. So for every cross-host
edge (a keyed release on host A paired with its acquire on host B: collectives, messages),
``t_acquire + θ_B >= t_release + θ_A``, where ``θ_H`` is what puts host H's times on the merged
timebase. These are difference constraints: per pair of hosts, ``θ_A - θ_B <= w_AB`` (the
smallest ``t_acquire - t_release`` over their edges); shortest paths (Floyd-Warshall over
the hosts) close them, and give each host's offset from the reference host as an interval,
``[lo, hi]``: every offset in it is consistent with every edge, and the true one is in it
(exactly, if the edges are right and the clocks do not drift over the trace). A negative
cycle means no offsets put every acquire after its release: a **clock alarm** (the edges
contradict each other: drift, or a mis-paired object).

The anchors are a second, independent measurement: ``epoch - monotonic`` of each host's
processes (a store rolled with ``clock="host"`` keeps them, :mod:`fdprof.trace.roll`; a trace
already on the epoch has offset 0 by its anchors). A host whose anchor puts it outside its edge
interval by more than ``anchor_error_ns`` (its stated synchronisation error) raises a clock
alarm too, naming the host and by how much: its wall clock is off. Where they agree, the
anchor's interval narrows the edges'; a host no edge reaches is placed by its anchor alone.

The estimate is the middle of each interval, hosts fixed one after another (each fix
re-closes the constraints, so the estimates are consistent together); each host's
``bound_ns`` is the farthest the truth can be from its estimate within its interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof.errors import FdprofError
from fdprof.trace.merge import merge
from fdprof.trace.model import Trace, frame

#: a store's subdirectory per host at a receiving endpoint: ``<endpoint>/host=<name>``
HOST_DIR = "host="
#: a host's anchor is trusted within this much of the edges unless told otherwise (NTP on a
#: LAN keeps clocks within about a millisecond)
ANCHOR_ERROR_NS = 1_000_000
INF = np.iinfo(np.int64).max // 4


@dataclass
class HostClock:
    """One host's offset onto the merged timebase (ns, added to its times beyond the
    reference host's), what bounds it, and how it was found."""

    host: str
    offset_ns: int | None
    lo_ns: int | None
    hi_ns: int | None
    bound_ns: int | None
    edges: int
    anchor_offset_ns: int | None
    basis: str

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Merged:
    trace: Trace
    reference: str
    hosts: list[HostClock]
    alarms: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"reference": self.reference, "hosts": [h.to_json() for h in self.hosts],
                "clock_alarms": self.alarms}  # fmt: skip


def anchor_of(trace: Trace) -> int | None:
    """The host's anchor-implied offset onto the epoch: 0 when its times are already there
    (every process anchored), the median of its processes' ``epoch - monotonic`` when it
    kept them (a host clock), else None."""
    anchors = trace.meta.get("clock_anchors")
    if anchors:
        values = sorted(int(v) for v in anchors.values())
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) // 2
    if len(trace.processes) and trace.processes["anchored"].all():
        return 0
    return None


def cross_host_edges(traces: dict[str, Trace]) -> pd.DataFrame:
    """Every keyed release on one host paired with an acquire of the same (object, seq) on
    another: ``rel_host, acq_host, slack`` (``t_acquire - t_release``, each on its own host's
    clock). A (object, seq) released more than once is left out (which release an acquire
    follows is not known)."""
    rows = []
    for host, trace in traces.items():
        s = trace.syncs
        keyed = s[s["keyed"].to_numpy(bool)]
        rows.append(pd.DataFrame({"host": host, "op": keyed["op"].astype(str).to_numpy(),
                                  "obj": keyed["obj"].astype(str).to_numpy(),
                                  "seq": keyed["seq"].to_numpy(np.int64),
                                  "time": keyed["time"].to_numpy(np.int64)}))  # fmt: skip
    events = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
    if events.empty:
        return pd.DataFrame(columns=["rel_host", "acq_host", "slack"])
    rel = events[events["op"] == S.SyncOp.RELEASE]
    rel = rel[~rel.duplicated(["obj", "seq"], keep=False)]
    acq = events[events["op"] == S.SyncOp.ACQUIRE]
    pairs = acq.merge(rel, on=["obj", "seq"], suffixes=("_a", "_r"))
    pairs = pairs[pairs["host_a"] != pairs["host_r"]]
    slack = (pairs["time_a"] - pairs["time_r"]).to_numpy(np.int64)
    return pd.DataFrame({"rel_host": pairs["host_r"].to_numpy(),
                         "acq_host": pairs["host_a"].to_numpy(), "slack": slack})  # fmt: skip


def _close(ub: np.ndarray) -> np.ndarray:
    """Floyd-Warshall on ``ub[a, b]``, the upper bound of ``θ_a - θ_b``."""
    ub = ub.copy()
    for k in range(len(ub)):
        ub = np.minimum(ub, ub[:, k : k + 1] + ub[k : k + 1, :])
    return np.minimum(ub, INF)


def merge_hosts(traces: dict[str, Trace], anchor_error_ns: int = ANCHOR_ERROR_NS) -> Merged:
    """The hosts' traces on the reference host's timebase (the first host), with each host's
    offset, its bounds, and the clock alarms (module doc)."""
    if len(traces) < 1:
        raise FdprofError("nothing to merge")
    names = list(traces)
    _distinct_pids(traces)
    n = len(names)
    index = {h: i for i, h in enumerate(names)}
    edges = cross_host_edges(traces)
    ub = np.full((n, n), INF, dtype=np.int64)
    np.fill_diagonal(ub, 0)
    count = np.zeros(n, dtype=np.int64)
    if len(edges):
        tight = edges.groupby(["rel_host", "acq_host"])["slack"].min()
        for (a, b), w in tight.items():  # θ_a - θ_b <= t_acq - t_rel
            ub[index[a], index[b]] = min(ub[index[a], index[b]], int(w))
        for h, c in pd.concat([edges["rel_host"], edges["acq_host"]]).value_counts().items():
            count[index[h]] = int(c)
    alarms: list[dict[str, Any]] = []
    closed = _close(ub)
    if (np.diag(closed) < 0).any():
        bad = [names[i] for i in np.flatnonzero(np.diag(closed) < 0)]
        alarms.append({"kind": "inconsistent_edges", "hosts": bad,
                       "excess_ns": int(-np.diag(closed).min()),
                       "detail": "no clock offsets put every cross-host acquire after its "
                                 "release (clock drift, or an object paired wrongly): the "
                                 "hosts are placed by their anchors alone"})  # fmt: skip
        ub = np.where(np.eye(n, dtype=bool), 0, INF)
        closed = ub.copy()
    anchors = {h: anchor_of(t) for h, t in traces.items()}
    ref = 0
    lo = -closed[ref, :]  # θ_h - θ_ref >= -ub[ref, h]
    hi = closed[:, ref].copy()  # θ_h - θ_ref <= ub[h, ref]
    with_anchor = ub.copy()
    for i, h in enumerate(names):
        if i == ref or anchors[h] is None or anchors[names[ref]] is None:
            continue
        a = anchors[h] - anchors[names[ref]]
        edge_lo, edge_hi = lo[i], hi[i]
        if (
            edge_lo > -INF // 2
            and edge_hi < INF // 2
            and not (edge_lo - anchor_error_ns <= a <= edge_hi + anchor_error_ns)
        ):
            off = int(edge_lo - a) if a < edge_lo else int(a - edge_hi)
            alarms.append({"kind": "anchor_disagrees", "hosts": [h], "excess_ns": off,
                           "detail": f"host {h}'s clock anchor puts it {off:,} ns outside what "
                                     "the sync edges allow (its wall clock is off by more than "
                                     f"{anchor_error_ns:,} ns): the edges are used"})  # fmt: skip
            continue
        with_anchor[i, ref] = min(with_anchor[i, ref], a + anchor_error_ns)
        with_anchor[ref, i] = min(with_anchor[ref, i], -(a - anchor_error_ns))
    closed = _close(with_anchor)
    if (np.diag(closed) < 0).any():  # cannot happen: each anchor was checked against the edges
        closed = _close(ub)
    lo, hi = -closed[ref, :], closed[:, ref].copy()
    hosts: list[HostClock] = []
    fixed = closed.copy()
    est = np.zeros(n, dtype=np.int64)
    for i, h in enumerate(names):
        anchor = None if anchors[h] is None or anchors[names[ref]] is None else int(
            anchors[h] - anchors[names[ref]])  # fmt: skip
        if i == ref:
            hosts.append(HostClock(h, 0, 0, 0, 0, int(count[i]), anchor, "reference"))
            continue
        cur_lo, cur_hi = -fixed[ref, i], fixed[i, ref]
        if cur_lo <= -INF // 2 or cur_hi >= INF // 2:
            what = (
                f"host {h}: no sync edge and no anchor relate its clock to the "
                "reference's; its times are used as recorded"
            )
            alarms.append({"kind": "unplaced", "hosts": [h], "excess_ns": None, "detail": what})
            hosts.append(HostClock(h, 0, None, None, None, int(count[i]), anchor, "none"))
            continue
        mid = int(cur_lo + (cur_hi - cur_lo) // 2)
        est[i] = mid
        fixed[i, ref], fixed[ref, i] = mid, -mid
        fixed = _close(fixed)
        basis = "edges" if count[i] else "anchor"
        if count[i] and anchor is not None and not any(h in a["hosts"] for a in alarms):
            basis = "edges+anchor"
        hosts.append(
            HostClock(
                h,
                mid,
                int(lo[i]),
                int(hi[i]),
                int(max(mid - lo[i], hi[i] - mid)),
                int(count[i]),
                anchor,
                basis,
            )
        )
    on_epoch = anchors[names[ref]] is not None  # the reference's anchor: the epoch
    base = anchors[names[ref]] if on_epoch else 0
    shifted = [_shifted(traces[h], base + int(est[i]), on_epoch) for i, h in enumerate(names)]
    merged = merge(shifted)
    merged.meta["format"] = "merged-hosts"
    merged.meta["hosts"] = [x.to_json() for x in hosts]
    merged.meta["clock_alarms"] = alarms
    # every host's processes are placed by the estimate, anchored or not
    merged.meta["warnings"] = [w for w in merged.meta.get("warnings", [])
                               if w.code != "unanchored_process"]  # fmt: skip
    for a in alarms:
        merged.warn(f"clock alarm ({a['kind']}): {a['detail']}", "clock_alarm")
    return Merged(merged, names[ref], hosts, alarms)


def _distinct_pids(traces: dict[str, Trace]) -> None:
    seen: dict[int, str] = {}
    for host, trace in traces.items():
        for pid in trace.processes["pid"].tolist():
            if pid in seen and seen[pid] != host:
                raise FdprofError(f"process id {pid} is on hosts {seen[pid]} and {host}: "
                                  "merging hosts whose pids collide is not supported")  # fmt: skip
            seen[pid] = host


def _shifted(trace: Trace, by: int, anchored: bool) -> Trace:
    """``trace`` with every time moved by ``by`` ns (ends that never came stay -1)."""
    spans = trace.spans.copy()
    spans["start"] = spans["start"].to_numpy(np.int64) + by
    end = spans["end"].to_numpy(np.int64)
    spans["end"] = np.where(end == -1, -1, end + by)
    syncs = trace.syncs.copy()
    syncs["time"] = syncs["time"].to_numpy(np.int64) + by
    processes = trace.processes
    if anchored:
        processes = frame("processes", {c: processes[c].to_numpy() if c != "anchored"
                                        else np.ones(len(processes), bool)
                                        for c in processes.columns})  # fmt: skip
    meta = {k: v for k, v in trace.meta.items() if k != "clock_anchors"}
    if anchored:  # on the epoch now: a host clock's "no anchor" warning no longer holds
        meta["warnings"] = [w for w in meta.get("warnings", []) if "no clock anchor" not in w]
    return Trace(spans=spans, accesses=trace.accesses, syncs=syncs, attrs=trace.attrs,
                 processes=processes, meta=meta)  # fmt: skip


def host_inputs(paths: list[Path]) -> dict[str, Path]:
    """Host name -> its trace: a receiving endpoint (a directory of ``host=<name>`` stores)
    gives each of its hosts; any other path is one host, named after it."""
    out: dict[str, Path] = {}
    for path in paths:
        subs = sorted(p for p in Path(path).glob(f"{HOST_DIR}*") if p.is_dir()) if Path(
            path).is_dir() else []  # fmt: skip
        for p, name in [(s, s.name[len(HOST_DIR) :]) for s in subs] or [
            (Path(path), Path(path).name)
        ]:
            if name in out:
                raise FdprofError(f"host {name!r} is given twice")
            out[name] = p
    return out
