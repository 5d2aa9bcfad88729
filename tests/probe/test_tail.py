"""RecordTail follows a live record file across chunks and reads each record once, whole."""

from __future__ import annotations

import multiprocessing as mp

from fdprof.formats import records as R
from fdprof.formats.tail import RecordTail
from fdprof.probe.api import key, name
from fdprof.probe.sdk.recorder import CHUNK, open_recorder


def _write(path: str, impl: str, count: int, ready) -> None:
    import os

    os.environ["FDPROF_RECORDER"] = impl
    rec = open_recorder(path, "worker")
    ready.set()
    n, k, blocks = name("execute_model", "execute_model"), key("batch.size"), key("kv.gpu_read")
    for i in range(count):
        sid = rec.begin(n)
        rec.set_int(sid, k, i)
        rec.set_ints(sid, blocks, [i, i + 1])
        rec.end(sid)
    rec.close()


def test_tail_follows_a_live_file_across_chunks(tmp_path, impl):
    path = tmp_path / "live.rec"
    count = 3 * CHUNK // 120  # three chunks' worth of ~120-byte spans
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_write, args=(str(path), impl, count, ready))
    proc.start()
    assert ready.wait(60)
    tail, values, lists = RecordTail(path), [], []

    def drain() -> None:
        for kind, _flags, _tid, fields in tail.poll():
            if kind == R.Kind.ATTR_INT:
                values.append(fields[3])
            elif kind == R.Kind.ATTR_INTS:  # variable length: a torn one would show here
                lists.append(fields[2])

    while True:
        alive = proc.is_alive()
        drain()
        if not alive:
            break
    drain()
    proc.join(10)
    tail.close()
    assert tail.header.role == "worker"
    assert values == list(range(count))
    assert lists == [[i, i + 1] for i in range(count)]
    assert path.stat().st_size > 2 * CHUNK
