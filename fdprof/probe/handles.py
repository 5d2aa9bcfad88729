"""The probe handles of fdprof's vocabulary, made once at import from :mod:`fdprof.semconv`
so the hot path passes small ids. Every instrumented engine uses these: ours
(``engine/instrument.py`` re-exports them) and vLLM's through the adapter. The second argument
of each name is its NVTX category, one per kind of work (step, request, swap, execute_model,
lock, kv)."""

from fdprof import semconv as S
from fdprof.probe.api import key, name, obj

STEP = name(S.STEP, S.CATEGORY_STEP)
SCHEDULE = name(S.SCHEDULE, S.CATEGORY_STEP)
REQUEST = name(S.REQUEST, S.CATEGORY_REQUEST)
ISSUE_SWAP_TASK = name(S.ISSUE_SWAP_TASK, S.CATEGORY_SWAP)
SWAP = name(S.SWAP, S.CATEGORY_SWAP)
EXECUTE_MODEL = name(S.EXECUTE_MODEL, S.CATEGORY_EXECUTE_MODEL)
LOCK_WAIT = name(S.LOCK_WAIT, S.CATEGORY_LOCK)
LOCK_HOLD = name(S.LOCK_HOLD, S.CATEGORY_LOCK)
BLOCK_ALLOC = name(S.BLOCK_ALLOC, S.CATEGORY_KV)
BLOCK_FREE = name(S.BLOCK_FREE, S.CATEGORY_KV)
BLOCK_EVICT = name(S.BLOCK_EVICT, S.CATEGORY_KV)
SCHEDULED_REQUEST = name(S.SCHEDULED_REQUEST, S.CATEGORY_STEP)
ADAPTER_ERROR = name(S.ADAPTER_ERROR, S.CATEGORY_STEP)

ROLE = key(S.ROLE)
STEP_ID = key(S.STEP_ID)
REQUEST_ID = key(S.REQUEST_ID)
GPU_READ = key(S.KV_GPU_READ)
GPU_WRITE = key(S.KV_GPU_WRITE)
CPU_READ = key(S.KV_CPU_READ)
CPU_WRITE = key(S.KV_CPU_WRITE)
TASK_ID = key(S.SWAP_TASK_ID)
DIRECTION = key(S.SWAP_DIRECTION)
BLOCKS = key(S.SWAP_BLOCKS)
BATCH_SIZE = key(S.BATCH_SIZE)
BATCH_TOKENS = key(S.BATCH_TOKENS)
LOCK_HOLDER = key(S.LOCK_HOLDER)
MISMATCHES = key(S.KV_MISMATCHES)
KV_BLOCKS = key(S.KV_BLOCKS)
COMPUTED_TOKENS = key(S.COMPUTED_TOKENS)
PROMPT_TOKENS = key(S.PROMPT_TOKENS)
FIRST_TOKEN_NS = key(S.FIRST_TOKEN_NS)
OUTPUT_TOKENS = key(S.OUTPUT_TOKENS)
ERROR = key(S.ERROR)
HOOK = key(S.HOOK)

QUEUE_SWAP = obj(S.QUEUE_SWAP)
SIGNAL_SWAP_DONE = obj(S.SIGNAL_SWAP_DONE)
QUEUE_BATCH = obj(S.QUEUE_BATCH)
QUEUE_RESULT = obj(S.QUEUE_RESULT)
BLOCK_FREE_OBJ = obj(S.BLOCK_FREE_OBJ)
LOCK_KV_PREFIX = S.LOCK_KV_PREFIX
