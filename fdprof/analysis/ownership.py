"""Block ownership: which requests hold a KV block, which content of it an access means, and
whether the pool's hand-outs, frees and reference counts agree with both.

Why: a block handed to a second request while a running request still holds it (a reference
not taken on a prefix hit, a count decremented twice) corrupts that request's tokens, yet
every access involved may sit on one lane, ordered: happens-before cannot see it. The
allocator's events can, checked against what the engine really uses (the requests' block
tables), not against the pool's own counts, which are what such a bug corrupts.

Events, per (pool, block), in the allocator's order (time, then span id, then the order
below), from the trace's ``kv.<pool>_<event>`` lists (docs/trace.md "Ownership events"):

- ``alloc``: the pool hands the block out fresh: a new *generation* of its content begins;
- ``hold`` / ``release``: a request takes / drops a reference (its table gains / loses it);
- ``unref``: the pool's count reached 0, content kept (a prefix hit may revive it until the
  block is handed out again); ``free``: back to the allocator, content discarded;
  ``underflow``: the pool's count fell below 0.

Accesses name their request where the trace says (a ``scheduled_request`` child of the access
span listing that request's blocks; the request of a transfer's job), and a transfer its
submission. The generation an access *means* is that of its request's latest hold of the
block that happens before it (for a transfer without a request: the latest hand-out before
its submission); the generation a write *makes* is that of the latest hand-out before it.

Findings (kinds):

- ``handed_out_while_held``: a hand-out while another request holds the block;
- ``freed_while_held``: the pool frees (unref or free) a block a request still holds;
- ``written_while_held``: a write of a newer generation while a request holding an older
  one is still live (not released before the write);
- ``read_without_hold``: a request's access to a block it does not hold (never took, or
  released before); for a transfer, only a block its request never held: an engine may copy
  a released block's kept content (vLLM stores finished requests' blocks), judged by the
  next two kinds instead;
- ``read_after_reuse`` / ``transfer_after_reuse``: an access (a request's, a transfer's) of
  one generation after a write of a newer one happened before it: it read, or overwrote,
  content that was no longer its own. (Unordered with that write is a race, reported by
  happens-before: a freed block's content stays valid until the next owner writes it, which
  is how vLLM fences reuse under deferred stores.)
- ``freed_under_transfer``: a free (content discarded) after a transfer of the block was
  submitted but not after the transfer completed;
- ``refcount_negative``: a release by a request that holds nothing, or a pool count below 0;
- ``refcount_leak``: at the end, a pool that counts references (one that records ``unref``)
  still counts one for a block no request holds.

Cost: one Python step per allocator event (events are few beside accesses), vectorized
binary searches over each block's events with the vector clocks of
:mod:`fdprof.analysis.clocks` (the public happens-before query,
:meth:`~fdprof.analysis.clocks.LaneClocks.happens_before`, handed in), and a few
happens-before checks per finding. Input: the core's typed tables
(:mod:`fdprof.analysis.tables`), the same the race search and the lifetime check read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof.analysis.columns import empty_frame
from fdprof.analysis.tables import MODES, AccessTable

HANDED_OUT_WHILE_HELD = "handed_out_while_held"
FREED_WHILE_HELD = "freed_while_held"
WRITTEN_WHILE_HELD = "written_while_held"
READ_WITHOUT_HOLD = "read_without_hold"
READ_AFTER_REUSE = "read_after_reuse"
TRANSFER_AFTER_REUSE = "transfer_after_reuse"
FREED_UNDER_TRANSFER = "freed_under_transfer"
REFCOUNT_NEGATIVE = "refcount_negative"
REFCOUNT_LEAK = "refcount_leak"
KINDS = (HANDED_OUT_WHILE_HELD, FREED_WHILE_HELD, WRITTEN_WHILE_HELD, READ_WITHOUT_HOLD,
         READ_AFTER_REUSE, TRANSFER_AFTER_REUSE, FREED_UNDER_TRANSFER, REFCOUNT_NEGATIVE,
         REFCOUNT_LEAK)  # fmt: skip

#: (lane_a, end_a, lane_b, start_b) -> elementwise: does a span on lane_a ending at end_a happen
#: before one on lane_b starting at start_b
HappensBefore = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]

#: allocator events: the span's row, lane, times, (pool, block) key, mode, request (an int code
#: for the request's id, -1 none)
EVENT_COLUMNS = ["srow", "lane", "start", "end", "span_id", "key", "pool", "mode", "request"]
#: accesses: as events (``pool`` a code, as the events'), plus ``write``, ``transfer`` and a
#: transfer's submission (the lane and start of its ``issue_swap_task``; -1: unknown)
ACCESS_COLUMNS = ["srow", "lane", "start", "end", "key", "pool", "write", "request",
                  "transfer", "sub_lane", "sub_at"]  # fmt: skip
#: raw findings: kind, block key, the two sides' span rows (-1: none) and request codes
RAW_COLUMNS = ["kind", "key", "srow_a", "srow_b", "request_a", "request_b"]
COLUMNS = ["kind", "pool", "blocks", "n_blocks", "request_a", "request_b",
           "span_a", "name_a", "role_a", "lane_a", "step_a",
           "span_b", "name_b", "role_b", "lane_b", "step_b"]  # fmt: skip
KIND_COLUMNS = ["kind", "name_a", "role_a", "name_b", "role_b", "findings", "blocks", "requests",
                "first_step"]  # fmt: skip
#: an event's mode as a small int, which is also its order among events of one instant and
#: span (a call drops references, the pool reacts, then it hands out and holds)
_RELEASE, _UNREF, _FREE, _UNDERFLOW, _ALLOC, _HOLD, _OTHER = range(7)
_MODE_RANK = {S.MODE_RELEASE: _RELEASE, S.MODE_UNREF: _UNREF, S.MODE_FREE: _FREE,
              S.MODE_UNDERFLOW: _UNDERFLOW, S.MODE_ALLOC: _ALLOC, S.MODE_HOLD: _HOLD}  # fmt: skip


def ownership_violations(
    events: pd.DataFrame, accesses: pd.DataFrame, happens_before: HappensBefore
) -> pd.DataFrame:
    """Every finding (module doc) as raw rows (:data:`RAW_COLUMNS`). ``events``:
    :data:`EVENT_COLUMNS`, ``mode`` the event's name (``alloc``, ``hold`` ...), requests as
    int codes (-1: none); ``accesses``: :data:`ACCESS_COLUMNS`."""
    if events.empty:
        return empty_frame(RAW_COLUMNS)
    codes, names = pd.factorize(events["mode"])
    ev = {c: events[c].to_numpy() for c in EVENT_COLUMNS if c != "mode"}
    ev["mode"] = _ranks(names)[codes]
    x = {c: accesses[c].to_numpy() for c in ACCESS_COLUMNS}
    return pd.DataFrame(_violations(ev, x, happens_before), columns=RAW_COLUMNS)


def _ranks(names: Any) -> np.ndarray:
    """Each event name's int code (:data:`_MODE_RANK`)."""
    return np.array([_MODE_RANK.get(str(m), _OTHER) for m in names], dtype=np.int64)


