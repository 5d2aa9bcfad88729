"""Brute-force reference for the hazard detector: transitive reachability on the event graph.

Written straight from the ordering semantics, with loops and sets, sharing no code with the
detector, so that agreement on random traces means something.
"""

from __future__ import annotations

import fnmatch
import os

from fdprof.trace.model import Trace

#: random traces per property-test file (the CI default keeps each file under a minute)
EXAMPLES = int(os.environ.get("FDPROF_PROPERTY_EXAMPLES", "400"))


def oracle(trace: Trace) -> dict[str, set]:
    """``races``: {(span_a, span_b, overlapped)}, ``alarms``: {(span_a, span_b)}, ``gaps``:
    {(kind, lane)} — span pairs as (smaller id, larger id) — and ``cyclic``: whether the sync
    graph has a cycle (the detector then drops an edge, which this does not model)."""
    ev, pairs, gaps, broken = sync_graph(trace)
    succ: dict[int, set[int]] = {e["row"]: set() for e in ev}
    by_lane = lanes_of(ev)
    for events in by_lane.values():
        for a, b in zip(events, events[1:], strict=False):
            succ[a["row"]].add(b["row"])
    for src, acq in pairs:
        succ[src].add(acq)
    reach = {r: _reachable(r, succ) for r in succ}
    cyclic = any(r in _reachable_strict(r, succ) for r in succ)

    spans = {int(s.span_id): s for s in trace.spans.itertuples()}
    for s in spans.values():
        if s.end == -1:
            gaps.add(("truncated", str(s.lane)))
    entry = entry_times(trace, by_lane)
    gaps |= {("sync_in_access_span", str(spans[sid].lane))
             for sid, t in entry.items() if t != spans[sid].start}  # fmt: skip

    def before(s, t) -> bool:
        at = entry.get(int(t.span_id), t.start)  # t's accesses happen from then on
        if s.lane == t.lane:  # program order
            return s.end <= at
        rel = [e["row"] for e in by_lane.get(str(s.lane), [])
               if e["op"] == "release" and e["time"] >= s.end]  # fmt: skip
        acq = {e["row"] for e in by_lane.get(str(t.lane), [])
               if e["op"] == "acquire" and e["time"] <= at}  # fmt: skip
        return any(reach[r] & acq for r in rel)

    finished = [a for a in trace.accesses.itertuples() if spans[int(a.span_id)].end != -1]
    acc = [a for a in finished if a.mode in ("read", "write")]
    lifetime = _lifetime(acc, [a for a in finished if a.mode in ("alloc", "free")], spans, before)
    races, alarms = set(), set()
    for i, x in enumerate(acc):
        for y in acc[i + 1 :]:
            s, t = spans[int(x.span_id)], spans[int(y.span_id)]
            if s.lane == t.lane or x.pool != y.pool or x.block != y.block:
                continue
            if x.mode == "read" and y.mode == "read":
                continue
            if not _layers_meet(x, y):
                continue
            pair = (min(s.span_id, t.span_id), max(s.span_id, t.span_id))
            overlapped = s.start < t.end and t.start < s.end
            if before(s, t) or before(t, s):
                # the accesses span from their entry time: an alarm is an overlap of those
                if entry[int(s.span_id)] < t.end and entry[int(t.span_id)] < s.end:
                    alarms.add(pair)
            else:
                races.add((*pair, overlapped))
    return {"races": races, "alarms": alarms, "gaps": gaps, "cyclic": cyclic, "broken": broken,
            "lifetime": lifetime}  # fmt: skip


def entry_times(trace: Trace, by_lane: dict[str, list[dict]]) -> dict[int, int]:
    """Finished access span (one with reads or writes) -> when its accesses happen: the last
    acquire of its lane strictly inside it, else its start (the model's rule for a span that
    opens before the syncs that order it)."""
    spans = {int(s.span_id): s for s in trace.spans.itertuples()}
    out = {}
    for a in trace.accesses.itertuples():
        s = spans.get(int(a.span_id))
        if s is None or s.end == -1 or a.mode not in ("read", "write"):
            continue
        inside = [e["time"] for e in by_lane.get(str(s.lane), [])
                  if e["op"] == "acquire" and s.start < e["time"] < s.end]  # fmt: skip
        out[int(s.span_id)] = max(inside, default=int(s.start))
    return out


def _lifetime(acc, events, spans, before) -> set:
    """{(kind, access span, allocator span, pool)}: an access belongs to the lifetime of the
    last allocator event of its block that happens before it; that event a free: a use after
    free; an allocation whose next event is a free the access does not happen before: freed
    while in use."""
    out = set()
    for x in acc:
        sx = spans[int(x.span_id)]
        mine = sorted((e for e in events if (e.pool, e.block) == (x.pool, x.block)),
                      key=lambda e: (spans[int(e.span_id)].start, int(e.span_id)))  # fmt: skip
        prior = [i for i, e in enumerate(mine) if before(spans[int(e.span_id)], sx)]
        if not prior:
            continue
        last = mine[max(prior)]
        if last.mode == "free":
            out.add(("use_after_free", int(x.span_id), int(last.span_id), x.pool))
        elif max(prior) + 1 < len(mine):
            nxt = mine[max(prior) + 1]
            if nxt.mode == "free" and not before(sx, spans[int(nxt.span_id)]):
                out.add(("freed_while_in_use", int(x.span_id), int(nxt.span_id), x.pool))
    return out


