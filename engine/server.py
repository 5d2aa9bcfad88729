"""The engine process: the scheduler thread and the cache manager's swap-out thread."""

from __future__ import annotations

from engine.cache_manager import CacheManager
from engine.ipc import Stopped
from engine.process import ProcessContext
from engine.scheduler import Scheduler
from engine.workloads import make_requests


def serve(ctx: ProcessContext) -> dict:
    control = ctx.control
    cache = CacheManager(ctx.cfg, ctx.rank, ctx.paths, ctx.swap_q, control)
    sched = Scheduler(
        ctx.cfg,
        ctx.rank,
        make_requests(ctx.cfg, ctx.rank),
        cache,
        ctx.batch_q,
        ctx.result_q,
        control,
    )
    ctx.report("ready", "engine")
    while not ctx.go.wait(0.1):
        if control.stopping:
            raise Stopped
    cache.start()
    try:
        sched.run()
    finally:
        cache.stop()
    ctx.batch_q.put(None)
    ctx.swap_q.put(None)
    return {
        "steps": sched.steps,
        "step_ns": sched.step_ns,
        "generated_tokens": sched.generated,
        "requests": sched.finished,
        "swaps": cache.stats.as_dict(),
    }
