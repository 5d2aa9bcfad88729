"""The engine's probe handles, made once at import from the vocabulary in :mod:`fdprof.semconv`
so the hot path passes small ids. The second argument of each name is its NVTX category, one
per kind of work (step, request, swap, execute_model, lock)."""

from fdprof import probe
from fdprof import semconv as S

STEP = probe.name(S.STEP, S.CATEGORY_STEP)
SCHEDULE = probe.name(S.SCHEDULE, S.CATEGORY_STEP)
REQUEST = probe.name(S.REQUEST, S.CATEGORY_REQUEST)
ISSUE_SWAP_TASK = probe.name(S.ISSUE_SWAP_TASK, S.CATEGORY_SWAP)
SWAP = probe.name(S.SWAP, S.CATEGORY_SWAP)
EXECUTE_MODEL = probe.name(S.EXECUTE_MODEL, S.CATEGORY_EXECUTE_MODEL)
LOCK_WAIT = probe.name(S.LOCK_WAIT, S.CATEGORY_LOCK)
LOCK_HOLD = probe.name(S.LOCK_HOLD, S.CATEGORY_LOCK)

ROLE = probe.key(S.ROLE)
STEP_ID = probe.key(S.STEP_ID)
REQUEST_ID = probe.key(S.REQUEST_ID)
GPU_READ = probe.key(S.KV_GPU_READ)
GPU_WRITE = probe.key(S.KV_GPU_WRITE)
CPU_READ = probe.key(S.KV_CPU_READ)
CPU_WRITE = probe.key(S.KV_CPU_WRITE)
TASK_ID = probe.key(S.SWAP_TASK_ID)
DIRECTION = probe.key(S.SWAP_DIRECTION)
BLOCKS = probe.key(S.SWAP_BLOCKS)
BATCH_SIZE = probe.key(S.BATCH_SIZE)
BATCH_TOKENS = probe.key(S.BATCH_TOKENS)
LOCK_HOLDER = probe.key(S.LOCK_HOLDER)
MISMATCHES = probe.key(S.KV_MISMATCHES)

QUEUE_SWAP = probe.obj(S.QUEUE_SWAP)
SIGNAL_SWAP_DONE = probe.obj(S.SIGNAL_SWAP_DONE)
QUEUE_BATCH = probe.obj(S.QUEUE_BATCH)
QUEUE_RESULT = probe.obj(S.QUEUE_RESULT)
LOCK_KV_PREFIX = S.LOCK_KV_PREFIX