def sync_graph(trace: Trace) -> tuple[list[dict], list[tuple[int, int]], set, set]:
    """The trusted sync events (a broken lock's are gone; ``mutex:*`` per process), the
    pairing edges (release row, acquire row), the pairing gaps and the broken holds."""
    syncs = trace.syncs.reset_index(drop=True)
    broken = broken_holds(syncs)
    untrusted = {obj for obj, _, _ in broken}
    ev = [
        {"row": i, "op": r.op, "seq": int(r.seq), "keyed": bool(r.keyed), "time": int(r.time),
         "lane": str(r.lane),
         # in-process mutexes: one object per process
         "obj": f"{r.obj}/{r.pid}" if str(r.obj).startswith("mutex:") else str(r.obj)}
        for i, r in enumerate(syncs.itertuples())
        if r.obj not in untrusted  # a broken lock's edges are no order
    ]  # fmt: skip
    gaps: set = set()
    pairs: list[tuple[int, int]] = []
    releases = [e for e in ev if e["op"] == "release"]
    seen_unkeyed: set[str] = set()
    for a in sorted((e for e in ev if e["op"] == "acquire"), key=lambda e: (e["time"], e["row"])):
        if a["keyed"]:
            same = [r for r in releases
                    if r["keyed"] and r["obj"] == a["obj"] and r["seq"] == a["seq"]]  # fmt: skip
        else:
            same = [r for r in releases if not r["keyed"] and r["obj"] == a["obj"]]
        before = [r for r in same if r["time"] <= a["time"]]
        if before:
            src = max(before, key=lambda r: (r["time"], r["row"]))
        elif same and a["keyed"]:
            src = min(same, key=lambda r: (r["time"], r["row"]))
        else:
            src = None
            if a["keyed"] or a["obj"] in seen_unkeyed:
                gaps.add(("no_release", a["lane"]))
        if not a["keyed"]:
            seen_unkeyed.add(a["obj"])
        if src is not None:
            pairs.append((src["row"], a["row"]))
    return ev, pairs, gaps, broken


def lanes_of(ev: list[dict]) -> dict[str, list[dict]]:
    """Each lane's events in program order (time, then row)."""
    by_lane: dict[str, list[dict]] = {}
    for e in ev:
        by_lane.setdefault(e["lane"], []).append(e)
    for events in by_lane.values():
        events.sort(key=lambda e: (e["time"], e["row"]))
    return by_lane


def broken_holds(syncs) -> set:
    """{(obj, hold, hold)} for every two holds of one ``lock:*`` object on different lanes
    that overlap in time; a hold is (lane, start, end): an acquire and the lane's next event
    of that object, if a release."""
    events = sorted(((str(r.obj), str(r.lane), int(r.time), i, r.op)
                     for i, r in enumerate(syncs.itertuples())
                     if fnmatch.fnmatchcase(str(r.obj), "lock:*")))  # fmt: skip
    holds = [(a[0], (a[1], a[2], b[2])) for a, b in zip(events, events[1:], strict=False)
             if a[:2] == b[:2] and a[4] == "acquire" and b[4] == "release"]  # fmt: skip
    out = set()
    for obj, h in holds:
        for obj2, g in holds:
            if obj == obj2 and h[0] != g[0] and h[1] < g[2] and g[1] < h[2] and h < g:
                out.add((obj, h, g))
    return out


def _reachable(start: int, succ) -> set[int]:
    return {start} | _reachable_strict(start, succ)


def _reachable_strict(start: int, succ) -> set[int]:
    seen: set[int] = set()
    todo = list(succ[start])
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(succ[n])
    return seen


def _layers_meet(x, y) -> bool:
    def rng(a):
        return (0, 1 << 62) if a.layer_lo < 0 and a.layer_hi < 0 else (a.layer_lo, a.layer_hi)

    (a0, a1), (b0, b1) = rng(x), rng(y)
    return a0 < b1 and b0 < a1


def agrees(trace: Trace) -> bool | None:
    """Whether :func:`find_hazards` found exactly what the oracle finds (None: cyclic trace,
    outside the oracle's model)."""
    from fdprof.analysis.hazards import find_hazards

    expected = oracle(trace)
    if expected.pop("cyclic"):
        return None
    report = find_hazards(trace)
    got = {
        "races": {
            (min(a, b), max(a, b), bool(o))
            for a, b, o in report.races[["span_a", "span_b", "overlapped"]].to_numpy().tolist()
        },
        "alarms": {(min(a, b), max(a, b)) for a, b in report.alarms[["span_a", "span_b"]]
                   .to_numpy().tolist()},
        "gaps": {(k, lane) for k, lane in report.gaps[["kind", "lane"]].to_numpy().tolist()},
        "broken": {(o, *sorted([(la, sa, ea), (lb, sb, eb)]))
                   for o, la, sa, ea, lb, sb, eb in report.broken_locks.to_numpy().tolist()},
        "lifetime": {(k, int(a), int(b), p) for k, a, b, p in
                     report.lifetime[["kind", "span_a", "span_b", "pool"]].to_numpy().tolist()},
    }  # fmt: skip
    assert got == expected
    return True
