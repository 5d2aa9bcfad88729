"""fdprof's vocabulary: span names, attribute keys, sync objects and roles, the engine's modes
and faults, defined once.

Every layer speaks these names: the probe's handles (``fdprof/probe/handles.py``), the
vLLM adapter, the readers (``fdprof.trace``), the analyses, the reports, the dashboards and the
OpenTelemetry export. Nothing else spells ``"execute_model"`` or ``"kv.gpu_read"``; a rename
here is a rename everywhere (as ``fdprof.metric_names`` is for metrics, ``fdprof.settings``
for environment variables; ``tests/test_vocabulary.py`` fails on a value spelled elsewhere).
Plain strings, string enums where a value is one of a closed set (``StrEnum``: a member *is*
its string, on the wire and in JSON), and the functions that build lane names; no imports
of fdprof: any module may depend on this one. What each name means is in docs/trace.md.
"""

from __future__ import annotations

from enum import StrEnum

# -- span names -----------------------------------------------------------------------------
#: one scheduler iteration of an engine (a step of continuous batching)
STEP = "step"
#: choosing the next batch, inside a step
SCHEDULE = "schedule"
#: one request, from arrival to its last token
REQUEST = "request"
#: the cache manager handing a swap to the transfer process (and, when synchronous, waiting)
ISSUE_SWAP_TASK = "issue_swap_task"
#: the transfer process copying KV blocks between the device and the host pool
SWAP = "swap"
#: the worker running the model on a batch
EXECUTE_MODEL = "execute_model"
#: waiting for, and holding, the baseline's inter-process KV lock
LOCK_WAIT = "lock_wait"
LOCK_HOLD = "lock_hold"
#: a KV block pool handing out, freeing (to the free queue) or evicting (from the prefix
#: cache) device blocks; ``kv.blocks`` lists them (no data is touched: not KV accesses)
BLOCK_ALLOC = "block_alloc"
BLOCK_FREE = "block_free"
BLOCK_EVICT = "block_evict"
#: a request taking a reference to device blocks (its block table gains them: blocks handed
#: to it, or cached blocks it hits), and dropping its references (it finished or was
#: preempted); ``fd.request_id`` says whose, ``kv.gpu_hold``/``kv.gpu_release`` which blocks:
#: the holders the ownership analysis checks the pool's hand-outs and frees against
BLOCK_HOLD = "block_hold"
BLOCK_RELEASE = "block_release"
#: a worker waiting for transfer jobs to complete (``swap.unsubmitted``: jobs it waited on that
#: it never submitted, which give no completion edge)
SWAP_WAIT = "swap_wait"
#: one request of a step's batch, inside ``schedule``: its id, block ids and token counts
SCHEDULED_REQUEST = "scheduled_request"
#: an instrumentation hook that failed inside an engine (counted; the engine went on)
ADAPTER_ERROR = "fdprof.adapter_error"

#: device-stream markers (``fdprof/probe/sdk/device.py``): an event's record executing on its
#: stream, and a stream stopped until an event it waits on completed
DEVICE_EVENT_RECORD = "device.event_record"
DEVICE_EVENT_WAIT = "device.event_wait"
DEVICE_MARKER_SPANS = (DEVICE_EVENT_RECORD, DEVICE_EVENT_WAIT)

#: device work (spans on device lanes): the worker's forward pass on its compute stream, and a
#: swap's copies on the transfer's copy stream
FORWARD = "forward"
SWAP_COPY = "swap_copy"
#: the transfer's host copy of a swap-in's blocks into its staging buffer, before the device
#: copy out of it (``--device-async``)
SWAP_STAGE = "swap_stage"

#: Cache Manager V1's worker (docs/engine.md): one layer of the forward pass, begun once the
#: layer's swap-in event has been waited for, with that layer's KV accesses (``kv.layers``);
#: and the reads of whole blocks after the last layer (fingerprint checks, NaN/Inf counts)
FORWARD_LAYER = "forward_layer"
KV_CHECK = "kv_check"

