"""A toy engine for the generic A/B's tests: a real process recording through the probe API,
configured from the environment as any engine would (``FDPROF_RUN_DIR``, ``FDPROF_AB_PAIR``).

Each step runs ``execute_model`` writing one KV block per request and sleeping ``--step-ms``;
requests arrive together, get their first token after the first step and finish after
``--tokens`` steps. ``--race`` adds a thread that writes block 0 with no sync edge (a race);
``--empty-steps N`` runs N steps that schedule nothing (``batch.tokens`` 0) after the first, as
vLLM polls its pending transfers; ``--shared-lock`` holds the engine's baseline lock
(FastDeploy's flock on one descriptor) from two threads at once before the steps, which it
does not prevent: a broken lock that orders none of the KV accesses; ``--exit N`` exits with N
after recording; ``--no-probe`` records nothing.
"""

import argparse
import os
import sys
import threading
import time

from fdprof import probe
from fdprof import semconv as S
from fdprof.engine.ipc import KvLock, RunPaths
from fdprof.probe import handles as H

FIRST_TOKEN = probe.key(S.FIRST_TOKEN_NS)
OUTPUT_TOKENS = probe.key(S.OUTPUT_TOKENS)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--step-ms", type=float, default=2.0)
    ap.add_argument("--race", action="store_true")
    ap.add_argument("--empty-steps", type=int, default=0)
    ap.add_argument("--shared-lock", action="store_true")
    ap.add_argument("--exit", type=int, default=0)
    ap.add_argument("--no-probe", action="store_true")
    args = ap.parse_args()
    if args.no_probe:
        return args.exit
    pair = int(os.environ.get("FDPROF_AB_PAIR", "0"))
    p = probe.configure_from_env(S.ROLE_ENGINE)
    requests = []
    for i in range(args.requests):
        sid = p.begin(H.REQUEST)
        p.set_int(sid, H.REQUEST_ID, pair * 1000 + i)
        requests.append(sid)
    if args.race:
        racer = threading.Thread(target=write_block_0, args=(p,))
        racer.start()
    if args.shared_lock:
        hold_from_two_threads(pair)
    step = 0
    for token in range(1, args.tokens + 1):
        step += 1
        with p.span(H.STEP) as step_sid:
            p.set_int(step_sid, H.STEP_ID, step)
            p.set_int(step_sid, H.BATCH_TOKENS, len(requests))
            with p.span(H.EXECUTE_MODEL, step_sid) as sid:
                p.set_int(sid, H.STEP_ID, step)
                p.set_ints(sid, H.KV_GPU_WRITE, list(range(len(requests))))
                time.sleep(args.step_ms / 1000)
        if token == 1:
            for sid in requests:
                p.set_int(sid, FIRST_TOKEN, time.time_ns())
            for _ in range(args.empty_steps):
                step += 1
                with p.span(H.STEP) as step_sid:
                    p.set_int(step_sid, H.STEP_ID, step)
                    p.set_int(step_sid, H.BATCH_TOKENS, 0)
    for sid in requests:
        p.set_int(sid, OUTPUT_TOKENS, args.tokens)
        p.end(sid)
    if args.race:
        racer.join()
    probe.shutdown()
    return args.exit


def hold_from_two_threads(pair: int) -> None:
    """The engine's baseline lock held by this thread and, meanwhile, by a second one: one
    descriptor shared by both, so the second gets in at once (``fdprof.engine.ipc.KvLock``)."""
    paths = RunPaths(f"fdprof-toy-{os.getpid()}-{pair}")
    lock = KvLock(paths, 0, S.ROLE_CACHE_MANAGER)
    inside, done = threading.Event(), threading.Event()

    def second() -> None:
        probe.get().name_thread("eviction")
        inside.wait(10)
        with lock.held():
            done.set()

    other = threading.Thread(target=second)
    other.start()
    try:
        with lock.held():
            inside.set()
            if not done.wait(10):
                raise SystemExit("the shared descriptor did not let the second thread in")
    finally:
        other.join(10)
        lock.close()
        for leftover in paths.leftovers():
            leftover.unlink()


def write_block_0(p) -> None:
    p.name_thread("racer")
    with p.span(H.EXECUTE_MODEL) as sid:
        p.set_ints(sid, H.KV_GPU_WRITE, [0])
        time.sleep(0.001)


if __name__ == "__main__":
    sys.exit(main())