def _violations(ev: dict[str, np.ndarray], x: dict[str, np.ndarray], hb: HappensBefore) -> list:
    """The raw findings of events and accesses as column dicts (``mode`` as int codes)."""
    span_id, start = ev["span_id"].astype(np.int64), ev["start"].astype(np.int64)
    order = np.lexsort((ev["mode"], span_id, start, ev["key"].astype(np.int64)))
    ev = {c: v[order] for c, v in ev.items()}
    replay = _Replay(ev)
    raw = replay.run()
    if len(x["key"]):
        judge = _Accesses(ev, replay, x, hb)
        raw += judge.written_while_held()
        raw += judge.by_request()
        raw += judge.freed_under_transfer()
    return raw


class _Replay:
    """The allocator's events of each block in order (``ev``: sorted by block, then allocator
    order): generations, each request's hold intervals, the pool's state; the findings the
    events alone show, and tables for judging accesses. Vectorized: a Python step only per
    finding."""

    def __init__(self, ev: dict[str, np.ndarray]) -> None:
        self.ev = ev
        n = len(ev["key"])
        key, mode = ev["key"], ev["mode"]
        first = np.ones(n, dtype=bool)
        first[1:] = key[1:] != key[:-1]
        bounds = np.flatnonzero(first)
        group = np.cumsum(first) - 1
        #: per event: where its block's events begin and end (positions in ``ev``)
        self.lo = bounds[group]
        self.hi = np.r_[bounds[1:], n][group]
        is_alloc = mode == _ALLOC
        allocs = np.cumsum(is_alloc)
        #: per event: the generation current after it (hand-outs of its block so far)
        self.gen = allocs - (allocs[self.lo] - is_alloc[self.lo])
        #: the hand-outs' positions (sorted by block, then allocator order)
        self.alloc_idx = np.flatnonzero(is_alloc)
        #: a hand-out made while requests held the block: (alloc position, [[request, hold
        #: position, release position or -1]])
        self.suspects: list[tuple[int, list[list[Any]]]] = []
        self._intervals()

    def _intervals(self) -> None:
        """Each request's holds of each block as intervals of positions: from a hold (the
        first of a run) to the release that ends it (-1: held to the end)."""
        ev = self.ev
        mode, key = ev["mode"], ev["key"]
        hr = np.flatnonzero(np.isin(mode, (_HOLD, _RELEASE)))
        codes = ev["request"][hr]
        order = np.lexsort((hr, codes, key[hr]))
        j, c = hr[order], codes[order]
        k = key[j]
        same = np.zeros(len(j), dtype=bool)
        same[1:] = (k[1:] == k[:-1]) & (c[1:] == c[:-1])
        hold = mode[j] == _HOLD
        prev_hold = np.zeros(len(j), dtype=bool)
        prev_hold[1:] = hold[:-1]
        prev_hold &= same
        starts = np.flatnonzero(hold & ~prev_hold)
        ends = np.flatnonzero(~hold & prev_hold)
        #: releases with no hold before them (positions)
        self.unheld_releases = j[~hold & ~prev_hold]
        nxt = np.searchsorted(ends, starts, "right")
        cand = ends[np.minimum(nxt, max(len(ends) - 1, 0))] if len(ends) else starts
        closed = (nxt < len(ends)) & (k[cand] == k[starts]) & (c[cand] == c[starts])
        self.iv_hold = j[starts]
        self.iv_release = np.where(closed, j[cand], -1)
        self.iv_request = ev["request"][self.iv_hold]
        # doubled positions: an interval held to the end stops just before its block's end
        self.iv_start2 = 2 * self.iv_hold
        self.iv_end2 = np.where(closed, 2 * self.iv_release, 2 * self.hi[self.iv_hold] - 1)
        self._starts2 = np.sort(self.iv_start2)
        self._ends2 = np.sort(self.iv_end2)
        by_start = np.argsort(self.iv_start2, kind="stable")
        self._by_start = by_start

    def held_at(self, q2: np.ndarray, lo: np.ndarray) -> np.ndarray:
        """How many holds are open at doubled position ``q2`` of a block starting at ``lo``."""
        s, e = self._starts2, self._ends2
        lo2 = 2 * lo
        return (np.searchsorted(s, q2) - np.searchsorted(s, lo2)) - (
            np.searchsorted(e, q2) - np.searchsorted(e, lo2)
        )

    def holders(self, p: int) -> list[tuple[int, int, int]]:
        """(request, hold, release or -1) of the holds open at position ``p``."""
        q2, lo2 = 2 * p, 2 * int(self.lo[p])
        first = np.searchsorted(self.iv_start2[self._by_start], lo2)
        last = np.searchsorted(self.iv_start2[self._by_start], q2)
        mine = self._by_start[first:last]
        mine = mine[self.iv_end2[mine] > q2]
        return [(int(self.iv_request[i]), int(self.iv_hold[i]), int(self.iv_release[i]))
                for i in mine.tolist()]  # fmt: skip

    def run(self) -> list[tuple]:
        ev, raw = self.ev, []
        mode, req, key, srow = ev["mode"], ev["request"], ev["key"], ev["srow"]
        n = len(key)
        pos = np.arange(n)
        open_now = self.held_at(2 * pos, self.lo)
        for p in np.flatnonzero((open_now > 0) & (mode == _ALLOC)).tolist():
            held = [[h, j, r] for h, j, r in self.holders(p) if h != req[p]]
            if held:
                self.suspects.append((p, held))
                raw += [(HANDED_OUT_WHILE_HELD, int(key[p]), int(srow[j]), int(srow[p]), h,
                         req[p]) for h, j, _ in held]  # fmt: skip
        freed = (open_now > 0) & np.isin(mode, (_UNREF, _FREE))
        for p in np.flatnonzero(freed).tolist():
            raw += [(FREED_WHILE_HELD, int(key[p]), int(srow[j]), int(srow[p]), h, req[p])
                    for h, j, _ in self.holders(p)]  # fmt: skip
        negative = np.sort(np.r_[self.unheld_releases, pos[mode == _UNDERFLOW]])
        raw += [(REFCOUNT_NEGATIVE, int(key[p]), int(srow[p]), -1, req[p], -1)
                for p in negative.tolist()]  # fmt: skip
        # a count left: in a pool that counts references, the block's last pool-side event
        # a hand-out or a hold, and no hold open at the end
        counted = np.unique(ev["pool"][np.isin(mode, (_UNREF, _UNDERFLOW))])
        state = np.where(mode != _RELEASE, pos, -1)
        bounds = np.unique(self.lo)
        last = np.maximum.reduceat(state, bounds)
        ok = last >= 0
        last = last[ok]
        referenced = np.isin(mode[last], (_ALLOC, _HOLD))
        nobody = self.held_at(2 * self.hi[last] - 1, self.lo[last]) == 0
        leak = last[referenced & nobody & np.isin(ev["pool"][last], counted)]
        raw += [(REFCOUNT_LEAK, int(key[p]), int(srow[p]), -1, req[p], -1)
                for p in leak.tolist()]  # fmt: skip
        return raw


