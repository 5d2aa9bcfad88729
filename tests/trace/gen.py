"""Hypothesis strategy for random traces in the canonical model (built the way readers build)."""

from __future__ import annotations

from hypothesis import strategies as st

from fdprof.trace.assemble import assemble
from fdprof.trace.attrs import AttrsBuilder
from fdprof.trace.model import Trace

ROLES = ["engine", "cache_manager", "transfer", "worker"]
NAMES = ["step", "schedule", "issue_swap_task", "swap", "execute_model", "lock_wait", "ü nicode"]
OBJS = ["queue:swap", "signal:swap_done", "queue:batch", "lock:kv", "mutex:alloc"]
LANES = ["cuda:0/stream:7", "cuda:1/stream:3"]

blocks = st.lists(st.integers(0, 5000), max_size=6)
plain_values = st.one_of(
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(max_size=8),
    st.booleans(),
    st.lists(st.integers(-100, 100), max_size=3),
)


@st.composite
def traces(draw) -> Trace:
    pids = draw(st.lists(st.integers(1, 4_000_000), min_size=1, max_size=3, unique=True))
    roles = {pid: draw(st.sampled_from(ROLES)) for pid in pids}
    n = draw(st.integers(0, 25))
    ids = draw(st.lists(st.integers(1, 2**62), min_size=n, max_size=n, unique=True))
    spans = {k: [] for k in ("span_id", "parent_id", "name", "start", "end", "pid", "tid")}
    spans |= {"role": [], "trace_id": []}
    attrs: dict[str, tuple[list, list]] = {}

    def attr(sid, key, value):
        ids, values = attrs.setdefault(key, ([], []))
        ids.append(sid)
        values.append(value)

    for i, sid in enumerate(ids):
        pid = draw(st.sampled_from(pids))
        start = draw(st.integers(0, 2**60))
        unended = draw(st.integers(0, 9)) == 0
        spans["span_id"].append(sid)
        spans["parent_id"].append(draw(st.sampled_from([0, *ids[:i]])))
        spans["name"].append(draw(st.sampled_from(NAMES)))
        spans["start"].append(start)
        spans["end"].append(-1 if unended else start + draw(st.integers(0, 10**10)))
        spans["pid"].append(pid)
        spans["tid"].append(draw(st.sampled_from([pid, pid + 1])))
        spans["role"].append(roles[pid])
        spans["trace_id"].append(
            draw(st.one_of(st.none(), st.binary(min_size=16, max_size=16).map(bytes.hex)))
        )
        if draw(st.booleans()):
            attr(sid, "fd.step", draw(st.integers(0, 10**6)))
        if draw(st.integers(0, 4)) == 0:
            attr(sid, "fd.role", draw(st.sampled_from(ROLES)))
        if draw(st.integers(0, 3)) == 0:
            attr(sid, "fd.lane", draw(st.sampled_from(LANES)))
        for key in draw(st.sets(st.sampled_from(["kv.gpu_read", "kv.gpu_write", "kv.cpu_read"]))):
            attr(sid, key, draw(blocks))
        if draw(st.integers(0, 3)) == 0:
            lo = draw(st.integers(0, 30))
            attr(sid, "kv.layers", [lo, lo + draw(st.integers(1, 30))])
        for key, value in draw(
            st.dictionaries(st.sampled_from(["a", "b.c", "swap.task_id"]), plain_values, max_size=2)
        ).items():
            attr(sid, key, value)
    m = draw(st.integers(0, 15))
    syncs = {k: [] for k in ("op", "obj", "seq", "keyed", "time", "pid", "tid", "lane",
                             "span_id")}  # fmt: skip
    for _ in range(m):
        pid = draw(st.sampled_from(pids))
        tid = draw(st.sampled_from([pid, pid + 1]))
        syncs["op"].append(draw(st.sampled_from(["release", "acquire"])))
        syncs["obj"].append(draw(st.sampled_from(OBJS)))
        keyed = draw(st.booleans())  # keyed: any int64 seq, -1 included; else -1
        syncs["keyed"].append(keyed)
        syncs["seq"].append(draw(st.sampled_from([-1, 0, 1, 7, -(2**63), 2**63 - 1]))
                            if keyed else -1)  # fmt: skip
        syncs["time"].append(draw(st.integers(0, 2**60)))
        syncs["pid"].append(pid)
        syncs["tid"].append(tid)
        syncs["lane"].append(draw(st.sampled_from([f"{pid}/{tid}", *LANES])))
        syncs["span_id"].append(draw(st.sampled_from([0, *ids])))
    processes = {
        "pid": pids,
        "role": [roles[p] for p in pids],
        "name": [f"{roles[p]}-{p}" for p in pids],
        "anchored": [True] * len(pids),
        "dp_rank": [draw(st.integers(-1, 3)) for _ in pids],
        "tp_rank": [draw(st.integers(-1, 3)) for _ in pids],
    }
    typed = AttrsBuilder()
    for key, (ids, values) in attrs.items():
        typed.add_values(key, ids, values)
    trace = Trace(meta={"format": "generated"})
    return assemble(trace, spans, typed.build(), syncs, processes)
