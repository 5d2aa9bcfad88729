"""The core's inner loops: in C (``fdprof.analysis._kernels``, built with the package) and here,
in Python and numpy, their reference twins.

Why twins: the loops are serial walks with one small step per event, a thousand times faster
in C; the twins say the same rules in a few readable lines, run where the extension is not
built, and the tests run the oracles against both (``FDPROF_KERNELS=python`` selects the twins,
:func:`fdprof.settings.python_kernels`).

Two kernels:

- :func:`run_worklist`: the vector-clock worklist, written once. Each lane's items (events)
  run in program order; an item that needs another item's clock first (``wait``) parks its
  lane until that item is done. What an item does to its lane's clock is the *step*:
  happens-before (:class:`HbStep`) or weak causal precedence (:class:`WcpStep`).
- :func:`unordered`: per (pool, block) key, the conflicting pairs of accesses on two lanes
  that a set of lane clocks leaves unordered (and, optionally, the ordered ones that overlap
  in time: clock alarms). See :mod:`fdprof.analysis.search` for its inputs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from fdprof import settings

try:
    from fdprof.analysis import _kernels as _c
except ImportError:  # a source checkout not built: the twins, same answers
    _c = None

I64 = np.int64


def compiled() -> bool:
    """Whether the C kernels run (built, and not turned off by ``FDPROF_KERNELS=python``)."""
    return _c is not None and not settings.python_kernels()


@dataclass
class Worklist:
    """A worklist's items and the state a run resumes from: lane ``l``'s items are
    ``items[offsets[l]:offsets[l + 1]]`` in program order; ``out[item]`` is its lane's clock
    after it (``k`` entries), ``done[item]`` whether it ran, ``pos[l]`` how many of lane
    ``l``'s items ran, ``clock[l]`` lane ``l``'s clock now."""

    k: int
    items: np.ndarray
    offsets: np.ndarray
    wait: np.ndarray
    out: np.ndarray
    done: np.ndarray
    pos: np.ndarray
    clock: np.ndarray

    @classmethod
    def new(cls, lane_items: list[np.ndarray], n: int, wait: np.ndarray) -> Worklist:
        k = len(lane_items)
        sizes = [len(r) for r in lane_items]
        return cls(
            k=k,
            items=np.concatenate(lane_items).astype(I64) if k else np.zeros(0, I64),
            offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(I64),
            wait=np.ascontiguousarray(wait, dtype=I64),
            out=np.zeros((n, k), dtype=I64),
            done=np.zeros(n, dtype=np.uint8),
            pos=np.zeros(k, dtype=I64),
            clock=np.zeros((k, k), dtype=I64),
        )

    def blocked(self) -> list[tuple[int, int]]:
        """(lane, item) of every lane with items left: the item it waits at."""
        return [(lane, int(self.items[self.offsets[lane] + self.pos[lane]]))
                for lane in range(self.k)
                if self.pos[lane] < self.offsets[lane + 1] - self.offsets[lane]]  # fmt: skip


@dataclass(frozen=True)
class HbStep:
    """Happens-before: a release counts on its lane's own entry; an acquire joins the clock of
    the release it pairs with (the item it waits on)."""

    release: np.ndarray  #: bool per item

    def c_run(self, w: Worklist) -> int:
        return _c.hb_worklist(w.k, len(w.wait), w.items, w.offsets, w.wait,
                              _u8(self.release), w.out, w.done, w.pos, w.clock)  # fmt: skip

    def python(self, w: Worklist, rows: list[list[int]]):
        release, wait = self.release.tolist(), w.wait.tolist()

        def step(item: int, lane: int, clock: list[int]) -> None:
            if release[item]:
                clock[lane] += 1
            elif wait[item] >= 0:
                clock[:] = map(max, clock, rows[wait[item]])

        return step


@dataclass(frozen=True)
class WcpStep:
    """Weak causal precedence (:mod:`fdprof.analysis.predict`): items ``0..n_sync-1`` are sync
    rows, the rest rule-(a) landings (``landing``: a clock joined at a span start). A lock
    acquire joins the WCP clock of its release (the item it waits on), a hard acquire the
    happens-before clock of its release (``h_rows[src]``); a release ending a hold
    (``end_lock`` >= 0) applies rule (b) over its lock's queue of holds: ``q_lane``,
    ``q_epoch`` (the acquire's lane and epoch), ``q_rel`` (the release's happens-before
    clock), ``q_skip`` (the next hold to try when this one's acquire is not reached), holds of
    lock ``j`` at ``q_off[j]:q_off[j + 1]``."""

    n_sync: int
    landing: np.ndarray
    src: np.ndarray
    release: np.ndarray
    lock_edge: np.ndarray
    h_rows: np.ndarray
    end_lock: np.ndarray
    end_order: np.ndarray
    q_off: np.ndarray
    q_lane: np.ndarray
    q_epoch: np.ndarray
    q_rel: np.ndarray
    q_skip: np.ndarray

    def state(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Rule (b)'s per-(lock, lane) state: the first hold not yet joined, and the holds
        joined beyond it."""
        return (np.zeros(max(len(self.q_off) - 1, 0) * k, I64),
                np.zeros(len(self.q_lane) * k, np.uint8))  # fmt: skip

    def c_run(self, w: Worklist) -> int:
        prefix, q_done = self.state(w.k)
        return _c.wcp_worklist(
            w.k, len(w.wait), self.n_sync, w.items, w.offsets, w.wait, w.out, w.done, w.pos,
            w.clock, _i64(self.landing), _i64(self.src), _u8(self.release),
            _u8(self.lock_edge), _i64(self.h_rows), _i64(self.end_lock), _i64(self.end_order),
            _i64(self.q_off), _i64(self.q_lane), _i64(self.q_epoch), _i64(self.q_rel),
            _i64(self.q_skip), prefix, q_done, len(self.q_off) - 1, len(self.q_lane),
        )  # fmt: skip

    def python(self, w: Worklist, rows: list[list[int]]):
        n_sync = self.n_sync
        landing, src, h_rows = self.landing.tolist(), self.src.tolist(), self.h_rows.tolist()
        release, lock_edge = self.release.tolist(), self.lock_edge.tolist()
        end_lock, end_order = self.end_lock.tolist(), self.end_order.tolist()
        q_off, q_lane, q_epoch = self.q_off.tolist(), self.q_lane.tolist(), self.q_epoch.tolist()
        q_rel, q_skip = self.q_rel.tolist(), self.q_skip.tolist()
        prefix: dict[tuple[int, int], int] = {}
        joined: set[tuple[int, int]] = set()  # (hold, lane) joined beyond the prefix

        def rule_b(clock: list[int], lock: int, order: int, lane: int) -> None:
            base, first = q_off[lock], prefix.get((lock, lane), 0)
            changed = True
            while changed:
                changed = False
                j = first
                while j < order:
                    h = base + j
                    if (h, lane) in joined:
                        j += 1
                    elif clock[q_lane[h]] >= q_epoch[h]:
                        clock[:] = map(max, clock, q_rel[h])
                        joined.add((h, lane))
                        changed = True
                        j += 1
                    else:
                        j = q_skip[h]
            while first < order and (base + first, lane) in joined:
                first += 1
            prefix[lock, lane] = first

        def step(item: int, lane: int, clock: list[int]) -> None:
            if item >= n_sync:
                clock[:] = map(max, clock, landing[item - n_sync])
                return
            s = src[item]
            if lock_edge[item]:
                clock[:] = map(max, clock, rows[s])
            elif s >= 0 and not release[item]:
                clock[:] = map(max, clock, h_rows[s])
            if end_lock[item] >= 0:
                rule_b(clock, end_lock[item], end_order[item], lane)

        return step


def run_worklist(w: Worklist, step: HbStep | WcpStep) -> int:
    """Run every lane of ``w`` as far as it can; returns how many items are left (0 unless
    the waits form a cycle: then each unfinished lane waits on an item of another's)."""
    if compiled():
        return step.c_run(w)
    return _run_python(w, step)


def _run_python(w: Worklist, step: HbStep | WcpStep) -> int:
    items, offsets, wait = w.items.tolist(), w.offsets.tolist(), w.wait.tolist()
    rows, done = w.out.tolist(), w.done.tolist()
    pos, clocks = w.pos.tolist(), w.clock.tolist()
    apply = step.python(w, rows)
    waiting: dict[int, list[int]] = {}
    runnable = deque(lane for lane in range(w.k) if pos[lane] < offsets[lane + 1] - offsets[lane])
    left = sum(offsets[lane + 1] - offsets[lane] - pos[lane] for lane in range(w.k))
    while runnable:
        lane = runnable.popleft()
        clock, p, base = clocks[lane], pos[lane], offsets[lane]
        while p < offsets[lane + 1] - base:
            item = items[base + p]
            if wait[item] >= 0 and not done[wait[item]]:
                waiting.setdefault(wait[item], []).append(lane)
                break
            apply(item, lane, clock)
            rows[item] = list(clock)
            done[item] = 1
            left -= 1
            p += 1
            runnable.extend(waiting.pop(item, ()))
        pos[lane] = p
    if rows:
        w.out[:] = rows
    w.done[:], w.pos[:] = done, pos
    if clocks:
        w.clock[:] = clocks
    return left


def unordered(
    k: int,
    perm: np.ndarray,
    by_time: np.ndarray,
    acc: dict[str, np.ndarray],
    clock: dict[str, np.ndarray],
    alarms: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(racy x, racy y, alarm x, alarm y): access rows, x on a lane before y's in ``perm``'s
    order of lanes within each key. ``perm``: the rows to search, sorted by (key, lane,
    start), and ``by_time`` the same rows sorted by start (where the C kernel finds each
    access's place among its lane's clock events, by one merge); ``acc``: the access columns
    ``key``, ``lane``, ``start``, ``end``, ``write``, ``lo``, ``hi``; ``clock``: ``ev_off``,
    ``times``, ``vc`` (lane ``l``'s events at ``ev_off[l]:ev_off[l + 1]``), ``rel_off``,
    ``rel`` (each lane's release times), ``ta_off``, ``ta`` (the index of lane ``b``'s first
    event whose clock has entry ``a`` >= ``e``, at ``(ta_off[a] + e) * k + b``; the lane's
    event count: none), and the same bounds as times
    (:class:`fdprof.analysis.search.ClockIndex`: ``tb``, ``ta_time``). The C kernel reads
    those times with ``INT64_MIN``/``INT64_MAX`` for none, so accesses ending at ``INT64_MIN``
    or starting at ``INT64_MAX`` (±292 years) take the twin, which needs no stand-in."""
    start, end = acc["start"][perm], acc["end"][perm]
    extreme = len(perm) and (start.max() == np.iinfo(I64).max or end.min() == np.iinfo(I64).min)
    if compiled() and not extreme:
        raw = _c.unordered(
            k, len(perm), _i64(perm), _i64(by_time),
            *(_i64(acc[c]) for c in ("key", "lane", "start", "end")),
            _u8(acc["write"]), *(_i64(acc[c]) for c in ("lo", "hi")),
            *(_i64(clock[c]) for c in ("ev_off", "times", "rel_off", "rel", "tb", "ta_off",
                                       "ta_time")),
            alarms,
        )  # fmt: skip
        return tuple(np.frombuffer(b, dtype=I64) for b in raw)  # type: ignore[return-value]
    return _unordered_numpy(k, perm, acc, clock, alarms)


def _unordered_numpy(k, perm, acc, clock, alarms):
    """The twin: per pair of lanes, every access of the first against the second's accesses
    of its key, as two binary searches over (key, time) packed into one sortable int64 by
    ranking the times."""
    key, lane, write = acc["key"], acc["lane"], acc["write"].astype(bool)
    ev_off, times, vc = clock["ev_off"], clock["times"], clock["vc"].reshape(-1, max(k, 1))
    rel_off, rel, ta_off, ta = clock["rel_off"], clock["rel"], clock["ta_off"], clock["ta"]
    ranked = np.unique(np.concatenate([acc["start"][perm], acc["end"][perm], times]))
    rank, inf = (lambda t: np.searchsorted(ranked, t)), len(ranked)  # -1 is -inf
    base = len(ranked) + 2
    start_r, end_r = np.zeros(len(key), I64), np.zeros(len(key), I64)
    start_r[perm], end_r[perm] = rank(acc["start"][perm]), rank(acc["end"][perm])
    # key codes dense over the searched rows, so key * base cannot overflow
    dense = np.zeros(len(key), I64)
    dense[perm] = np.unique(key[perm], return_inverse=True)[1].ravel()
    by_lane = {a: perm[lane[perm] == a] for a in range(k)}
    out: list[list[np.ndarray]] = [[], [], [], []]
    for a, xs in by_lane.items():
        if not len(xs):
            continue
        # the last event of lane a at or before each start; 1 + its releases before each end
        at = np.searchsorted(times[ev_off[a] : ev_off[a + 1]], acc["start"][xs], "right") - 1
        epoch = np.searchsorted(rel[rel_off[a] : rel_off[a + 1]], acc["end"][xs], "left") + 1
        for b in range(a + 1, k):
            ys = by_lane[b]
            if not len(ys):
                continue
            entry = np.zeros(len(xs), I64)
            entry[at >= 0] = vc[ev_off[a] + at[at >= 0], b]
            tb = np.full(len(xs), -1, I64)
            tb[entry > 0] = rank(rel[rel_off[b] + entry[entry > 0] - 1])
            ia = ta[(ta_off[a] + epoch) * k + b]
            has = ia < ev_off[b + 1] - ev_off[b]
            ta_r = np.full(len(xs), inf, I64)
            ta_r[has] = rank(times[ev_off[b] + ia[has]])
            for writes_only in (False, True):
                sel = ~write[xs] if writes_only else write[xs]
                pool = ys[write[ys]] if writes_only else ys
                if not (sel.any() and len(pool)):
                    continue
                x = xs[sel]
                windows = [(ta_r[sel], tb[sel], 0)]
                if alarms:
                    windows.append((end_r[x], start_r[x], 2))
                for hi_t, lo_t, slot in windows:
                    px, py = _window(x, pool, dense, start_r, end_r, hi_t, lo_t, base)
                    meet = (acc["lo"][px] < acc["hi"][py]) & (acc["lo"][py] < acc["hi"][px])
                    out[slot].append(px[meet])
                    out[slot + 1].append(py[meet])
    racy_x, racy_y, over_x, over_y = (np.concatenate(o) if o else np.zeros(0, I64) for o in out)
    if not alarms:
        return racy_x, racy_y, np.zeros(0, I64), np.zeros(0, I64)
    n = len(key)
    alarm = ~np.isin(over_x * n + over_y, racy_x * n + racy_y)
    return racy_x, racy_y, over_x[alarm], over_y[alarm]


def _window(x, pool, dense, start_r, end_r, hi_t, lo_t, base):
    """(x, y) for y in ``pool`` of x's key with start < hi_t and end > lo_t (ranks)."""
    order = np.lexsort((start_r[pool], dense[pool]))
    rows = pool[order]
    by_start = dense[rows] * base + start_r[rows] + 1
    by_end = np.maximum.accumulate(dense[rows] * base + end_r[rows] + 1)
    kb = dense[x] * base
    a = np.searchsorted(by_start, kb + hi_t + 1, "left")
    b = np.searchsorted(by_end, kb + lo_t + 1, "right")
    length = np.maximum(a - b, 0)
    total = int(length.sum())
    xi = np.repeat(np.arange(len(x)), length)
    yi = np.repeat(b, length) + np.arange(total) - np.repeat(np.cumsum(length) - length, length)
    keep = end_r[rows[yi]] > lo_t[xi]
    return x[xi[keep]], rows[yi[keep]]


def _i64(a: Any) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=I64)


def _u8(a: Any) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=bool).view(np.uint8)


def stable_order(codes: np.ndarray, n_codes: int) -> np.ndarray:
    """The rows of ``codes`` (ints in ``[0, n_codes)``) in stable order of code: a counting
    sort in C where the codes are dense enough, else numpy's stable sort."""
    codes = _i64(codes)
    if compiled() and n_codes <= 4 * len(codes) + (1 << 16):
        return np.frombuffer(_c.counting_sort(codes, len(codes), n_codes), dtype=I64)
    return np.argsort(codes, kind="stable")


def rule_a(
    k: int,
    group: np.ndarray,
    hold: np.ndarray,
    cls: np.ndarray,
    class_lo: np.ndarray,
    class_hi: np.ndarray,
    write: np.ndarray,
    rel_row: np.ndarray,
    h_full: np.ndarray,
    span: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """WCP's rule (a) (:mod:`fdprof.analysis.predict`) over (hold, access) pairs sorted by
    ``group`` (one lock and one block) and, within it, by ``hold`` (the hold's place in its
    lock's order): for each pair, the join of the release clocks (``h_full[rel_row]``) of the
    group's earlier holds with an access conflicting with it (a write: any access whose layer
    class meets its own; a read: such a write). Returns the spans that receive a non-zero join
    (ascending) and the join of theirs, ``(spans, k)``."""
    if compiled():
        spans, clocks = _c.rule_a(
            k, len(group), _i64(group), _i64(hold), _i64(cls), _i64(class_lo), _i64(class_hi),
            len(class_lo), _u8(write), _i64(rel_row), _i64(h_full), len(h_full), _i64(span),
        )  # fmt: skip
        spans = np.frombuffer(spans, dtype=I64)
        clocks = np.frombuffer(clocks, dtype=I64).reshape(len(spans), k)
    else:
        spans, clocks = _rule_a_numpy(k, group, hold, cls, class_lo, class_hi, write, rel_row,
                                      h_full, span)  # fmt: skip
    if not len(spans):
        return spans, clocks
    order = np.argsort(spans, kind="stable")
    spans, clocks = spans[order], clocks[order]
    first = np.flatnonzero(np.concatenate([[True], spans[1:] != spans[:-1]]))
    return spans[first], np.maximum.reduceat(clocks, first, axis=0)


def _rule_a_numpy(k, group, hold, cls, class_lo, class_hi, write, rel_row, h_full, span):
    """The twin: per layer class, per clock entry, a running maximum over each group's rows
    (offset per group so one pass serves every group), read at each hold's first row."""
    m = len(group)
    write = np.asarray(write, dtype=bool)
    new_group = np.ones(m, dtype=bool)
    new_group[1:] = group[1:] != group[:-1]
    new_hold = new_group.copy()
    new_hold[1:] |= hold[1:] != hold[:-1]
    hold_start = np.maximum.accumulate(np.where(new_hold, np.arange(m), 0))
    h_rel = h_full[rel_row]
    lo, hi = class_lo[cls], class_hi[cls]
    base = (np.cumsum(new_group) - 1) * (int(h_full.max(initial=0)) + 1)
    joined = np.zeros((m, k), dtype=I64)
    for c, (c_lo, c_hi) in enumerate(zip(class_lo.tolist(), class_hi.tolist(), strict=True)):
        in_class = cls == c
        meets = (c_lo < hi) & (lo < c_hi)
        for writes_only, needs in ((False, write), (True, ~write)):
            # a write conflicts with any access of the class, a read with its writes only
            take = meets & needs
            src = in_class & (write if writes_only else True)
            if not (take.any() and src.any()):
                continue
            for j in range(k):
                run = np.maximum.accumulate(base + np.where(src, h_rel[:, j], 0))
                before = np.where(hold_start > 0, run[np.maximum(hold_start - 1, 0)], -1)
                earlier = np.where(before >= base, before - base, 0)  # an earlier hold, same group
                joined[take, j] = np.maximum(joined[take, j], earlier[take])
    hit = joined.any(axis=1)
    return span[hit], joined[hit]