class _Accesses:
    """Accesses judged against the replayed events (module doc)."""

    def __init__(self, ev, replay: _Replay, x: dict[str, np.ndarray], hb: HappensBefore) -> None:
        self.ev, self.replay, self.hb = ev, replay, hb
        self.x = x
        self.alloc_idx = replay.alloc_idx  # sorted by key, then allocator order
        # every write's generation: the latest hand-out of its block before it
        w = np.flatnonzero(self.x["write"].astype(bool))
        self.w = w
        x = self.x
        last = self._last_before(self.alloc_idx, x["key"][w], x["lane"][w], x["start"][w])
        self.w_gen = self._alloc_gen(last)

    def _alloc_gen(self, pos: np.ndarray) -> np.ndarray:
        """The generation of the hand-out at each position of ``alloc_idx`` (0 for -1: none)."""
        if not len(self.alloc_idx):
            return np.zeros(len(pos), dtype=np.int64)
        return np.where(pos >= 0, self.replay.gen[self.alloc_idx[np.maximum(pos, 0)]], 0)

    def _last_before(self, idx: np.ndarray, key, lane, start) -> np.ndarray:
        """Per query, the position in ``idx`` (event indices, sorted by key then allocator
        order) of the last event of its key that happens before (lane, start); -1: none."""
        return self._last_in_group_before(idx, self.ev["key"][idx], key, lane, start)

    def _last_in_group_before(self, idx, groups, q_groups, lane, start) -> np.ndarray:
        """Per query, the position in ``idx`` of the last event of its group (``groups``: the
        events' group, sorted) that happens before (lane, start), by a binary search per
        query run together over all of them (happens-before is monotone along a group in
        allocator order); -1: none."""
        ev = self.ev
        first = np.searchsorted(groups, q_groups, "left")
        lo, hi = first.copy(), np.searchsorted(groups, q_groups, "right")
        while True:
            open_ = np.flatnonzero(lo < hi)
            if len(open_) == 0:
                break
            mid = (lo[open_] + hi[open_]) // 2
            e = idx[mid]
            before = self.hb(ev["lane"][e], ev["end"][e], lane[open_], start[open_])
            lo[open_] = np.where(before, mid + 1, lo[open_])
            hi[open_] = np.where(before, hi[open_], mid)
        return np.where(lo > first, lo - 1, -1)

    def _newer_write_before(self, rows: np.ndarray, gen: np.ndarray) -> np.ndarray:
        """Per access row, a write of its block of a newer generation than ``gen`` that
        happens before it (a row of ``self.x``; -1: none). Per writing lane, the write of a
        newer generation that ends first is the one most likely ordered before it."""
        out = np.full(len(rows), -1, dtype=np.int64)
        x, w = self.x, self.w
        if not len(w) or not len(rows):
            return out
        q_key = x["key"][rows].astype(np.int64)
        width = int(max(self.w_gen.max(initial=0), gen.max(initial=0))) + 2
        for lane in np.unique(x["lane"][w]).tolist():
            sel = x["lane"][w] == lane
            on, wgen = w[sel], self.w_gen[sel]
            keys, ends = x["key"][on].astype(np.int64), x["end"][on].astype(np.int64)
            order = np.lexsort((ends, wgen, keys))
            on, wgen, keys, ends = on[order], wgen[order], keys[order], ends[order]
            # the earliest end from each position to the end of its key's run (gens ascend)
            suffix = pd.Series(ends[::-1]).groupby(keys[::-1]).cummin().to_numpy()[::-1]
            j = np.searchsorted(keys * width + wgen, q_key * width + gen, "right")
            jj = np.minimum(j, len(on) - 1)
            q = np.flatnonzero((j < len(on)) & (keys[jj] == q_key) & (out < 0))
            if not len(q):
                continue
            before = self.hb(np.full(len(q), lane), suffix[j[q]], x["lane"][rows[q]],
                             x["start"][rows[q]])  # fmt: skip
            for qi in q[before].tolist():
                p = j[qi]
                while ends[p] != suffix[j[qi]]:  # the write that ends first (same key run)
                    p += 1
                out[qi] = on[p]
        return out

    def written_while_held(self) -> list[tuple]:
        """For each hand-out made while requests held the block: the first write of the new
        generation while such a holder was live (its release, if any, not before it)."""
        raw: list[tuple] = []
        ev, x, w = self.ev, self.x, self.w
        for alloc, held in self.replay.suspects:
            gen = self.replay.gen[alloc]
            mine = w[(x["key"][w] == ev["key"][alloc]) & (self.w_gen == gen)]
            if not len(mine):
                continue
            first = mine[np.argmin(x["start"][mine])]
            for request, hold, release in held:
                if release >= 0 and self._event_before(release, first):
                    continue
                raw.append((WRITTEN_WHILE_HELD, int(ev["key"][alloc]), int(ev["srow"][hold]),
                            int(x["srow"][first]), request, int(x["request"][first])))  # fmt: skip
        return raw

    def _event_before(self, event: int, row: int) -> bool:
        """Whether allocator event ``event`` happens before access row ``row``."""
        ev, x = self.ev, self.x
        return bool(self.hb(ev["lane"][[event]], ev["end"][[event]], x["lane"][[row]],
                            x["start"][[row]])[0])  # fmt: skip

    def by_request(self) -> list[tuple]:
        """Accesses with a request, judged by its holds; transfers without one (or whose
        request never held the block) by the hand-out before their submission."""
        ev, x, raw = self.ev, self.x, []
        mode = ev["mode"]
        mine = np.flatnonzero(np.isin(mode, (_HOLD, _RELEASE)))
        n_req = int(max(ev["request"].max(initial=-1), x["request"].max(initial=-1))) + 2
        combo = ev["key"][mine].astype(np.int64) * n_req + ev["request"][mine] + 1
        order = np.lexsort((np.arange(len(mine)), combo))  # stable: allocator order kept
        idx, combo = mine[order], combo[order]
        is_hold = mode[idx] == _HOLD
        # per position: the latest hold at or before it of the same (block, request)
        last_hold = np.maximum.accumulate(np.where(is_hold, np.arange(len(idx)), -1))
        same = last_hold >= 0
        same[same] = combo[last_hold[same]] == combo[same]
        last_hold = np.where(same, last_hold, -1)
        # a request is judged by its holds only in pools where holds are recorded (vLLM's
        # host pool has none: its blocks belong to the offloading manager, not to requests)
        held_pools = np.unique(ev["pool"][mode == _HOLD])
        by_holds = (x["request"] >= 0) & np.isin(x["pool"], held_pools)
        named = np.flatnonzero(by_holds)
        transfer = x["transfer"].astype(bool)
        unjudged = np.flatnonzero(~by_holds & transfer)
        if len(named):
            q_combo = x["key"][named].astype(np.int64) * n_req + x["request"][named] + 1
            last = self._last_before_combo(idx, combo, q_combo, named)
            has = last >= 0
            released = np.zeros(len(named), dtype=bool)
            released[has] = ~is_hold[last[has]]
            hold = np.where(has, last_hold[np.maximum(last, 0)], -1)
            # a request's access without its hold; a transfer for a request that never held
            # the block (one that released it may still copy its kept content)
            for q in np.flatnonzero((~transfer[named] & released) | ~has).tolist():
                rel = int(ev["srow"][idx[last[q]]]) if has[q] else -1
                raw.append((READ_WITHOUT_HOLD, int(x["key"][named[q]]), int(x["srow"][named[q]]),
                            rel, int(x["request"][named[q]]), -1))  # fmt: skip
            judged = hold >= 0
            raw += self._stale(named[judged], self.replay.gen[idx[hold[judged]]])
            unjudged = np.r_[unjudged, named[~judged & transfer[named]]]
        if len(unjudged):
            sub = x["sub_lane"][unjudged] >= 0
            lane = np.where(sub, x["sub_lane"][unjudged], x["lane"][unjudged])
            at = np.where(sub, x["sub_at"][unjudged], x["start"][unjudged])
            last = self._last_before(self.alloc_idx, x["key"][unjudged], lane, at)
            has = last >= 0
            raw += self._stale(unjudged[has], self._alloc_gen(last)[has])
        return raw

    def _last_before_combo(self, idx, combo, q_combo, rows) -> np.ndarray:
        """As :meth:`_last_before`, over events grouped by (block, request) ``combo``."""
        x = self.x
        return self._last_in_group_before(idx, combo, q_combo, x["lane"][rows], x["start"][rows])

    def _stale(self, rows: np.ndarray, gen: np.ndarray) -> list[tuple]:
        x = self.x
        newer = self._newer_write_before(rows, gen)
        hit = np.flatnonzero(newer >= 0)
        return [
            (TRANSFER_AFTER_REUSE if x["transfer"][rows[q]] else READ_AFTER_REUSE,
             int(x["key"][rows[q]]), int(x["srow"][rows[q]]), int(x["srow"][newer[q]]),
             int(x["request"][rows[q]]), int(x["request"][newer[q]]))
            for q in hit.tolist()
        ]  # fmt: skip

    def freed_under_transfer(self) -> list[tuple]:
        """Frees (content discarded) after a transfer of the block was submitted, not after
        it completed: candidates are the transfers submitted since the block's hand-out
        before the free."""
        ev, x, raw = self.ev, self.x, []
        frees = np.flatnonzero(ev["mode"] == _FREE)
        t = np.flatnonzero(x["transfer"].astype(bool) & (x["sub_lane"] >= 0))
        if not len(frees) or not len(t):
            return raw
        order = np.lexsort((x["start"][t], x["key"][t]))
        t = t[order]
        t_key = x["key"][t]
        for f in frees.tolist():
            k = ev["key"][f]
            a, b = np.searchsorted(t_key, k, "left"), np.searchsorted(t_key, k, "right")
            if a == b:
                continue
            cand = t[a:b]
            prev = self._last_before(self.alloc_idx, np.array([k]), ev["lane"][[f]],
                                     ev["start"][[f]])[0]  # fmt: skip
            if prev >= 0:
                since = ev["start"][self.alloc_idx[prev]]
                cand = cand[x["start"][cand] >= since]
            if not len(cand):
                continue
            n = len(cand)
            f_lane, f_start = np.repeat(ev["lane"][f], n), np.repeat(ev["start"][f], n)
            submitted = self.hb(x["sub_lane"][cand], x["sub_at"][cand], f_lane, f_start)
            done = self.hb(x["lane"][cand], x["end"][cand], f_lane, f_start)
            for c in cand[submitted & ~done].tolist():
                raw.append((FREED_UNDER_TRANSFER, int(k), int(x["srow"][c]), int(ev["srow"][f]),
                            int(x["request"][c]), int(ev["request"][f])))  # fmt: skip
        return raw


