"""RecordTail follows a live record file across chunks and reads each record once."""

from __future__ import annotations

import multiprocessing as mp

from fdprof.probe import records as R
from fdprof.probe.api import key, name
from fdprof.probe.recorder import CHUNK, open_recorder
from fdprof.probe.tail import RecordTail


def _write(path: str, impl: str, count: int, ready) -> None:
    import os

    os.environ["FDPROF_RECORDER"] = impl
    rec = open_recorder(path, "worker")
    ready.set()
    n, k = name("execute_model", "execute_model"), key("batch.size")
    for i in range(count):
        sid = rec.begin(n)
        rec.set_int(sid, k, i)
        rec.end(sid)
    rec.close()


def test_tail_follows_a_live_file_across_chunks(tmp_path, impl):
    path = tmp_path / "live.rec"
    count = 3 * CHUNK // 80  # three chunks' worth of 80-byte spans
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=_write, args=(str(path), impl, count, ready))
    proc.start()
    assert ready.wait(60)
    tail, values = RecordTail(path), []
    while True:
        alive = proc.is_alive()
        values += [f[3] for k, _, _, f in tail.poll() if k == R.Kind.ATTR_INT]
        if not alive:
            break
    values += [f[3] for k, _, _, f in tail.poll() if k == R.Kind.ATTR_INT]
    proc.join(10)
    tail.close()
    assert tail.header.role == "worker"
    assert values == list(range(count))
    assert path.stat().st_size > 2 * CHUNK
