"""The Chrome reader's C fast path reads a trace exactly as its Python path does: every table,
every attribute column (kind, span ids, values), the warnings; on the realistic benchmark shape,
on crafted events with every value kind the scanner reads (and some it must leave to Python),
on numbers at the edges of exact microsecond-to-nanosecond conversion, and on fdprof's own
Chrome export of every reference trace."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fdprof.errors import FdprofError
from fdprof.trace import chromescan, load, save
from fdprof.trace.model import SCHEMAS

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(chromescan._c is None, reason="the C scanner is not built")


def _read(path: Path):
    """The trace, or the one line a bad one is refused with."""
    try:
        return load(path)
    except FdprofError as exc:
        return str(exc)


def _both(path: Path, monkeypatch, scanned: list | None = None):
    """The trace read with the scanner and without; ``scanned`` collects whether each piece
    offered to the scanner was read by it."""
    feed = chromescan.Scanner.feed

    def counting(self, piece):
        took = feed(self, piece)
        if scanned is not None and self._c is not None:
            scanned.append(took)
        return took

    monkeypatch.setattr(chromescan.Scanner, "feed", counting)
    fast = _read(path)
    monkeypatch.setattr(chromescan, "_c", None)
    slow = _read(path)
    monkeypatch.undo()
    return fast, slow


def assert_same(fast, slow) -> None:
    if isinstance(fast, str) or isinstance(slow, str):
        assert fast == slow
        return
    for table in SCHEMAS:
        pd.testing.assert_frame_equal(getattr(fast, table), getattr(slow, table), obj=table)
    assert fast.attrs.keys() == slow.attrs.keys()
    for key in fast.attrs:
        a, b = fast.attrs.column(key), slow.attrs.column(key)
        assert a.kind == b.kind, key
        assert np.array_equal(a.span_id, b.span_id), key
        assert a.values.type == b.values.type and a.values.equals(b.values), key
    assert fast.attrs.too_wide == slow.attrs.too_wide
    assert fast.meta == slow.meta or {k: v for k, v in fast.meta.items() if k != "counters"} == {
        k: v for k, v in slow.meta.items() if k != "counters"
    }


def _write(tmp_path: Path, events: list[dict], name: str = "trace.json") -> Path:
    """One event per line, as writers lay them out (the scanner reads such pieces);
    ``"__HUGE__"`` stands for a number past a double's range (no Python float writes one)."""
    path = tmp_path / name
    lines = ",\n".join(json.dumps(e) for e in events).replace('"__HUGE__"', "1e400")
    path.write_text('{"traceEvents": [\n' + lines + "\n]}\n")
    return path


def test_the_benchmark_shape_reads_the_same(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "bench"))
    from hazards_shape import Shape, generate, write_chrome

    path = tmp_path / "shape.json"
    write_chrome(generate(Shape(30_000, seed=3)), path)
    fast, slow = _both(path, monkeypatch)
    assert len(fast.spans) > 20_000 and len(fast.syncs) > 2_000
    assert_same(fast, slow)


NUMBERS = ["0", "1", "-1", "0.0005", "0.0015", "0.0025", "-0.0005", "-0.0015", "1.0004999",
           "1.0005000", "1.00050001", "123.4565", "123.4575", "99999.9995", "0.000",
           "1700000000000000.123", "1700000000000000.1234", "1700000000000000.1235",
           "1700000000000000.1245", "9223372036854775.807", "9223372036854775.8075",
           "-9223372036854775.808", "12345678901234567890123456.78", "1.5e3", "2E-3"]  # fmt: skip


def _number_events(texts: list[str]) -> str:
    rows = []
    for i, text in enumerate(texts):
        rows.append(f'{{"ph":"X","name":"n{i}","pid":1,"tid":1,"ts":{text},"dur":{text},'
                    f'"args":{{"x":{text}}}}}')  # fmt: skip
        rows.append(
            f'{{"ph":"i","s":"t","pid":1,"tid":2,"ts":{text},'
            f'"args":{{"sync.op":"release","sync.obj":"queue:q","sync.seq":{i}}}}}'
        )
    return '{"traceEvents": [\n' + ",\n".join(rows) + "\n]}\n"


@pytest.mark.parametrize("text", NUMBERS)
def test_timestamps_convert_exactly(tmp_path, monkeypatch, text):
    # alone in a trace (so a number the scanner declines takes Python's path for its piece)
    path = tmp_path / "n.json"
    path.write_text(_number_events([text, "5"]))
    assert_same(*_both(path, monkeypatch))