def findings_frame(spans: pd.DataFrame, raw: pd.DataFrame) -> pd.DataFrame:
    """One row per (kind, span a, span b, requests, pool), the blocks they share listed as
    ``gpu:7`` (:data:`COLUMNS`); a side with no span has span -1 and empty names. ``raw``:
    :data:`RAW_COLUMNS` with ``pool`` and ``block`` and the requests as names."""
    if raw.empty:
        return empty_findings()
    raw = raw.drop_duplicates(["kind", "key", "srow_a", "srow_b", "request_a", "request_b"])
    blocks = [f"{p}:{b}" for p, b in zip(raw["pool"], raw["block"], strict=True)]
    frame = raw.assign(block=blocks)
    keys = ["kind", "srow_a", "srow_b", "request_a", "request_b", "pool"]
    grouped = frame.groupby(keys, sort=False)["block"].agg(
        lambda b: sorted(set(b), key=_block_order)
    )
    grouped = grouped.reset_index()
    out: dict[str, Any] = {
        "kind": grouped["kind"].to_numpy(dtype=object),
        "pool": grouped["pool"].to_numpy(dtype=object),
        "blocks": grouped["block"].tolist(),
        "n_blocks": np.array([len(b) for b in grouped["block"]], dtype=np.int64),
        "request_a": grouped["request_a"].to_numpy(dtype=object),
        "request_b": grouped["request_b"].to_numpy(dtype=object),
    }
    for side in ("a", "b"):
        rows = grouped[f"srow_{side}"].to_numpy(np.int64)
        has = rows >= 0
        safe = np.maximum(rows, 0)
        out[f"span_{side}"] = np.where(has, spans["span_id"].to_numpy(np.int64)[safe], -1)
        for c in ("name", "role", "lane"):
            values = spans[c].iloc[safe].astype(str).to_numpy(dtype=object)
            out[f"{c}_{side}"] = np.where(has, values, "")
        out[f"step_{side}"] = np.where(has, spans["step"].to_numpy(np.int64)[safe], -1)
    result = pd.DataFrame(out)[COLUMNS]
    rank = {k: i for i, k in enumerate(KINDS)}
    result = result.assign(_r=result["kind"].map(rank))
    return result.sort_values(["_r", "step_a", "span_a"], kind="stable").drop(columns="_r") \
        .reset_index(drop=True)  # fmt: skip


