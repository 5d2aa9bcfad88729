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
  released before) — transfers excepted: an engine may copy a freed block's kept content
  (vLLM stores finished requests' blocks), judged by the next two kinds instead;
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
:mod:`fdprof.analysis.hazards` (handed in as a function), and a few happens-before checks per
finding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from fdprof import semconv as S

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

#: allocator events: the span's row, lane, times, (pool, block) key, mode, request ("" none)
EVENT_COLUMNS = ["srow", "lane", "start", "end", "span_id", "key", "pool", "mode", "request"]
#: accesses: as events, plus ``write``, ``transfer`` and a transfer's submission (lane, end;
#: -1: unknown)
ACCESS_COLUMNS = ["srow", "lane", "start", "end", "key", "write", "request", "transfer",
                  "sub_lane", "sub_end"]  # fmt: skip
#: raw findings: kind, block key, the two sides' span rows (-1: none) and requests
RAW_COLUMNS = ["kind", "key", "srow_a", "srow_b", "request_a", "request_b"]
COLUMNS = ["kind", "pool", "blocks", "n_blocks", "request_a", "request_b",
           "span_a", "name_a", "role_a", "lane_a", "step_a",
           "span_b", "name_b", "role_b", "lane_b", "step_b"]  # fmt: skip
KIND_COLUMNS = ["kind", "name_a", "role_a", "name_b", "role_b", "findings", "blocks", "requests",
                "first_step"]  # fmt: skip
_MODE_RANK = {S.MODE_RELEASE: 0, S.MODE_UNREF: 1, S.MODE_FREE: 2, S.MODE_UNDERFLOW: 3,
              S.MODE_ALLOC: 4, S.MODE_HOLD: 5}  # fmt: skip


def ownership_violations(
    events: pd.DataFrame, accesses: pd.DataFrame, happens_before: HappensBefore
) -> pd.DataFrame:
    """Every finding (module doc) as raw rows (:data:`RAW_COLUMNS`)."""
    if events.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in RAW_COLUMNS})
    ev = _sorted_events(events)
    replay = _Replay(ev)
    raw = replay.run()
    if not accesses.empty:
        judge = _Accesses(ev, replay, accesses, happens_before)
        raw += judge.written_while_held()
        raw += judge.by_request()
        raw += judge.freed_under_transfer()
    return pd.DataFrame(raw, columns=RAW_COLUMNS)


def _sorted_events(events: pd.DataFrame) -> dict[str, np.ndarray]:
    rank = events["mode"].map(_MODE_RANK).to_numpy(np.int64)
    span_id, start = events["span_id"].to_numpy(np.int64), events["start"].to_numpy(np.int64)
    order = np.lexsort((rank, span_id, start, events["key"].to_numpy(np.int64)))
    out = {c: events[c].to_numpy()[order] for c in EVENT_COLUMNS}
    out["request"] = np.asarray([str(r) for r in out["request"]], dtype=object)
    return out


