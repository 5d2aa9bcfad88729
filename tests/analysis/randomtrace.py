"""Small random traces for the property test: lanes interleaved in one global time, with
nested spans, ties, gaps, truncated spans, duplicate seqs and skewed lane clocks.

Seqs are drawn over the whole int64 range: each keyed object's generations 0, 1, 2 ... are
mapped to int64 values (the extremes, -1, 0, 2^62-scale ids, random ones) by a mapping that is
one-to-one per object and often the same for every object, so objects share seqs: an acquire
paired with another object's release (a collision) would hide a race the oracle sees."""

from __future__ import annotations

import random

from fdprof.trace.model import Trace

from .builder import TraceBuilder

SEQ_OBJS = ("queue:a", "signal:b")
LOCK = "lock:kv"
SEQLESS_OBJS = (LOCK, "mutex:m")
LAYERS = ((-1, -1), (0, 1), (1, 2), (0, 2))
I64 = (-(2**63), 2**63 - 1)
#: seqs every mapping draws from first: the extremes and the values packing got wrong
SPECIAL_SEQS = (I64[0], I64[0] + 1, -(2**62), -2, -1, 0, 1, 2, 2**62, 2**62 + 1, I64[1] - 1,
                I64[1])  # fmt: skip


def _seq_values(rng: random.Random, count: int) -> list[int]:
    """``count`` distinct int64 values: special ones and random ones, shuffled."""
    values = set(rng.sample(SPECIAL_SEQS, min(count, len(SPECIAL_SEQS))))
    while len(values) < count:
        values.add(rng.randint(*I64))
    out = sorted(values)
    rng.shuffle(out)
    return out


def random_trace(seed: int, family: str = "mixed") -> Trace:
    """``mixed``: every object kind, some lanes skewed; ``skewed``: keyed objects only, every
    lane's clock skewed; ``locks``: mostly seq-less objects (time-ordered pairing). The lock
    mostly excludes (holds of ``lock:kv`` on two lanes overlap now and then: a broken lock);
    ``mutex:m`` events are drawn freely. ``lifetime``: as ``mixed``, and the first lane is
    also an allocator handing blocks out and taking them back (instant spans, so its events
    are in program order, as an allocator's are)."""
    rng = random.Random(seed)
    lanes = [f"{1 + i % 2}/{i + 1}" for i in range(rng.randint(2, 4))]  # threads share pids
    p_skew = {"mixed": 0.3, "lifetime": 0.3, "skewed": 1.0, "locks": 0.0}[family]
    objs = {"mixed": SEQ_OBJS + SEQLESS_OBJS, "lifetime": SEQ_OBJS + SEQLESS_OBJS,
            "skewed": SEQ_OBJS,
            "locks": SEQLESS_OBJS + SEQLESS_OBJS + SEQ_OBJS[:1]}[family]  # fmt: skip
    skew = {lane: rng.randint(-6, 6) if rng.random() < p_skew else 0 for lane in lanes}
    many = 0 if family == "locks" else rng.choice((0, 0, 3, 12))  # locks stay frequent there
    keyed_objs = SEQ_OBJS + tuple(f"queue:q{i}" for i in range(many))
    objs += keyed_objs[len(SEQ_OBJS) :]
    shared = _seq_values(rng, 32)
    seq_of = {o: shared if rng.random() < 0.7 else _seq_values(rng, 32) for o in keyed_objs}
    b = TraceBuilder()
    open_spans: dict[str, list[tuple[int, list]]] = {lane: [] for lane in lanes}
    next_seq = dict.fromkeys(keyed_objs, 0)
    t = 10  # skews stay positive: end -1 means "never ended"

    def new_span(lane: str, start: int, end: int, accesses: list) -> None:
        sid = b.span(lane, "s", start + skew[lane], end if end == -1 else end + skew[lane])
        for pool, block, mode, layers in accesses:
            b.access(sid, pool, block, mode, layers)

    def some_accesses() -> list:
        return [
            (rng.choice(("gpu", "cpu")), rng.randint(0, 2), rng.choice(("read", "write")),
             rng.choice(LAYERS))
            for _ in range(rng.randint(1, 3))
        ]  # fmt: skip

    holds: dict[str, int] = {}  # lane -> when its hold of LOCK ends

    def end_holds(until: float) -> None:
        for lane, end in sorted(holds.items()):
            if end <= until:
                b.release(LOCK, end + skew[lane], lane)
                del holds[lane]

    def lock_discipline(op: str, lane: str) -> bool:
        """Whether ``lane`` records this lock event itself: an acquire starts a hold (its
        release comes a few ticks later), mostly when the lock is free, sometimes while
        another lane holds it (a broken lock: a descriptor shared by threads); a release
        outside a hold now and then (a stray one)."""
        if op == "acq" and lane not in holds and (not holds or rng.random() < 0.5):
            holds[lane] = t + rng.randint(0, 6)
            return True
        return op == "rel" and rng.random() < 0.1

    allocated: set[tuple[str, int]] = set()
    ops = ("open", "close", "span", "span", "rel", "rel", "acq", "acq")
    if family == "lifetime":
        ops += ("life", "life", "life")

    for _ in range(rng.randint(1, 24)):
        lane = rng.choice(lanes)
        t += rng.choice((0, 1, 1, 2))
        end_holds(t)
        op = rng.choice(ops)
        if op == "life":  # the allocator (first lane) hands a block out or takes it back
            block = (rng.choice(("gpu", "cpu")), rng.randint(0, 2))
            mode = "free" if block in allocated else "alloc"
            allocated ^= {block}
            new_span(lanes[0], t, t, [(*block, mode, (-1, -1))])
        elif op == "open":
            open_spans[lane].append((t, some_accesses()))
        elif op == "close" and open_spans[lane]:
            start, acc = open_spans[lane].pop()
            new_span(lane, start, t, acc)
        elif op == "span":
            new_span(lane, t, t + rng.randint(0, 3), some_accesses())
        elif op in ("rel", "acq"):
            obj = rng.choice(objs)
            if obj == LOCK and not lock_discipline(op, lane):
                continue
            if obj in SEQLESS_OBJS:
                seq = None
            elif op == "rel":
                gen = next_seq[obj] if rng.random() < 0.9 else max(next_seq[obj] - 1, 0)
                next_seq[obj] = gen + 1
                seq = seq_of[obj][gen]
            else:
                seq = seq_of[obj][rng.randint(0, next_seq[obj])]
            (b.release if op == "rel" else b.acquire)(obj, t + skew[lane], lane, seq)
    end_holds(t if rng.random() < 0.3 else float("inf"))  # some holds never end
    for lane, stack in open_spans.items():
        for start, acc in stack:
            new_span(lane, start, -1 if rng.random() < 0.5 else t + 1, acc)
    return b.build()