def _block_order(text: str) -> tuple[str, int]:
    pool, _, block = text.rpartition(":")
    return pool, int(block)


def empty_findings() -> pd.DataFrame:
    dtypes = {"n_blocks": "int64", "span_a": "int64", "span_b": "int64", "step_a": "int64",
              "step_b": "int64"}  # fmt: skip
    return empty_frame(COLUMNS, dtypes)


def ownership_kinds(findings: pd.DataFrame) -> pd.DataFrame:
    """Findings grouped by kind and what the two sides are (span names and roles): how many,
    distinct blocks and requests, the first step; one row per root-cause candidate."""
    if findings.empty:
        return empty_frame(KIND_COLUMNS)
    keys = ["kind", "name_a", "role_a", "name_b", "role_b"]
    rows = []
    for key, g in findings.groupby(keys, sort=False):
        requests = {r for r in pd.concat([g["request_a"], g["request_b"]]) if r}
        steps = [s for s in pd.concat([g["step_a"], g["step_b"]]).tolist() if s >= 0]
        rows.append([*key, len(g), len({b for bs in g["blocks"] for b in bs}), len(requests),
                     min(steps) if steps else -1])  # fmt: skip
    out = pd.DataFrame(rows, columns=KIND_COLUMNS)
    return out.sort_values("findings", ascending=False, kind="stable").reset_index(drop=True)


