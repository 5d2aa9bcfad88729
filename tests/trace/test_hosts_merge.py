"""The merge of hosts' clocks on crafted traces (fast, everywhere): offsets recovered within the
stated bounds from message edges alone, anchors narrowing or contradicting them, contradicting
edges, a host nothing relates, colliding pids."""

import numpy as np
import pytest

from fdprof.errors import FdprofError
from fdprof.trace.hosts import merge_hosts
from fdprof.trace.model import Trace, frame

#: the true clocks: host h reads true time + SKEW[h]
SKEW = {"a": 0, "b": 5_000_000_123, "c": -2_000_000_777}
LATENCY = (20_000, 90_000)  # one-way delay of a message, ns


def _host(name: str, pid: int, sends: list, receives: list, anchored_ns: int | None) -> Trace:
    """A host whose one process sends and receives keyed messages (true times given)."""
    rows = [("release", obj, seq, t) for obj, seq, t in sends]
    rows += [("acquire", obj, seq, t) for obj, seq, t in receives]
    n = len(rows)
    syncs = frame("syncs", {
        "op": np.array([r[0] for r in rows], object), "obj": np.array([r[1] for r in rows], object),
        "seq": np.array([r[2] for r in rows], np.int64), "keyed": np.ones(n, bool),
        "time": np.array([r[3] + SKEW[name] for r in rows], np.int64),
        "pid": np.full(n, pid), "tid": np.full(n, pid), "lane": np.full(n, f"{pid}/{pid}", object),
        "span_id": np.zeros(n, np.int64),
    })  # fmt: skip
    processes = frame("processes", {
        "pid": np.array([pid]), "role": np.array(["worker"], object),
        "name": np.array([name], object), "anchored": np.zeros(1, bool),
        "dp_rank": np.array([0]), "tp_rank": np.array([-1]),
    })  # fmt: skip
    meta = {} if anchored_ns is None else {"clock_anchors": {pid: anchored_ns}}
    return Trace(syncs=syncs, processes=processes, meta=meta)


def _traces(anchors=True, pairs=(("a", "b"), ("b", "a"), ("a", "c"), ("c", "a")), rounds=40):
    rng = np.random.default_rng(0)
    sends = {h: [] for h in SKEW}
    receives = {h: [] for h in SKEW}
    for i in range(rounds):
        for k, (src, dst) in enumerate(pairs):
            t = 1_000_000_000 * (i + 1) + 1000 * k
            sends[src].append((f"msg:{src}{dst}", i, t))
            receives[dst].append((f"msg:{src}{dst}", i, t + int(rng.integers(*LATENCY))))
    pids = {"a": 100, "b": 200, "c": 300}
    # an anchor (epoch - monotonic): a perfect one cancels the skew exactly
    return {h: _host(h, pids[h], sends[h], receives[h], 10**18 - SKEW[h] if anchors else None)
            for h in SKEW}  # fmt: skip


def test_offsets_from_edges_alone_within_their_bounds():
    m = merge_hosts(_traces(anchors=False))
    assert m.alarms == []
    for h in m.hosts[1:]:
        truth = -(SKEW[h.host] - SKEW["a"])
        assert h.lo_ns <= truth <= h.hi_ns and abs(h.offset_ns - truth) <= h.bound_ns
        assert h.bound_ns <= LATENCY[1] and h.basis == "edges"
    times = m.trace.syncs.sort_values(["obj", "seq", "op"])  # every message received after sent
    for (_, _), g in times.groupby(["obj", "seq"]):
        assert (
            g.loc[g["op"] == "acquire", "time"].iat[0] >= g.loc[g["op"] == "release", "time"].iat[0]
        )


def test_anchors_narrow_or_raise_an_alarm():
    m = merge_hosts(_traces())
    assert m.alarms == [] and {h.basis for h in m.hosts[1:]} == {"edges+anchor"}
    assert m.trace.processes["anchored"].all()
    traces = _traces()
    traces["c"].meta["clock_anchors"] = {300: 10**18 - SKEW["c"] + 30_000_000}  # 30 ms off
    m = merge_hosts(traces)
    assert [(a["kind"], a["hosts"]) for a in m.alarms] == [("anchor_disagrees", ["c"])]
    c = m.hosts[2]
    assert abs(c.offset_ns + SKEW["c"]) <= c.bound_ns and c.basis == "edges"


def test_contradicting_edges_and_an_unrelated_host():
    traces = _traces(anchors=False, pairs=(("a", "b"), ("b", "a")))
    late = traces["b"].syncs["time"] > traces["b"].syncs["time"].median()
    traces["b"].syncs.loc[late, "time"] += 10**9  # b's clock stepped by 1 s half-way
    m = merge_hosts(traces)
    assert [a["kind"] for a in m.alarms][0] == "inconsistent_edges"
    # edges that contradict place nothing, and no anchor places b; no edge ever reached c
    unplaced = [h for a in m.alarms if a["kind"] == "unplaced" for h in a["hosts"]]
    assert unplaced == ["b", "c"]
    traces["c"] = _traces()["c"]  # an anchor of its own does not relate c to a without a's
    assert "c" in [h for a in merge_hosts(traces).alarms for h in a["hosts"]]


def test_colliding_pids_are_refused():
    traces = _traces()
    traces["b"] = _host("b", 100, [], [], None)
    with pytest.raises(FdprofError, match="process id 100"):
        merge_hosts(traces)