class _Replay:
    """The allocator's events of each block in order: generations, holders, the pool's
    state; the findings the events alone show, and tables for judging accesses."""

    def __init__(self, ev: dict[str, np.ndarray]) -> None:
        self.ev = ev
        #: per event: the generation current after it
        self.gen = np.zeros(len(ev["key"]), dtype=np.int64)
        #: hand-outs: (event index, generation); holds and releases: (event index)
        self.allocs: list[tuple[int, int]] = []
        #: a hand-out made while requests held the block: (alloc index, [(request, hold
        #: index, release index or -1)])
        self.suspects: list[tuple[int, list[list[Any]]]] = []

    def run(self) -> list[tuple]:
        ev, raw = self.ev, []
        mode, req, key, srow = ev["mode"], ev["request"], ev["key"], ev["srow"]
        refcounted = {int(p) for p, m in zip(ev["pool"], mode, strict=True)
                      if m in (S.MODE_UNREF, S.MODE_UNDERFLOW)}  # fmt: skip
        bounds = np.flatnonzero(np.diff(key)) + 1
        for lo, hi in zip(np.r_[0, bounds].tolist(), np.r_[bounds, len(key)].tolist(),
                          strict=True):  # fmt: skip
            k = int(key[lo])
            gen, holders, referenced, last_ref = 0, {}, False, -1
            open_suspects: list[list[Any]] = []
            for i in range(lo, hi):
                m, r = mode[i], req[i]
                if m == S.MODE_ALLOC:
                    others = [(h, j) for h, j in holders.items() if h != r]
                    if others:
                        held = [[h, j, -1] for h, j in others]
                        self.suspects.append((i, held))
                        open_suspects += held
                        raw += [(HANDED_OUT_WHILE_HELD, k, int(srow[j]), int(srow[i]), h, r)
                                for h, j in others]  # fmt: skip
                    gen += 1
                    self.allocs.append((i, gen))
                    referenced, last_ref = True, i
                elif m == S.MODE_HOLD:
                    holders[r] = i
                    referenced, last_ref = True, i
                elif m == S.MODE_RELEASE:
                    if holders.pop(r, None) is None:
                        raw.append((REFCOUNT_NEGATIVE, k, int(srow[i]), -1, r, ""))
                    for s in open_suspects:
                        if s[0] == r and s[2] == -1:
                            s[2] = i
                elif m in (S.MODE_UNREF, S.MODE_FREE):
                    raw += [(FREED_WHILE_HELD, k, int(srow[j]), int(srow[i]), h, r)
                            for h, j in holders.items()]  # fmt: skip
                    referenced = False
                elif m == S.MODE_UNDERFLOW:  # below zero: negative, not a count left over
                    raw.append((REFCOUNT_NEGATIVE, k, int(srow[i]), -1, r, ""))
                    referenced = False
                self.gen[i] = gen
            if referenced and not holders and int(ev["pool"][lo]) in refcounted:
                raw.append((REFCOUNT_LEAK, k, int(srow[last_ref]), -1, req[last_ref], ""))
        return raw