def find_ownership(
    trace: Any,
    spans: pd.DataFrame,
    acc: AccessTable,
    events: AccessTable,
    lanes: pd.Index,
    dp_of_pid: dict[int, int],
    happens_before: HappensBefore,
) -> pd.DataFrame:
    """The findings of ``trace`` (:data:`COLUMNS`) from the core's tables
    (:mod:`fdprof.analysis.tables`): its accesses ``acc`` (starts: the entry times) and
    allocator events ``events``, which share one numbering of scoped (pool, block) keys, its
    lanes and happens-before (:meth:`fdprof.analysis.clocks.LaneClocks.happens_before`)."""
    if len(events) == 0:
        return empty_findings()
    index = pd.Index(spans["span_id"].to_numpy(np.int64))
    span_req, names = _requests(trace, index)
    ev = {
        "srow": events.span, "lane": events.lane, "start": events.start, "end": events.end,
        "span_id": index.to_numpy()[events.span], "key": events.key, "pool": events.pool,
        "mode": _ranks(MODES)[events.mode], "request": span_req[events.span],
    }  # fmt: skip
    x = _accesses(trace, spans, index, acc, span_req, dp_of_pid, lanes)
    raw = pd.DataFrame(_violations(ev, x, happens_before), columns=RAW_COLUMNS)
    if raw.empty:
        return empty_findings()
    # the keys found: their pool and block, and the request codes as names
    key = np.concatenate([events.key, acc.key])
    uniq, where = np.unique(key, return_index=True)
    first = where[np.searchsorted(uniq, raw["key"].to_numpy(np.int64))]  # a row with that key
    pool = np.concatenate([events.pool, acc.pool])[first]
    raw = raw.assign(
        pool=np.asarray(events.pools, dtype=object)[pool],
        block=np.concatenate([events.block, acc.block])[first],
        request_a=_names(raw["request_a"], names), request_b=_names(raw["request_b"], names),
    )  # fmt: skip
    return findings_frame(spans, raw)