#: spans whose time is compute, swapping, or the lock, as the analyses group them
COMPUTE_SPANS = (EXECUTE_MODEL,)
SWAP_SPANS = (SWAP,)
SWAP_BLOCKING_SPANS = (ISSUE_SWAP_TASK,)
LOCK_SPANS = (LOCK_WAIT, LOCK_HOLD)
#: the same on device lanes (an Nsight projection of a range keeps the range's name)
DEVICE_COMPUTE_SPANS = (FORWARD, EXECUTE_MODEL)
DEVICE_SWAP_SPANS = (SWAP_COPY, SWAP)

# -- NVTX categories (one per kind of work) ------------------------------------------------
CATEGORY_STEP = "step"
CATEGORY_REQUEST = "request"
CATEGORY_SWAP = "swap"
CATEGORY_EXECUTE_MODEL = "execute_model"
CATEGORY_LOCK = "lock"
CATEGORY_KV = "kv"
CATEGORY_DEVICE = "device"
#: the category of the NVTX marks sync events are (``release queue:swap``, payload: the seq)
CATEGORY_SYNC = "sync"

# -- roles (``fd.role``) -----------------------------------------------------------------
ROLE_ENGINE = "engine"
ROLE_CACHE_MANAGER = "cache_manager"
ROLE_TRANSFER = "transfer"
ROLE_WORKER = "worker"
#: vLLM's main process (the ``LLM`` or API server: tokenizer, detokenizer, requests)
ROLE_FRONTEND = "frontend"
ROLES = (ROLE_ENGINE, ROLE_CACHE_MANAGER, ROLE_TRANSFER, ROLE_WORKER, ROLE_FRONTEND)