class _Accesses:
    """Accesses judged against the replayed events (module doc)."""

    def __init__(self, ev, replay: _Replay, accesses: pd.DataFrame, hb: HappensBefore) -> None:
        self.ev, self.replay, self.hb = ev, replay, hb
        self.x = {c: accesses[c].to_numpy() for c in ACCESS_COLUMNS}
        self.x["request"] = np.asarray([str(r) for r in self.x["request"]], dtype=object)
        alloc_idx = np.array([i for i, _ in replay.allocs], dtype=np.int64)
        self.alloc_idx = alloc_idx  # in event order: sorted by key, then allocator order
        # every write's generation: the latest hand-out of its block before it
        w = np.flatnonzero(self.x["write"].astype(bool))
        self.w = w
        last = self._last_before(alloc_idx, self.x["key"][w], self.x["lane"][w], self.x["start"][w])
        self.w_gen = self._alloc_gen(last)

    def _alloc_gen(self, pos: np.ndarray) -> np.ndarray:
        """The generation of the hand-out at each position of ``alloc_idx`` (0 for -1: none)."""
        if not len(self.alloc_idx):
            return np.zeros(len(pos), dtype=np.int64)
        return np.where(pos >= 0, self.replay.gen[self.alloc_idx[np.maximum(pos, 0)]], 0)

    def _last_before(self, idx: np.ndarray, key, lane, start) -> np.ndarray:
        """Per query, the position in ``idx`` (event indices, sorted by key then allocator
        order) of the last event of its key that happens before (lane, start); -1: none."""
        ev = self.ev
        ev_key = ev["key"][idx]
        first = np.searchsorted(ev_key, key, "left")
        lo, hi = first.copy(), np.searchsorted(ev_key, key, "right")
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
                            int(x["srow"][first]), request, str(x["request"][first])))  # fmt: skip
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
        mine = np.flatnonzero(np.isin(mode, (S.MODE_HOLD, S.MODE_RELEASE)))
        codes = pd.factorize(np.concatenate([ev["request"][mine], x["request"]]))[0]
        n_req = int(codes.max(initial=0)) + 1
        combo = ev["key"][mine].astype(np.int64) * n_req + codes[: len(mine)]
        order = np.lexsort((np.arange(len(mine)), combo))  # stable: allocator order kept
        idx, combo = mine[order], combo[order]
        is_hold = mode[idx] == S.MODE_HOLD
        # per position: the latest hold at or before it of the same (block, request)
        last_hold = np.maximum.accumulate(np.where(is_hold, np.arange(len(idx)), -1))
        same = last_hold >= 0
        same[same] = combo[last_hold[same]] == combo[same]
        last_hold = np.where(same, last_hold, -1)
        named = np.flatnonzero(x["request"] != "")
        transfer = x["transfer"].astype(bool)
        unjudged = np.flatnonzero((x["request"] == "") & transfer)
        if len(named):
            q_combo = x["key"][named].astype(np.int64) * n_req + codes[len(mine) :][named]
            last = self._last_before_combo(idx, combo, q_combo, named)
            has = last >= 0
            released = np.zeros(len(named), dtype=bool)
            released[has] = ~is_hold[last[has]]
            hold = np.where(has, last_hold[np.maximum(last, 0)], -1)
            for q in np.flatnonzero(~transfer[named] & (~has | released)).tolist():
                rel = int(ev["srow"][idx[last[q]]]) if has[q] else -1
                raw.append((READ_WITHOUT_HOLD, int(x["key"][named[q]]), int(x["srow"][named[q]]),
                            rel, str(x["request"][named[q]]), ""))  # fmt: skip
            judged = hold >= 0
            raw += self._stale(named[judged], self.replay.gen[idx[hold[judged]]])
            unjudged = np.r_[unjudged, named[~judged & transfer[named]]]
        if len(unjudged):
            sub = x["sub_lane"][unjudged] >= 0
            lane = np.where(sub, x["sub_lane"][unjudged], x["lane"][unjudged])
            at = np.where(sub, x["sub_end"][unjudged], x["start"][unjudged])
            last = self._last_before(self.alloc_idx, x["key"][unjudged], lane, at)
            has = last >= 0
            raw += self._stale(unjudged[has], self._alloc_gen(last)[has])
        return raw

    def _last_before_combo(self, idx, combo, q_combo, rows) -> np.ndarray:
        """As :meth:`_last_before`, over events grouped by (block, request) ``combo``."""
        ev, x = self.ev, self.x
        first = np.searchsorted(combo, q_combo, "left")
        lo, hi = first.copy(), np.searchsorted(combo, q_combo, "right")
        lane, start = x["lane"][rows], x["start"][rows]
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

    def _stale(self, rows: np.ndarray, gen: np.ndarray) -> list[tuple]:
        x = self.x
        newer = self._newer_write_before(rows, gen)
        hit = np.flatnonzero(newer >= 0)
        return [
            (TRANSFER_AFTER_REUSE if x["transfer"][rows[q]] else READ_AFTER_REUSE,
             int(x["key"][rows[q]]), int(x["srow"][rows[q]]), int(x["srow"][newer[q]]),
             str(x["request"][rows[q]]), str(x["request"][newer[q]]))
            for q in hit.tolist()
        ]  # fmt: skip

    def freed_under_transfer(self) -> list[tuple]:
        """Frees (content discarded) after a transfer of the block was submitted, not after
        it completed: candidates are the transfers submitted since the block's hand-out
        before the free."""
        ev, x, raw = self.ev, self.x, []
        frees = np.flatnonzero(ev["mode"] == S.MODE_FREE)
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
            submitted = self.hb(x["sub_lane"][cand], x["sub_end"][cand], f_lane, f_start)
            done = self.hb(x["lane"][cand], x["end"][cand], f_lane, f_start)
            for c in cand[submitted & ~done].tolist():
                raw.append((FREED_UNDER_TRANSFER, int(k), int(x["srow"][c]), int(ev["srow"][f]),
                            str(x["request"][c]), str(ev["request"][f])))  # fmt: skip
        return raw