def _names(codes: pd.Series, names: np.ndarray) -> np.ndarray:
    c = codes.to_numpy(np.int64)
    return np.where(c >= 0, names[np.maximum(c, 0)] if len(names) else "", "")


def _requests(trace: Any, index: pd.Index) -> tuple[np.ndarray, np.ndarray]:
    """Per span row (``index``: the span ids), the code of its ``fd.request_id`` (-1: none),
    and the codes' names as text (engines write ints or strings)."""
    span_req = np.full(len(index), -1, dtype=np.int64)
    values = trace.attr(S.REQUEST_ID)
    if values.empty:
        return span_req, np.empty(0, dtype=object)
    codes, uniques = pd.factorize(values)
    rows = index.get_indexer(values.index.to_numpy())
    span_req[rows[rows >= 0]] = codes[rows >= 0]
    return span_req, np.array([str(u) for u in uniques], dtype=object)


def _accesses(trace, spans, index, acc: AccessTable, span_req, dp_of_pid, lanes) -> dict:
    """The access table (:data:`ACCESS_COLUMNS`) with each access's request code (a row per
    request whose ``scheduled_request`` child of the access span lists the block; -1 where
    none does) and, for transfers, their submission."""
    srow = acc.span
    rows = np.arange(len(acc))
    request = np.full(len(acc), -1, dtype=np.int64)
    uses = _uses(trace, spans, index, span_req)
    if len(uses["parent"]):
        # a one-to-many join on (span row, block), in numpy: gpu accesses only
        u_row = index.get_indexer(uses["parent"])
        width = int(max(acc.block.max(initial=0), uses["block"].max(initial=0))) + 1
        u_key = u_row.astype(np.int64) * width + uses["block"]
        order = np.argsort(u_key, kind="stable")
        u_key, u_req = u_key[order], uses["request"][order]
        a_key = srow.astype(np.int64) * width + acc.block
        gpu = _is_gpu(acc)
        lo = np.searchsorted(u_key, a_key, "left")
        hi = np.where(gpu, np.searchsorted(u_key, a_key, "right"), lo)
        count = np.maximum(hi - lo, 1)
        rows = np.repeat(rows, count)
        nth = np.arange(len(rows)) - np.repeat(np.cumsum(count) - count, count)
        matched = np.repeat(hi > lo, count)
        at = np.repeat(lo, count) + nth
        request = np.where(matched, u_req[np.minimum(at, max(len(u_req) - 1, 0))], -1)
    x = {"srow": srow[rows], "lane": acc.lane[rows], "start": acc.start[rows],
         "end": acc.end[rows], "key": acc.key[rows], "pool": acc.pool[rows],
         "write": acc.write[rows], "request": request}  # fmt: skip
    n = len(rows)
    x["transfer"] = np.zeros(n, dtype=bool)
    x["sub_lane"] = np.full(n, -1, dtype=np.int64)
    x["sub_at"] = np.full(n, -1, dtype=np.int64)
    task = trace.attr(S.SWAP_TASK_ID)
    if not task.empty:
        _transfers(x, spans, index, task, span_req, dp_of_pid, lanes)
    return x