# -- span attributes -----------------------------------------------------------------------
ROLE = "fd.role"
STEP_ID = "fd.step"
LANE = "fd.lane"
REQUEST_ID = "fd.request_id"
#: W3C traceparents of a span's links (a step span linking the requests it served)
LINKS = "fd.links"
#: attributes foreign readers keep from their source: a Chrome event's ``cat``; an nsys
#: record's kind of device work (``kernel``, ``memcpy``, ``memset``), its columns under
#: ``cuda.<column>`` (``cuda.correlationId``, ``cuda.demangled_name``, ...)
CHROME_CATEGORY = "chrome.cat"
CUDA_PREFIX = "cuda."
CUDA_KIND = CUDA_PREFIX + "kind"
CUDA_DEMANGLED_NAME = CUDA_PREFIX + "demangled_name"
CUDA_CORRELATION_ID = CUDA_PREFIX + "correlationId"
#: block ids a span reads or writes in the device (gpu) or host (cpu) pool
KV_GPU_READ = "kv.gpu_read"
KV_GPU_WRITE = "kv.gpu_write"
KV_CPU_READ = "kv.cpu_read"
KV_CPU_WRITE = "kv.cpu_write"
#: ``[lo, hi)``: the layers a span's block accesses cover (absent: all layers)
KV_LAYERS = "kv.layers"
#: blocks whose content did not match the fingerprint they were written with
KV_MISMATCHES = "kv.mismatches"
#: block ids an allocator span hands out (alloc) or takes back (free) in a pool: the block's
#: lifetimes, which the hazards analysis checks every access against (an access ordered after
#: the free that ended its block's lifetime, or unordered with it, is a lifetime violation)
KV_GPU_ALLOC = "kv.gpu_alloc"
KV_GPU_FREE = "kv.gpu_free"
KV_CPU_ALLOC = "kv.cpu_alloc"
KV_CPU_FREE = "kv.cpu_free"
POOL_GPU, POOL_CPU = "gpu", "cpu"
MODE_READ, MODE_WRITE = "read", "write"
#: the modes of allocator events in the accesses table (not accesses: they never race)
MODE_ALLOC, MODE_FREE = "alloc", "free"
LIFETIME_MODES = (MODE_ALLOC, MODE_FREE)
#: ownership events (docs/trace.md "Ownership events"), on the allocator's spans: a request
#: takes a reference (``kv.gpu_hold``) or drops it (``kv.gpu_release``), both with
#: ``fd.request_id``; the pool's own reference count of a block reached 0 while its content
#: stays cached, revivable by a prefix hit until the block is handed out again
#: (``kv.gpu_unref``), or fell below 0 (``kv.gpu_underflow``)
KV_GPU_HOLD = "kv.gpu_hold"
KV_GPU_RELEASE = "kv.gpu_release"
KV_GPU_UNREF = "kv.gpu_unref"
KV_GPU_UNDERFLOW = "kv.gpu_underflow"
KV_CPU_HOLD = "kv.cpu_hold"
KV_CPU_RELEASE = "kv.cpu_release"
KV_CPU_UNREF = "kv.cpu_unref"
KV_CPU_UNDERFLOW = "kv.cpu_underflow"
MODE_HOLD, MODE_RELEASE = "hold", "release"
MODE_UNREF, MODE_UNDERFLOW = "unref", "underflow"
OWNERSHIP_MODES = (MODE_HOLD, MODE_RELEASE, MODE_UNREF, MODE_UNDERFLOW)
#: every mode an allocator's event has in the accesses table (none of them is an access)
ALLOCATOR_MODES = LIFETIME_MODES + OWNERSHIP_MODES
#: attribute key -> (pool, mode) of the accesses (and allocator events) it lists
KV_ACCESS_KEYS: dict[str, tuple[str, str]] = {
    KV_GPU_READ: (POOL_GPU, MODE_READ),
    KV_GPU_WRITE: (POOL_GPU, MODE_WRITE),
    KV_CPU_READ: (POOL_CPU, MODE_READ),
    KV_CPU_WRITE: (POOL_CPU, MODE_WRITE),
    KV_GPU_ALLOC: (POOL_GPU, MODE_ALLOC),
    KV_GPU_FREE: (POOL_GPU, MODE_FREE),
    KV_CPU_ALLOC: (POOL_CPU, MODE_ALLOC),
    KV_CPU_FREE: (POOL_CPU, MODE_FREE),
    KV_GPU_HOLD: (POOL_GPU, MODE_HOLD),
    KV_GPU_RELEASE: (POOL_GPU, MODE_RELEASE),
    KV_GPU_UNREF: (POOL_GPU, MODE_UNREF),
    KV_GPU_UNDERFLOW: (POOL_GPU, MODE_UNDERFLOW),
    KV_CPU_HOLD: (POOL_CPU, MODE_HOLD),
    KV_CPU_RELEASE: (POOL_CPU, MODE_RELEASE),
    KV_CPU_UNREF: (POOL_CPU, MODE_UNREF),
    KV_CPU_UNDERFLOW: (POOL_CPU, MODE_UNDERFLOW),
}
SWAP_TASK_ID = "swap.task_id"
SWAP_DIRECTION = "swap.direction"
SWAP_BLOCKS = "swap.blocks"
#: on ``swap_wait``: job ids the worker waited on without having submitted them
SWAP_UNSUBMITTED = "swap.unsubmitted"
#: swap directions (``swap.direction``)
TO_CPU, TO_GPU = "to_cpu", "to_gpu"
BATCH_SIZE = "batch.size"
#: tokens a step processed (prefill + decode): the analyses' throughput counts these
BATCH_TOKENS = "batch.tokens"
LOCK_HOLDER = "lock.holder"
#: block ids a block-pool span handed out, freed or evicted
KV_BLOCKS = "kv.blocks"
#: a request's tokens already in the KV cache before this step, and in its prompt
COMPUTED_TOKENS = "request.computed_tokens"
PROMPT_TOKENS = "request.prompt_tokens"
#: on ``request`` spans: when the request's first output token was ready (int, ns on the run
#: timebase): time to first token and time per output token come from it
FIRST_TOKEN_NS = "fd.first_token_ns"
#: on ``request`` spans: output tokens the request generated (time per output token)
OUTPUT_TOKENS = "request.output_tokens"
#: what an adapter hook raised (``fdprof.adapter_error`` spans), and the hook
ERROR = "fd.error"
HOOK = "fd.hook"
#: on a span projecting an NVTX range onto a device lane (Nsight exports): how many kernels,
#: memcpys and memsets launched inside the range ran there
NVTX_GPU_OPS = "nvtx.gpu_ops"

