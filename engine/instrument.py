"""The engine's probe handles (span names, attribute keys, sync objects), made once at import so
the hot path passes small ids. Names follow the conventions in DESIGN.md; the second argument
is the NVTX category, one per kind of work (step, request, swap, execute_model, lock)."""

from fdprof import probe

STEP = probe.name("step", "step")
SCHEDULE = probe.name("schedule", "step")
REQUEST = probe.name("request", "request")
ISSUE_SWAP_TASK = probe.name("issue_swap_task", "swap")
SWAP = probe.name("swap", "swap")
EXECUTE_MODEL = probe.name("execute_model", "execute_model")
LOCK_WAIT = probe.name("lock_wait", "lock")
LOCK_HOLD = probe.name("lock_hold", "lock")

ROLE = probe.key("fd.role")
STEP_ID = probe.key("fd.step")
REQUEST_ID = probe.key("fd.request_id")
GPU_READ = probe.key("kv.gpu_read")
GPU_WRITE = probe.key("kv.gpu_write")
CPU_READ = probe.key("kv.cpu_read")
CPU_WRITE = probe.key("kv.cpu_write")
TASK_ID = probe.key("swap.task_id")
DIRECTION = probe.key("swap.direction")
BLOCKS = probe.key("swap.blocks")
BATCH_SIZE = probe.key("batch.size")
BATCH_TOKENS = probe.key("batch.tokens")
LOCK_HOLDER = probe.key("lock.holder")
MISMATCHES = probe.key("kv.mismatches")

QUEUE_SWAP = probe.obj("queue:swap")
SIGNAL_SWAP_DONE = probe.obj("signal:swap_done")
QUEUE_BATCH = probe.obj("queue:batch")
QUEUE_RESULT = probe.obj("queue:result")
#: the baseline's lock of DP group r is ``lock:kv/dp<r>`` (one flock file per group)
LOCK_KV_PREFIX = "lock:kv/dp"