def _transfers(x, spans, index, task, span_req, dp_of_pid, lanes) -> None:
    """Mark the transfers' rows of ``x`` (spans with ``swap.task_id``) with their submission
    (the ``issue_swap_task`` of the same task and DP group) and, without a request of their
    own, its request."""
    t_rows = index.get_indexer(task.index.to_numpy())
    ok = t_rows >= 0
    t_rows, t_task = t_rows[ok], task.to_numpy(np.int64)[ok]
    t_dp = np.array([dp_of_pid.get(int(p), -1) for p in
                     spans["pid"].to_numpy(np.int64)[t_rows]], dtype=np.int64)  # fmt: skip
    names = spans["name"].iloc[t_rows].astype(str).to_numpy(dtype=object)
    issued = pd.DataFrame({"dp": t_dp, "task": t_task, "srow": t_rows})[names == S.ISSUE_SWAP_TASK]
    issued = issued.drop_duplicates(["dp", "task"]).set_index(["dp", "task"])
    of_span = pd.DataFrame({"dp": t_dp, "task": t_task}, index=t_rows)
    of_span = of_span[~of_span.index.duplicated()]
    transfer = np.isin(x["srow"], of_span.index.to_numpy())
    rows = np.flatnonzero(transfer)
    x["transfer"] = transfer
    if not len(rows):
        return
    mine = of_span.loc[x["srow"][rows]]
    keys = pd.MultiIndex.from_arrays([mine["dp"].to_numpy(), mine["task"].to_numpy()])
    at = issued.index.get_indexer(keys)
    ok = at >= 0
    sub_srow = issued["srow"].to_numpy(np.int64)[np.maximum(at, 0)]
    x["sub_lane"][rows[ok]] = lanes.get_indexer(
        spans["lane"].iloc[sub_srow[ok]].astype(str).to_numpy()
    )
    x["sub_at"][rows[ok]] = spans["start"].to_numpy(np.int64)[sub_srow[ok]]
    own = span_req[x["srow"][rows]]
    x["request"][rows] = np.where(own >= 0, own, np.where(ok, span_req[sub_srow], -1))


def _is_gpu(acc: AccessTable) -> np.ndarray:
    """Whether each row's (scoped) pool is a device pool (``gpu``, ``gpu@dp1``, ...)."""
    gpu = np.array([str(p).startswith(S.POOL_GPU) for p in acc.pools], dtype=bool)
    return gpu[acc.pool] if len(gpu) else np.zeros(len(acc), dtype=bool)


def _uses(trace, spans, index, span_req) -> dict[str, np.ndarray]:
    """(parent span id, block, request code) of every ``scheduled_request`` span with a
    parent and a request: the request's share of its parent's blocks."""
    none = {"parent": np.empty(0, np.int64), "block": np.empty(0, np.int64),
            "request": np.empty(0, np.int64)}  # fmt: skip
    listed = trace.attr(S.KV_BLOCKS)
    if listed.empty:
        return none
    rows = index.get_indexer(listed.index.to_numpy())
    keep = rows >= 0
    rows, ids = rows[keep], listed.index.to_numpy(np.int64)[keep]
    parents = spans["parent_id"].to_numpy(np.int64)[rows]
    names = spans["name"].iloc[rows].astype(str).to_numpy(dtype=object)
    ok = (names == S.SCHEDULED_REQUEST) & (parents != 0) & (span_req[rows] >= 0)
    if not ok.any():
        return none
    blocks = listed.reindex(ids[ok]).tolist()
    counts = np.array([len(b or ()) for b in blocks], dtype=np.int64)
    return {
        "parent": np.repeat(parents[ok], counts),
        "block": np.fromiter((int(b) for bs in blocks for b in (bs or ())), np.int64,
                             int(counts.sum())),
        "request": np.repeat(span_req[rows][ok], counts),
    }  # fmt: skip