# -- sync events (``sync.*`` where a format carries them as attributes) --------------------
SYNC_OP = "sync.op"
SYNC_OBJ = "sync.obj"
SYNC_SEQ = "sync.seq"


class SyncOp(StrEnum):
    """A sync event's op (``sync.op``): a release publishes everything its thread did so far on
    the object; an acquire has observed a release of it."""

    RELEASE = "release"
    ACQUIRE = "acquire"


# -- sync objects ------------------------------------------------------------------------
QUEUE_SWAP = "queue:swap"
QUEUE_BATCH = "queue:batch"
QUEUE_RESULT = "queue:result"
SIGNAL_SWAP_DONE = "signal:swap_done"
#: the baseline's lock of DP group r is ``lock:kv/dp<r>`` (one flock file per group)
LOCK_KV_PREFIX = "lock:kv/dp"
#: glob of every lock object (the what-if drops their edges)
LOCK_OBJECTS = "lock:*"
#: in-process mutexes are ``mutex:<name>``, scoped by process
MUTEX_PREFIX = "mutex:"
#: device streams: ``launch:<lane>`` (seq: the stream's launch count) pairs a launch on the
#: host with its execution; ``event:<pid>/<n>`` (seq: the event's record count) an event's
#: record with the waits on it
DEVICE_LAUNCH_PREFIX = "launch:"
DEVICE_EVENT_PREFIX = "event:"
#: the asynchronous engine's cross-process events (``event:<name>``, seq: the generation):
#: a worker's forward done (generation: the step's sequence number) and a transfer's swap-in
#: copied (generation: the task id), one of each per DP group and TP rank
COMPUTE_DONE_EVENT = "compute"
SWAP_IN_EVENT = "swap_in"


def layer_loaded_event(layer: int) -> str:
    """The kind of Cache Manager V1's per-layer swap-in event: recorded on the transfer's input
    stream after a load's copy of ``layer`` (generation: the load's task id), waited for by the
    worker before that layer's attention (``event:swap_in.layer<l>/dp<r>/tp<t>``)."""
    return f"{SWAP_IN_EVENT}.layer{layer}"


def engine_event(kind: str, dp_rank: int, tp_rank: int) -> str:
    """The name of one of the asynchronous engine's shared events (its object is
    ``event:<name>``)."""
    return f"{kind}/dp{dp_rank}/tp{tp_rank}"


#: an Nsight export's host wait on a device lane: ``cuda:sync/<lane>`` (seq: the waiting API
#: call's correlation id)
CUDA_SYNC_PREFIX = "cuda:sync/"
#: a device block's free and its next allocation (seq: the pool's count of free calls)
BLOCK_FREE_OBJ = "block:free"
#: collectives between workers (all-reduce, all-to-all ...): ``collective:<group>/rank<r>``,
#: released by member r on entry and acquired by every other member on exit, keyed by the
#: group's collective count; global objects (a group spans DP groups and processes)
COLLECTIVE_PREFIX = "collective:"


def collective_obj(group: str, rank: int) -> str:
    """The sync object member ``rank`` of collective group ``group`` releases."""
    return f"{COLLECTIVE_PREFIX}{group}/rank{rank}"