def findings_frame(spans: pd.DataFrame, raw: pd.DataFrame, key_pool: dict[int, str],
                   key_block: dict[int, int]) -> pd.DataFrame:  # fmt: skip
    """One row per (kind, span a, span b, requests, pool), the blocks they share listed as
    ``gpu:7`` (:data:`COLUMNS`); a side with no span has span -1 and empty names."""
    if raw.empty:
        return empty_findings()
    raw = raw.drop_duplicates()
    pools = [key_pool[int(k)] for k in raw["key"]]
    blocks = [f"{p}:{key_block[int(k)]}" for p, k in zip(pools, raw["key"], strict=True)]
    frame = raw.assign(pool=pools, block=blocks)
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
            values = spans[c].astype(str).to_numpy(dtype=object)[safe]
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
    return pd.DataFrame({c: pd.Series(dtype=dtypes.get(c, "object")) for c in COLUMNS})


def ownership_kinds(findings: pd.DataFrame) -> pd.DataFrame:
    """Findings grouped by kind and what the two sides are (span names and roles): how many,
    distinct blocks and requests, the first step; one row per root-cause candidate."""
    if findings.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in KIND_COLUMNS})
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
    acc: dict[str, Any],
    events: dict[str, Any],
    lanes: pd.Index,
    dp_of_pid: dict[int, int],
    happens_before: HappensBefore,
) -> pd.DataFrame:
    """The findings of ``trace`` (:data:`COLUMNS`) from the hazards analysis's tables: its
    access table ``acc`` and allocator-event table ``events`` (numpy columns, pools scoped per
    DP group and TP rank, ``acc['start']`` the entry times), its lanes and happens-before."""
    if events["n"] == 0:
        return empty_findings()
    pool = np.concatenate([events["pool"], acc["pool"]])
    block = np.concatenate([events["block"], acc["block"]])
    pool_code, pool_names = pd.factorize(pool)
    key = np.unique(np.stack([pool_code, block]), axis=1, return_inverse=True)[1].ravel()
    ev_key, acc_key = key[: events["n"]], key[events["n"] :]
    requests = _requests(trace)
    span_ids = spans["span_id"].to_numpy(np.int64)
    ev_frame = pd.DataFrame({
        "srow": events["srow"], "lane": events["lane"], "start": events["start"],
        "end": events["end"], "span_id": span_ids[events["srow"]], "key": ev_key,
        "pool": pool_code[: events["n"]], "mode": events["mode"],
        "request": requests.reindex(span_ids[events["srow"]]).fillna("").to_numpy(dtype=object),
    })  # fmt: skip
    span_lane = lanes.get_indexer(spans["lane"].astype(str).to_numpy())
    accesses = _accesses(trace, spans, acc, acc_key, requests, dp_of_pid, span_lane)
    raw = ownership_violations(ev_frame, accesses, happens_before)
    key_pool = dict(zip(key.tolist(), np.asarray(pool_names, dtype=object)[pool_code].tolist(),
                        strict=True))  # fmt: skip
    key_block = dict(zip(key.tolist(), block.tolist(), strict=True))
    return findings_frame(spans, raw, key_pool, key_block)


def _requests(trace: Any) -> pd.Series:
    """span id -> its ``fd.request_id`` as text (engines write ints or strings)."""
    values = trace.attr(S.REQUEST_ID)
    if values.empty:
        return pd.Series(dtype=object)
    return pd.Series([str(v) for v in values.tolist()], index=values.index, dtype=object)


