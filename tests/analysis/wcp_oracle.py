"""Brute-force weak causal precedence (Kini, Mathur, Viswanathan, PLDI 2017), straight from
its definition: events and edges as sets, rules (a) and (b) closed by fixpoint, reachability
by search. No vector clocks, no time windows, no code shared with
:mod:`fdprof.analysis.predict` — agreement on random traces means something.

The model (the detector's, docs/analysis.md "Predicted races"): each lane is in program
order; a span S with accesses is two events, ``B(S)`` (after every sync of its lane at or
before its start, and after the last acquire of its lane inside it; spans starting at one
instant reach each other) and ``E(S)`` (before every sync at or after its end).
Happens-before is program order plus every pairing edge; hard edges are the pairing edges of
non-lock objects. Critical sections (holds) are an acquire of
a ``lock:*`` object and the lane's next event of that object when it is a release, ordered
per lock by (start, end, acquire row); a hold's body is every span S with
``a1 ≤hard B(S)`` and ``E(S) ≤hard r1``.
"""

from __future__ import annotations

import fnmatch
from itertools import combinations

from fdprof.trace.model import Trace

from .oracle import _layers_meet, _reachable_strict, entry_times, lanes_of, sync_graph


def wcp_oracle(trace: Trace) -> dict:
    """``predicted``: {(span, span)} (smaller id first) that happens-before orders and WCP
    does not; ``hb_races``: {(span, span)} that happens-before does not order; ``cyclic``."""
    ev, pairs, _, _ = sync_graph(trace)
    spans = {int(s.span_id): s for s in trace.spans.itertuples()}
    accesses: dict[int, list] = {}
    for a in trace.accesses.itertuples():
        if spans[int(a.span_id)].end != -1:
            accesses.setdefault(int(a.span_id), []).append(a)

    # program order: syncs, B and E points per lane (B after the acquires inside the span)
    entry = entry_times(trace, lanes_of(ev))
    position = {}
    for e in ev:
        position["s", e["row"]] = (e["lane"], (e["time"], 1, e["row"]))
    for sid in accesses:
        s = spans[sid]
        position["B", sid] = (str(s.lane), (int(entry.get(sid, s.start)), 2, sid))
        position["E", sid] = (str(s.lane), (int(s.end), 0, sid))
    po: dict = {node: set() for node in position}
    lanes: dict[str, list] = {}
    for node, (lane, key) in position.items():
        lanes.setdefault(lane, []).append((key, node))
    for events in lanes.values():
        events.sort()
        for (_, a), (_, b) in zip(events, events[1:], strict=False):
            po[a].add(b)
        starts: dict[int, list] = {}
        for key, node in events:
            if node[0] == "B":
                starts.setdefault(key[0], []).append(node)
        for same in starts.values():
            for a, b in combinations(same, 2):
                po[a].add(b)
                po[b].add(a)
    obj = {e["row"]: e["obj"] for e in ev}
    hard = {(("s", r), ("s", a)) for r, a in pairs if not _is_lock(obj[a])}
    lock = {(("s", r), ("s", a)) for r, a in pairs if _is_lock(obj[a])}
    hb = _closure(po, hard | lock)
    if any(n in _reachable_strict(n, _succ(po, hard | lock)) for n in po if n[0] == "s"):
        return {"cyclic": True}
    hb_hard = _closure(po, hard)

    holds = _holds(ev)
    body = {h: {sid for sid in accesses
                if ("B", sid) in hb_hard["s", h[2]] and ("s", h[3]) in hb_hard["E", sid]}
            for h in holds}  # fmt: skip

    def conflict(s: int, t: int) -> bool:
        return any(_conflict(x, y) for x in accesses[s] for y in accesses[t])

    base = set(hard)
    ordered = [(h1, h2) for h1 in holds for h2 in holds if h1[0] == h2[0] and h1 < h2]
    for h1, h2 in ordered:  # rule (a)
        for s in body[h1]:
            for t in body[h2]:
                if conflict(s, t):
                    base.add((("s", h1[3]), ("B", t)))
    while True:  # rule (b), to a fixpoint
        grown = {(("s", h1[3]), ("s", h2[3])) for h1, h2 in ordered
                 if _wcp(("s", h1[2]), ("s", h2[3]), base, hb)}  # fmt: skip
        if grown <= base:
            break
        base |= grown

    predicted, hb_races = set(), set()
    for s, t in combinations(sorted(accesses), 2):
        if spans[s].lane == spans[t].lane or not conflict(s, t):
            continue
        if ("B", t) in hb["E", s] or ("B", s) in hb["E", t]:
            if not (_wcp(("E", s), ("B", t), base, hb) or _wcp(("E", t), ("B", s), base, hb)):
                predicted.add((s, t))
        else:
            hb_races.add((s, t))
    return {"cyclic": False, "predicted": predicted, "hb_races": hb_races}


def _is_lock(obj: str) -> bool:
    return fnmatch.fnmatchcase(obj, "lock:*")


def _conflict(x, y) -> bool:
    same = x.pool == y.pool and x.block == y.block
    return same and "write" in (x.mode, y.mode) and _layers_meet(x, y)


def _holds(ev: list[dict]) -> list[tuple]:
    """(lock, (start, end, acquire row), acquire row, release row) per hold; tuples sort in
    each lock's trace order."""
    out = []
    for events in lanes_of(ev).values():
        by_obj: dict[str, list] = {}
        for e in events:
            if _is_lock(e["obj"]):
                by_obj.setdefault(e["obj"], []).append(e)
        for o, seq in by_obj.items():
            for a, r in zip(seq, seq[1:], strict=False):
                if a["op"] == "acquire" and r["op"] == "release":
                    out.append((o, (a["time"], r["time"], a["row"]), a["row"], r["row"]))
    return sorted(out)


def _wcp(x, y, base, hb) -> bool:
    """x ≺WCP y: x ≤HB u, (u, v) a base edge (hard, rule (a) or rule (b)), v ≤HB y."""
    return any(u in hb[x] and y in hb[v] for u, v in base)


def _closure(po: dict, edges: set) -> dict:
    """Reflexive-transitive reachability over program order and ``edges``."""
    succ = _succ(po, edges)
    return {n: {n} | _reachable_strict(n, succ) for n in po}


def _succ(po: dict, edges: set) -> dict:
    succ = {n: set(po[n]) for n in po}
    for u, v in edges:
        succ[u].add(v)
    return succ


def wcp_agrees(trace: Trace) -> bool | None:
    """Whether :func:`fdprof.analysis.predict.predict_races` finds exactly the oracle's
    predicted races and happens-before races (None: a cyclic trace, outside the model)."""
    from fdprof.analysis.predict import predict_races

    expected = wcp_oracle(trace)
    if expected["cyclic"]:
        return None
    report = predict_races(trace)

    def span_pairs(df) -> set:
        return {(min(a, b), max(a, b)) for a, b in df[["span_a", "span_b"]].to_numpy().tolist()}

    got = {"predicted": span_pairs(report.predicted), "hb_races": span_pairs(report.races)}
    assert got == {k: expected[k] for k in got}
    return True