# -- process (resource) attributes -------------------------------------------------------
DP_RANK = "fd.dp_rank"
#: the run's :class:`LockMode`
KV_LOCK = "fd.kv_lock"
WORKLOAD = "fd.workload"
TP_RANK = "fd.tp_rank"


# -- the engine's modes and faults (``fdprof run`` flags, run.json's config, ``fd.kv_lock``);
#    what each does is the engine's (fdprof/engine/, docs/engine.md). A new one is one line. --
class LockMode(StrEnum):
    """The inter-process KV lock (``--kv-lock``): the baseline as FastDeploy ran it, one
    descriptor shared by the cache manager's threads, so they do not exclude each other
    (``ipc``); the corrected lock, a descriptor per thread (``ipc-per-thread``); lockless."""

    IPC = "ipc"
    IPC_PER_THREAD = "ipc-per-thread"
    NONE = "none"

    @property
    def locked(self) -> bool:
        return self is not LockMode.NONE


class SwapIn(StrEnum):
    """How admission waits for a request's swap-in (``--swap-in``): blocked until it is copied
    (FastDeploy's ``is_sync=True``), or in its own state while the others run."""

    SYNC = "sync"
    ASYNC = "async"


class CacheManagerMode(StrEnum):
    """The cache manager's design (``--cache-manager``): ``old`` is the path the lock A/B
    studies (FastDeploy's before Cache Manager V1), whole-block swaps whose completion is
    awaited; ``v1`` is Cache Manager V1 (FastDeploy PR #7097): swap-ins layer by layer on an
    input stream with an event per layer, swap-outs on an output stream without a host wait."""

    OLD = "old"
    V1 = "v1"


class Fault(StrEnum):
    """The engine's seeded faults (``--fault``), each the mechanism of a bug engines shipped
    (cited in docs/engine.md); what one needs besides is ``fdprof.engine.config``'s."""

    #: admission does not wait for a request's swap-in
    NO_WAIT_SWAP_IN = "no-wait-swap-in"
    #: a block is freed before its swap-out has copied it
    FREE_BEFORE_SWAP_OUT = "free-before-swap-out"
    #: the transfer acknowledges a swap before copying it
    ACK_BEFORE_COPY = "ack-before-copy"
    #: the asynchronous engine's (``--device-async``): vLLM #45704, a store copies blocks the
    #: compute stream is still writing; LMCache PR #2671, a swap-in written on a stream of its
    #: own; TensorRT-LLM PR #15546, the staging buffer refilled while a copy out of it runs
    STORE_BEFORE_COMPUTE_DONE = "store-before-compute-done"
    FOREIGN_STREAM_WRITE = "foreign-stream-write"
    REUSE_STAGING_BUFFER = "reuse-staging-buffer"
    #: Cache Manager V1's (``--cache-manager v1``): FastDeploy PR #7097's per-layer wait off by
    #: one; SGLang PR #36738, a load back not fenced behind the forward; SGLang #20611, a
    #: write-back racing the kernel that fills the blocks; LMCache PR #2706, a load placed from
    #: the transfer chunk's boundary into a shared prefix block
    V1_WRONG_LAYER_EVENT = "v1-wrong-layer-event"
    LOAD_BACK_UNFENCED = "load-back-unfenced"
    COMPUTE_RACES_STORE = "compute-races-store"
    SHARED_PREFIX_STREAMS = "shared-prefix-streams"
    #: the ownership faults (who holds a block, not the order of copies): a prefix hit takes
    #: no reference, so eviction frees, and the allocator hands out again, a block a running
    #: request holds
    LOST_REF_ON_HIT = "lost-ref-on-hit"
    #: a swap-in's host blocks go back to the host allocator when it is issued, not once it
    #: has copied them: an eviction may overwrite them while the swap-in still reads them
    FREE_UNDER_SWAP_IN = "free-under-swap-in"