WCP_LOCKS = ("lock:kv", "lock:b")


def random_wcp_trace(seed: int) -> Trace:
    """For the WCP property test: each lane runs a random script — critical sections of one
    or two nested locks with spans inside and between them, spans outside, and work handed
    to another lane inside a hold (``queue:a`` out, ``signal:b`` back before the release:
    hard edges) — and a scheduler interleaves the lanes, taking a lock only while it is free
    (now and then a stray release), a message only once sent (now and then one not sent
    yet). Spans touch a few shared blocks; seqs span the int64 range."""
    rng = random.Random(seed)
    lanes = [f"{1 + i % 2}/{i + 1}" for i in range(rng.randint(2, 4))]
    seqs = {o: _seq_values(rng, 32) for o in ("queue:a", "signal:b")}
    scripts: dict[str, list[tuple]] = {lane: [] for lane in lanes}
    handoffs = 0
    for _ in range(rng.randint(2, 7)):
        lane = rng.choice(lanes)
        ops = scripts[lane]
        if rng.random() < 0.3:
            ops.append(("span",))
            continue
        outer, inner = rng.sample(WCP_LOCKS, 2)
        nested = rng.random() < 0.5
        ops += [("acq", outer)] + [("span",)] * rng.randint(0, 1)
        if nested:
            ops += [("acq", inner)] + [("span",)] * rng.randint(0, 2) + [("rel", inner)]
        if rng.random() < 0.4 and len(lanes) > 1 and handoffs < 30:
            helper = rng.choice([x for x in lanes if x != lane])
            early = rng.random() < 0.03
            ops += [("send", "queue:a", handoffs), ("recv", "signal:b", handoffs, early)]
            scripts[helper] += [("recv", "queue:a", handoffs, early), ("span",),
                                ("send", "signal:b", handoffs)]  # fmt: skip
            handoffs += 1
        ops += [("span",)] * rng.randint(0, 2) + [("rel", outer)]
        ops += [("span",)] * rng.randint(0, 1)
        if rng.random() < 0.05:
            ops.append(("stray", rng.choice(WCP_LOCKS)))
    b = TraceBuilder()
    holder: dict[str, str] = {}
    sent: set[tuple[str, int]] = set()
    pos = dict.fromkeys(lanes, 0)
    t = 10

    def enabled(lane: str) -> bool:
        if pos[lane] >= len(scripts[lane]):
            return False
        op = scripts[lane][pos[lane]]
        if op[0] == "acq":
            return op[1] not in holder
        if op[0] == "recv":
            return (op[1], op[2]) in sent or op[3]
        return True

    while True:
        ready = [lane for lane in lanes if enabled(lane)]
        if not ready:
            break
        lane = rng.choice(ready)
        op = scripts[lane][pos[lane]]
        pos[lane] += 1
        t += rng.choice((0, 1, 1, 2))
        if op[0] == "span":
            sid = b.span(lane, "s", t, t + rng.randint(0, 2))
            for _ in range(rng.randint(1, 2)):
                b.access(sid, "gpu", rng.randint(0, 3), rng.choice(("read", "write")),
                         rng.choice(LAYERS))  # fmt: skip
            t += rng.randint(0, 2)
        elif op[0] == "acq":
            holder[op[1]] = lane
            b.acquire(op[1], t, lane)
        elif op[0] in ("rel", "stray"):
            holder.pop(op[1], None)
            b.release(op[1], t, lane)
        elif op[0] == "send":
            sent.add((op[1], op[2]))
            b.release(op[1], t, lane, seqs[op[1]][op[2]])
        else:
            b.acquire(op[1], t, lane, seqs[op[1]][op[2]])
    return b.build()