def test_numbers_together_read_the_same(tmp_path, monkeypatch):
    path = tmp_path / "n.json"
    path.write_text(_number_events([t for t in NUMBERS if "e" not in t.lower()]))
    assert_same(*_both(path, monkeypatch))


#: values the scanner reads, and values it leaves to the Python path (JSON-kind attributes)
READ = [0, -7, 2**63 - 1, -(2**63), 1.5, -0.25, 1e-7, "", "kv", "é\u2603\n\"q\"\\/",
        "\ud83d\ude00", True, False, [], [1, 2, 3], [-(2**63)], ["a", "b"], ["é"]]  # fmt: skip
LEFT = [None, {"nested": 1}, [1, "a"], 2**64, [[1]], [True], "__HUGE__"]


def _random_events(rng: random.Random, n: int, readable: bool) -> list[dict]:
    """Spans and sync instants; ``readable``: only what the scanner reads, else now and then
    a value, category or event it leaves to the Python path."""
    values = READ if readable else READ + LEFT
    cats = ["cpu_op", "", None] + ([] if readable else ["kernel"])
    events = []
    for i in range(n):
        ts = rng.choice([i, i + 0.5, i * 1000 + 0.123, -i])
        if rng.random() < 0.8:
            args = {rng.choice(["a", "b", "c"]): rng.choice(values)
                    for _ in range(rng.randint(0, 3))}  # fmt: skip
            if rng.random() < 0.3:  # the conventions' keys, with values they mean something by
                args |= {"kv.gpu_read": [rng.randint(0, 9)], "fd.step": rng.randint(0, 3),
                         "fd.role": rng.choice(["engine", "worker"])}  # fmt: skip
            if rng.random() < 0.2:
                args["fd.span_id"] = rng.choice([1000 + i, None])
            if rng.random() < 0.1:
                args["fd.tid"] = rng.choice([7, None])
            if rng.random() < 0.1:
                args["fd.span_lane"] = rng.choice(["", "1/cuda:0/stream:7", None])
            if rng.random() < 0.1:
                args["fd.trace_id"] = rng.choice(["abc", None])
            ev = {"ph": "X", "name": rng.choice(["a", "b", "ü"]), "ts": ts,
                  "dur": rng.choice([1, 0, 2.5, None]), "args": args}  # fmt: skip
            if rng.random() < 0.7:
                ev["pid"], ev["tid"] = rng.choice([1, 2]), rng.choice([1, 2, 3])
            if rng.random() < 0.3:
                ev["cat"] = rng.choice(cats)
        else:
            args = {"sync.op": rng.choice(["release", "acquire"]),
                    "sync.obj": rng.choice(["lock:a", "queue:b"])}  # fmt: skip
            if rng.random() < 0.5:
                args["sync.seq"] = rng.randint(-3, 3)
            if rng.random() < 0.2:
                args["fd.tid"] = rng.choice([5, None])
            if rng.random() < 0.2:
                args["fd.lane"] = rng.choice(["1/9", ""])
            if rng.random() < 0.2:
                args["sync.span"] = 1000 + i
            ev = {"ph": rng.choice("iInR"), "s": "t", "pid": 1, "tid": rng.choice([1, 2]),
                  "ts": ts, "args": args}  # fmt: skip
        events.append(ev)
    if not readable:  # an event only the Python path reads, amid the others
        events.insert(len(events) // 2, {"ph": "B", "name": "open", "pid": 1, "tid": 1, "ts": 3})
    return events


@pytest.mark.parametrize("seed", range(16))
def test_random_events_read_the_same(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    readable = seed % 2 == 1
    events = _random_events(rng, rng.choice([50, 400, 6000]), readable)
    scanned: list[bool] = []
    assert_same(*_both(_write(tmp_path, events), monkeypatch, scanned))
    assert all(scanned) if readable else not all(scanned)


@pytest.mark.parametrize("name", ["baseline", "lockless", "fault-no-wait-swap-in"])
def test_fdprofs_own_export_reads_the_same(tmp_path, monkeypatch, name):
    source = ROOT / "traces" / name
    if not source.exists():
        pytest.skip(f"no reference trace {name}")
    path = tmp_path / f"{name}.json"
    save(load(source), path)
    assert_same(*_both(path, monkeypatch))