def _accesses(trace, spans, acc, acc_key, requests, dp_of_pid, span_lane) -> pd.DataFrame:
    """The access table with each access's request (one row per request whose
    ``scheduled_request`` child of the access span lists the block; "" where none does) and,
    for transfers, their submission."""
    n = acc["n"]
    base = pd.DataFrame({
        "arow": np.arange(n), "srow": acc["srow"], "lane": acc["lane"], "start": acc["start"],
        "end": acc["end"], "key": acc_key, "block": acc["block"], "write": acc["write"],
        "gpu": np.array([str(p).startswith(S.POOL_GPU) for p in acc["pool"]], dtype=bool),
    })  # fmt: skip
    span_ids = spans["span_id"].to_numpy(np.int64)
    uses = _uses(trace, spans, requests)
    if not uses.empty:
        uses = uses.assign(srow=pd.Index(span_ids).get_indexer(uses["parent"].to_numpy()))
        named = base[base["gpu"]].merge(uses[["srow", "block", "request"]], on=["srow", "block"])
        rest = base[~base["arow"].isin(named["arow"])].assign(request="")
        base = pd.concat([named, rest], ignore_index=True)
    else:
        base = base.assign(request="")
    task = trace.attr(S.SWAP_TASK_ID)
    transfer = np.zeros(len(base), dtype=bool)
    sub_lane = np.full(len(base), -1, dtype=np.int64)
    sub_end = np.full(len(base), -1, dtype=np.int64)
    if not task.empty:
        pids = spans["pid"].to_numpy(np.int64)
        tasks = pd.DataFrame({"span_id": task.index.to_numpy(np.int64),
                              "task": task.to_numpy(np.int64)})  # fmt: skip
        tasks["srow"] = pd.Index(span_ids).get_indexer(tasks["span_id"].to_numpy())
        tasks = tasks[tasks["srow"] >= 0]
        tasks["dp"] = [dp_of_pid.get(int(p), -1) for p in pids[tasks["srow"].to_numpy()]]
        names = spans["name"].astype(str).to_numpy(dtype=object)
        issued = tasks[names[tasks["srow"].to_numpy()] == S.ISSUE_SWAP_TASK]
        issued = issued.drop_duplicates(["dp", "task"]).set_index(["dp", "task"])
        of_span = tasks.drop_duplicates("srow").set_index("srow")
        srow = base["srow"].to_numpy(np.int64)
        transfer = np.isin(srow, of_span.index.to_numpy())
        rows = np.flatnonzero(transfer)
        if len(rows):
            mine = of_span.loc[srow[rows]]
            keys = pd.MultiIndex.from_arrays([mine["dp"].to_numpy(), mine["task"].to_numpy()])
            at = issued.index.get_indexer(keys)
            ok = at >= 0
            sub_srow = issued["srow"].to_numpy(np.int64)[np.maximum(at, 0)]
            sub_lane[rows[ok]] = span_lane[sub_srow[ok]]
            sub_end[rows[ok]] = spans["end"].to_numpy(np.int64)[sub_srow[ok]]
            job_request = requests.reindex(span_ids[sub_srow]).fillna("").to_numpy(dtype=object)
            own = requests.reindex(span_ids[srow[rows]]).fillna("").to_numpy(dtype=object)
            req = base["request"].to_numpy(dtype=object).copy()
            req[rows] = np.where(own != "", own, np.where(ok, job_request, ""))
            base["request"] = req
    base["transfer"], base["sub_lane"], base["sub_end"] = transfer, sub_lane, sub_end
    return base[ACCESS_COLUMNS]


def _uses(trace, spans, requests) -> pd.DataFrame:
    """(parent span id, block, request) of every ``scheduled_request`` span with a parent:
    the request's share of its parent's blocks."""
    listed = trace.attr(S.KV_BLOCKS)
    if listed.empty:
        return pd.DataFrame(columns=["parent", "block", "request"])
    child = spans[(spans["name"].astype(str) == S.SCHEDULED_REQUEST).to_numpy(bool)
                  & (spans["parent_id"].to_numpy(np.int64) != 0)]  # fmt: skip
    child = child[child["span_id"].isin(listed.index) & child["span_id"].isin(requests.index)]
    if child.empty:
        return pd.DataFrame(columns=["parent", "block", "request"])
    ids = child["span_id"].to_numpy(np.int64)
    blocks = listed.reindex(ids).tolist()
    counts = np.array([len(b or ()) for b in blocks], dtype=np.int64)
    return pd.DataFrame({
        "parent": np.repeat(child["parent_id"].to_numpy(np.int64), counts),
        "block": np.fromiter((int(b) for bs in blocks for b in (bs or ())), np.int64,
                             int(counts.sum())),
        "request": np.repeat(requests.reindex(ids).to_numpy(dtype=object), counts),
    })  # fmt: skip
