"""Small random traces for the property test: lanes interleaved in one global time, with
nested spans, ties, gaps, truncated spans, duplicate seqs and skewed lane clocks."""

from __future__ import annotations

import random

from fdprof.trace.model import Trace

from .builder import TraceBuilder

SEQ_OBJS = ("queue:a", "signal:b")
SEQLESS_OBJS = ("lock:kv", "mutex:m")
LAYERS = ((-1, -1), (0, 1), (1, 2), (0, 2))


def random_trace(seed: int, family: str = "mixed") -> Trace:
    """``mixed``: every object kind, some lanes skewed; ``skewed``: keyed objects only, every
    lane's clock skewed; ``locks``: mostly seq-less objects (time-ordered pairing)."""
    rng = random.Random(seed)
    lanes = [f"{1 + i % 2}/{i + 1}" for i in range(rng.randint(2, 4))]  # threads share pids
    p_skew = {"mixed": 0.3, "skewed": 1.0, "locks": 0.0}[family]
    objs = {"mixed": SEQ_OBJS + SEQLESS_OBJS, "skewed": SEQ_OBJS,
            "locks": SEQLESS_OBJS + SEQLESS_OBJS + SEQ_OBJS[:1]}[family]  # fmt: skip
    skew = {lane: rng.randint(-6, 6) if rng.random() < p_skew else 0 for lane in lanes}
    b = TraceBuilder()
    open_spans: dict[str, list[tuple[int, list]]] = {lane: [] for lane in lanes}
    next_seq = dict.fromkeys(SEQ_OBJS, 0)
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

    for _ in range(rng.randint(1, 24)):
        lane = rng.choice(lanes)
        t += rng.choice((0, 1, 1, 2))
        op = rng.choice(("open", "close", "span", "span", "rel", "rel", "acq", "acq"))
        if op == "open":
            open_spans[lane].append((t, some_accesses()))
        elif op == "close" and open_spans[lane]:
            start, acc = open_spans[lane].pop()
            new_span(lane, start, t, acc)
        elif op == "span":
            new_span(lane, t, t + rng.randint(0, 3), some_accesses())
        elif op in ("rel", "acq"):
            obj = rng.choice(objs)
            if obj in SEQLESS_OBJS:
                seq = -1
            elif op == "rel":
                seq = next_seq[obj] if rng.random() < 0.9 else max(next_seq[obj] - 1, 0)
                next_seq[obj] = seq + 1
            else:
                seq = rng.randint(0, next_seq[obj])
            (b.release if op == "rel" else b.acquire)(obj, t + skew[lane], lane, seq)
    for lane, stack in open_spans.items():
        for start, acc in stack:
            new_span(lane, start, -1 if rng.random() < 0.5 else t + 1, acc)
    return b.build()