# -- lanes (where program order holds; docs/trace.md "Lanes") ---------------------------------
#: device kinds of device lanes: CUDA streams, and the engine's CPU stream twin
DEVICE_CUDA, DEVICE_CPU = "cuda", "cpu"
DEVICE_KINDS = (DEVICE_CUDA, DEVICE_CPU)
#: a device lane, scoped or not: ``[<pid>/]<kind>:<device>/stream:<stream>``
DEVICE_LANE_PATTERN = r"^(?:-?\d+/)?(?:cuda|cpu):[^/]*/stream:"


def device_lane(pid: int, kind: str, device: int | str, stream: int | str) -> str:
    """The lane of a device stream, scoped by the process that owns it: stream ids are per
    process (and per device), so two processes' stream 7 are two lanes."""
    return f"{pid}/{kind}:{device}/stream:{stream}"


def async_lane(pid: int, ident: str) -> str:
    """The lane of an async (``b``/``e``) slice id of one process."""
    return f"{pid}/async:{ident}"


def scoped_lane(pid: int, lane: str) -> str:
    """``lane`` scoped by ``pid`` if it is a device lane without a process (``cuda:0/stream:7``
    as an ``fd.lane`` written by hand or by an older fdprof); any other lane as it is."""
    kind, sep, _ = lane.partition(":")
    if sep and kind in DEVICE_KINDS and "/stream:" in lane:
        return f"{pid}/{lane}"
    return lane


# -- markers fdprof's writers put in the files they write, for what a format has no field for,
#    so fdprof's readers restore the model exactly (Chrome/Perfetto args, OTLP attributes) ---
#: a span's own ids and its thread where the Chrome writer draws it on another track
SPAN_ID = "fd.span_id"
PARENT_ID = "fd.parent_id"
TRACE_ID = "fd.trace_id"
TRUE_TID = "fd.tid"
#: a span's lane and role where the writer could not leave them to a thread or an attribute
SPAN_LANE = "fd.span_lane"
SPAN_ROLE = "fd.span_role"
#: the span a sync event belongs to, where it is carried by another (a Chrome instant, the
#: OTLP carrier span)
SYNC_SPAN = "sync.span"
#: the category of the flow arrows the Chrome writer draws for sync edges (the instants carry
#: the edges), and the prefix of the sync objects a foreign trace's flows become
#: (``flow:<cat>``)
SYNC_FLOW_CATEGORY = "fd.sync"
FLOW_OBJ_PREFIX = "flow:"
#: process metadata: the process's name, and whether its clock was anchored to the epoch
PROCESS_NAME = "fd.process_name"
ANCHORED = "fd.anchored"
#: OTLP: a span that never ended, a trace id the writer derived, and the zero-length span per
#: process (named ``fdprof.syncs``) that carries the sync events of no span
UNENDED = "fd.unended"
SYNTHETIC_TRACE = "fd.synthetic_trace"
SYNC_CARRIER = "fd.sync_carrier"
SYNC_CARRIER_NAME = "fdprof.syncs"


# -- what an OTLP span says beyond its attributes, kept as attributes by the OTLP reader ------
# (OpenTelemetry's own names for formats without these fields; only where the span is not
# fdprof's: another scope, a kind other than internal, a status set)
OTEL_SCOPE_NAME = "otel.scope.name"
OTEL_SCOPE_VERSION = "otel.scope.version"
#: ``server``, ``client``, ``producer`` or ``consumer`` (internal spans carry none)
SPAN_KIND = "span.kind"
#: ``OK`` or ``ERROR``, and the description that came with it
OTEL_STATUS_CODE = "otel.status_code"
OTEL_STATUS_DESCRIPTION = "otel.status_description"
#: OpenTelemetry's resource and span attribute keys fdprof writes
SERVICE_NAME = "service.name"
SERVICE_INSTANCE_ID = "service.instance.id"
PROCESS_PID = "process.pid"
THREAD_ID = "thread.id"
THREAD_NAME = "thread.name"
