"""Three real spawned processes (engine, transfer, worker) recording over real queues, with
observers started beside them as ``fdprof run`` starts its own; and a Prometheus scraper."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
import urllib.request
from pathlib import Path

from fdprof import probe
from fdprof.probe import handles as H
from fdprof.probe.context import trace_id_for

N_REQ = 4
#: per request: request, step, lock_wait, issue_swap_task, swap, execute_model
SPANS = 6 * N_REQ


def _engine(run_dir, to_transfer, to_worker, go) -> None:
    p = probe.configure(probe.ProbeConfig(run_dir=run_dir), "engine")
    go.wait()
    reqs = []
    for r in range(N_REQ):
        sid = p.begin(H.REQUEST)
        reqs.append((sid, p.traceparent(sid, trace_id_for("test", r))))
    for r, (rsid, tp) in enumerate(reqs):
        with p.span(H.STEP) as step:
            with p.span(H.LOCK_WAIT, step) as w:
                p.set_str(w, H.LOCK_HOLDER, "worker")
            with p.span(H.ISSUE_SWAP_TASK, rsid) as issue:
                p.set_str(issue, H.SWAP_DIRECTION, "to_cpu")
                p.release(H.QUEUE_SWAP, r, issue)
                to_transfer.put((r, p.traceparent(issue, trace_id_for("test", r))))
            to_worker.put(tp)
    for rsid, _ in reqs:
        p.end(rsid)
    to_transfer.put(None)
    to_worker.put(None)
    probe.shutdown()


def _transfer(run_dir, inbox, go) -> None:
    p = probe.configure(probe.ProbeConfig(run_dir=run_dir), "transfer")
    go.wait()
    while (msg := inbox.get()) is not None:
        task, tp = msg
        p.acquire(H.QUEUE_SWAP, task)
        with p.span(H.SWAP) as sid:
            p.link_context(sid, tp)
            p.set_str(sid, H.SWAP_DIRECTION, "to_cpu")
            p.set_int(sid, H.SWAP_BLOCKS, 2)
            p.set_ints(sid, H.KV_GPU_READ, [task, task + 10])
            p.set_ints(sid, H.KV_CPU_WRITE, [task])
    os._exit(0)  # leaves without closing: the records are already in the file


def _worker(run_dir, inbox, go) -> None:
    p = probe.configure(probe.ProbeConfig(run_dir=run_dir), "worker")
    go.wait()
    while (tp := inbox.get()) is not None:
        with p.span(H.EXECUTE_MODEL) as sid:
            p.link_context(sid, tp, link=True)
            p.set_int(sid, H.BATCH_SIZE, 3)
            p.set_ints(sid, H.KV_GPU_WRITE, [1, 2, 3])
    probe.shutdown()


def run_processes(run_dir: Path, observers) -> list[dict]:
    """Three real spawned processes; observers start once their pids are known."""
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    to_transfer, to_worker = ctx.Queue(), ctx.Queue()
    procs = {
        "engine": ctx.Process(target=_engine, args=(str(run_dir), to_transfer, to_worker, go)),
        "transfer": ctx.Process(target=_transfer, args=(str(run_dir), to_transfer, go)),
        "worker": ctx.Process(target=_worker, args=(str(run_dir), to_worker, go)),
    }
    for proc in procs.values():
        proc.start()
    infos = [
        {"pid": p.pid, "role": role, "name": role, "dp_rank": 0, "record": f"{role}-0-{p.pid}.rec"}
        for role, p in procs.items()
    ]
    for obs in observers:
        obs.start(run_dir, infos)
    go.set()
    for proc in procs.values():
        proc.join(60)
        assert proc.exitcode == 0
    return infos


def scrape(port: int, accept: str = "text/plain") -> str:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept": accept})
    return urllib.request.urlopen(req, timeout=30).read().decode()


class Scraper(threading.Thread):
    """A scraper polling the endpoint until it goes away; keeps the last text it got."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.last = ""

    def run(self) -> None:
        while True:
            try:
                self.last = scrape(self.port)
            except OSError:
                return
            time.sleep(0.05)
