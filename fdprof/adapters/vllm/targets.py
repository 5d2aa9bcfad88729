"""Every vLLM internal the plugin relies on, in one table, and the check that they resolve.

Why: vLLM moves monthly and its internals with it; an exact-version allow-list refused every
new release, even one whose internals the hooks still fit. The plugin accepts a vLLM whose
targets resolve (:func:`problems` of :func:`runtime_facts`, at plugin start) and refuses any
other in one line naming what is missing. The same table is checked against a wheel's source,
without importing vLLM (:mod:`fdprof.adapters.vllm.source`), for the tests and for a release
not installed here (docs/vllm.md, "Versions").

A fact is what a target resolved to: ``None`` when its class or method is not there, else a
list of names: a method's parameters (``self`` first), a class's fields (annotated names,
bases first, in declaration order), the attributes its ``__init__`` methods assign on
``self``, or its abstract methods. Facts are plain JSON, so a wheel's can be kept beside the
tests.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

#: a target's resolution: None (absent) or the names found
Fact = list[str] | None


@dataclass(frozen=True)
class Method:
    """``owner.name`` in ``module``, whose leading parameters the hooks rely on (``params``, by
    name and order). ``accepts``: fdprof overrides this method (``offload.py``), so every
    parameter vLLM's has must be one that fdprof's override takes."""

    module: str
    owner: str
    name: str
    params: tuple[str, ...] = ("self",)
    accepts: tuple[str, ...] | None = None

    @property
    def key(self) -> str:
        return f"{self.module}:{self.owner}.{self.name}"

    @property
    def label(self) -> str:
        return f"{self.owner}.{self.name}"


@dataclass(frozen=True)
class _OnClass:
    """Names asked of a class ``owner`` of ``module`` (the kinds below)."""

    module: str
    owner: str
    names: tuple[str, ...]
    #: how the target's key names what is asked
    ASKS: ClassVar[str] = ""

    @property
    def key(self) -> str:
        return f"{self.module}:{self.owner} {self.ASKS}"

    @property
    def label(self) -> str:
        return self.owner


@dataclass(frozen=True)
class Fields(_OnClass):
    """Names the hooks read off instances of ``owner``, declared on the class (dataclass,
    msgspec or pydantic fields: annotated names of the class and its bases); ``ordered``: the
    class's fields start with ``names`` in this order (fdprof constructs it positionally)."""

    ordered: bool = False
    ASKS: ClassVar[str] = "fields"


@dataclass(frozen=True)
class Attrs(_OnClass):
    """Instance attributes the hooks read, assigned on ``self`` in the ``__init__`` of
    ``owner`` or of a base."""

    ASKS: ClassVar[str] = "attributes"


@dataclass(frozen=True)
class Abstract(_OnClass):
    """A vLLM base class fdprof implements (``offload.py``): every abstract method it has must
    be one of ``names``, the methods fdprof's subclass implements."""

    ASKS: ClassVar[str] = "abstract methods"


Target = Method | Fields | Attrs | Abstract

_OFFLOAD_WORKER = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.worker"
_OFFLOAD_CONNECTOR = "vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector"
_OFFLOAD_COMMON = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.common"
_KV_OFFLOAD = "vllm.v1.kv_offload.base"
_SCHED_OUTPUT = "vllm.v1.core.sched.output"

#: what ``hooks.py``, ``offload.py`` and the plugin's ``register`` wrap, call, override or read,
#: with the import paths they use
TARGETS: tuple[Target, ...] = (
    # main process: the configuration for run.json, and the requests
    Method("vllm.engine.arg_utils", "EngineArgs", "create_engine_config"),
    Fields("vllm.config", "VllmConfig", ("model_config", "cache_config", "parallel_config",
                                         "scheduler_config", "kv_transfer_config")),
    Fields("vllm.config", "ModelConfig", ("model", "dtype")),
    Fields("vllm.config", "CacheConfig", ("block_size", "enable_prefix_caching",
                                          "num_gpu_blocks_override")),
    Fields("vllm.config", "ParallelConfig", ("tensor_parallel_size", "data_parallel_size")),
    Fields("vllm.config", "SchedulerConfig", ("max_num_seqs",)),
    Fields("vllm.config", "KVTransferConfig", ("kv_connector", "kv_connector_extra_config")),
    Method("vllm.v1.engine.output_processor", "OutputProcessor", "add_request",
           ("self", "request")),
    Method("vllm.v1.engine.output_processor", "OutputProcessor", "process_outputs",
           ("self", "engine_core_outputs")),
    Fields("vllm.v1.engine", "EngineCoreRequest", ("request_id", "prompt_token_ids")),
    Fields("vllm.v1.engine", "EngineCoreOutput", ("request_id", "finish_reason",
                                                  "new_token_ids")),
    # engine core: steps, scheduling, the block pool
    Method("vllm.v1.engine.core", "EngineCore", "step"),
    Method("vllm.v1.engine.core", "EngineCore", "step_with_batch_queue"),
    Method("vllm.v1.core.sched.scheduler", "Scheduler", "schedule"),
    Method("vllm.v1.core.sched.scheduler", "Scheduler", "update_from_output",
           ("self", "scheduler_output")),
    Attrs("vllm.v1.core.sched.scheduler", "Scheduler", ("kv_cache_manager",)),
    Method("vllm.v1.core.kv_cache_manager", "KVCacheManager", "get_block_ids",
           ("self", "request_id")),
    # ownership: the calls that change a request's block table (ownership.py)
    Method("vllm.v1.core.kv_cache_manager", "KVCacheManager", "allocate_slots",
           ("self", "request")),
    Method("vllm.v1.core.kv_cache_manager", "KVCacheManager", "free", ("self", "request")),
    Method("vllm.v1.core.kv_cache_manager", "KVCacheManager", "pop_blocks_for_free",
           ("self", "request")),
    Method("vllm.v1.core.kv_cache_manager", "KVCacheManager", "remove_skipped_blocks",
           ("self", "request_id")),
    Attrs("vllm.v1.request", "Request", ("request_id",)),
    Fields(_SCHED_OUTPUT, "SchedulerOutput", (
        "scheduled_new_reqs", "scheduled_cached_reqs", "num_scheduled_tokens",
        "total_num_scheduled_tokens", "finished_req_ids", "preempted_req_ids",
        "new_block_ids_to_zero")),
    Fields(_SCHED_OUTPUT, "NewRequestData", ("req_id", "block_ids", "num_computed_tokens")),
    Fields(_SCHED_OUTPUT, "CachedRequestData", (
        "req_ids", "resumed_req_ids", "new_block_ids", "num_computed_tokens")),
    Method("vllm.v1.core.block_pool", "BlockPool", "get_new_blocks", ("self", "num_blocks")),
    Method("vllm.v1.core.block_pool", "BlockPool", "free_blocks", ("self", "ordered_blocks")),
    Method("vllm.v1.core.block_pool", "BlockPool", "evict_blocks", ("self", "block_ids")),
    Method("vllm.v1.core.block_pool", "BlockPool", "_maybe_evict_cached_block",
           ("self", "block")),
    Fields("vllm.v1.core.kv_cache_utils", "KVCacheBlock", ("block_id", "ref_cnt", "pool",
                                                           "is_null")),
    # worker: the forward, and the offloading worker vLLM builds
    Method("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "execute_model",
           ("self", "scheduler_output")),
    Method("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "sample_tokens"),
    # the access span: from the state update (after the connector's fences) to the forward
    Method("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "_update_states",
           ("self", "scheduler_output")),
    Method("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "_model_forward"),
    Attrs("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", ("cache_config",)),
    Method(_OFFLOAD_WORKER, "OffloadingConnectorWorker", "_init_worker"),
    # where the worker is handed its jobs (their requests, for issue_swap_task)
    Method(_OFFLOAD_WORKER, "OffloadingConnectorWorker", "handle_preemptions",
           ("self", "kv_connector_metadata")),
    Method(_OFFLOAD_WORKER, "OffloadingConnectorWorker", "start_kv_transfers",
           ("self", "metadata")),
    Method(_OFFLOAD_WORKER, "OffloadingConnectorWorker", "prepare_store_kv",
           ("self", "metadata")),
    Attrs(_OFFLOAD_WORKER, "OffloadingConnectorWorker", ("worker", "spec")),
    # offload.py: the copy worker it implements, the spec and connector it extends
    Method(_KV_OFFLOAD, "OffloadingWorker", "submit_store",
           ("self", "job_id", "src_spec", "dst_spec"),
           ("self", "job_id", "src_spec", "dst_spec")),
    Method(_KV_OFFLOAD, "OffloadingWorker", "submit_load",
           ("self", "job_id", "src_spec", "dst_spec"),
           ("self", "job_id", "src_spec", "dst_spec", "expedited")),
    Method(_KV_OFFLOAD, "OffloadingWorker", "get_finished", ("self",), ("self",)),
    Method(_KV_OFFLOAD, "OffloadingWorker", "wait", ("self", "job_ids"), ("self", "job_ids")),
    Method(_KV_OFFLOAD, "OffloadingWorker", "shutdown", ("self",), ("self",)),
    Abstract(_KV_OFFLOAD, "OffloadingWorker", ("submit_store", "submit_load", "get_finished",
                                                "wait")),
    Fields(_KV_OFFLOAD, "TransferResult", ("job_id", "success", "transfer_size",
                                           "transfer_time"), ordered=True),
    Fields(_KV_OFFLOAD, "CanonicalKVCaches", ("tensors", "group_data_refs")),
    Fields(_KV_OFFLOAD, "CanonicalKVCacheTensor", ("tensor",)),
    Attrs(_KV_OFFLOAD, "GPULoadStoreSpec", ("block_ids",)),
    Method("vllm.v1.kv_offload.cpu.spec", "CPUOffloadingSpec", "__init__", ("self", "config"),
           ("self", "config")),
    Method("vllm.v1.kv_offload.cpu.spec", "CPUOffloadingSpec", "get_worker",
           ("self", "kv_caches"), ("self", "kv_caches")),
    Attrs("vllm.v1.kv_offload.cpu.spec", "CPUOffloadingSpec", (
        "extra_config", "blocks_per_chunk", "num_chunks")),
    Method(_OFFLOAD_CONNECTOR, "OffloadingConnector", "bind_connector_metadata",
           ("self", "connector_metadata"), ("self", "connector_metadata")),
    Attrs(_OFFLOAD_CONNECTOR, "OffloadingConnector", ("connector_worker",)),
    Fields(_OFFLOAD_COMMON, "OffloadingConnectorMetadata", ("store_jobs", "load_jobs")),
    Fields(_OFFLOAD_COMMON, "TransferJob", ("req_id", "src_spec", "dst_spec")),
)  # fmt: skip

#: the vLLM classes ``fdprof.adapters.vllm.offload`` extends, and its subclass of each: the
#: methods of those with ``accepts`` are overridden there
OVERRIDES = {"OffloadingWorker": "HostCopyWorker", "CPUOffloadingSpec": "ThreadedCPUOffloadingSpec",
             "OffloadingConnector": "ThreadedOffloadingConnector"}  # fmt: skip


def problems(facts: Mapping[str, Fact], targets: Iterable[Target] = TARGETS) -> list[str]:
    """What does not fit in ``facts``, one phrase per target (empty: every target resolves)."""
    out = []
    for t in targets:
        if t.key not in facts:
            out.append(f"{t.key} was not looked up")
            continue
        found = facts[t.key]
        if found is None:
            what = t.label if isinstance(t, Method) else f"class {t.owner}"
            out.append(f"{what} not found in {t.module}")
        elif isinstance(t, Method):
            out += _method_problems(t, found)
        elif isinstance(t, Abstract):
            unimplemented = [n for n in found if n not in t.names]
            if unimplemented:
                out.append(f"{t.owner} has abstract {', '.join(unimplemented)}, which fdprof's "
                           f"{OVERRIDES[t.owner]} does not implement")  # fmt: skip
        elif isinstance(t, Fields) and t.ordered and tuple(found[: len(t.names)]) != t.names:
            out.append(f"{t.owner}'s fields start {_args(found[: len(t.names)])}, fdprof "
                       f"passes {_args(t.names)}")  # fmt: skip
        else:
            missing = [n for n in t.names if n not in found]
            if missing:
                out.append(f"{t.owner} has no {', '.join(missing)}")
    return out


def _method_problems(t: Method, params: list[str]) -> list[str]:
    if tuple(params[: len(t.params)]) != t.params:
        return [f"{t.label}{_args(params)}: fdprof relies on {_args(t.params)}"]
    if t.accepts is not None:
        extra = [p for p in params if p not in t.accepts]
        if extra:
            return [f"{t.label}{_args(params)}: fdprof's override does not take "
                    f"{', '.join(extra)}"]  # fmt: skip
    return []


def _args(names: Iterable[str]) -> str:
    return f"({', '.join(names)})"


# -- in the running process ---------------------------------------------------------------


def runtime_facts(targets: Iterable[Target] = TARGETS) -> dict[str, Fact]:
    """Each target looked up in this process: its module imported (the modules the hooks
    import anyway), the class and method by ``getattr``, parameters by ``inspect``."""
    return {t.key: _resolve(t) for t in targets}


def _resolve(t: Target) -> Fact:
    try:
        owner = getattr(importlib.import_module(t.module), t.owner, None)
    except ImportError:
        return None
    if not isinstance(owner, type):
        return None
    if isinstance(t, Method):
        method = getattr(owner, t.name, None)
        if method is None:
            return None
        try:
            return list(inspect.signature(method).parameters)
        except (TypeError, ValueError):
            return None
    if isinstance(t, Fields):
        return class_fields(owner)
    if isinstance(t, Abstract):
        return sorted(getattr(owner, "__abstractmethods__", ()))
    return init_attributes(owner)


def class_fields(owner: type) -> list[str]:
    """Annotated names of ``owner`` and its bases (bases first, declaration order)."""
    names: dict[str, None] = {}
    for klass in reversed(owner.__mro__):
        names.update(dict.fromkeys(inspect.get_annotations(klass)))
    if dataclasses.is_dataclass(owner):
        names.update(dict.fromkeys(f.name for f in dataclasses.fields(owner)))
    return list(names)


_SELF_ASSIGN = re.compile(r"\bself\.([A-Za-z_]\w*)\s*(?::[^=\n]*)?=(?!=)")


def init_attributes(owner: type) -> list[str]:
    """Attributes the ``__init__`` of ``owner`` and of its bases assign on ``self`` (read from
    those methods' source: the function, not its whole module)."""
    names: dict[str, None] = {}
    for klass in owner.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or not inspect.isfunction(init):
            continue
        try:
            source = inspect.getsource(init)
        except (OSError, TypeError):
            continue
        names.update(dict.fromkeys(_SELF_ASSIGN.findall(source)))
    return list(names)


def first_problem(found: list[str]) -> str:
    """The refusal's words for ``found`` (``problems``): the first, and how many more."""
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"{found[0]}{more}"


def asked(t: Target) -> list[str]:
    """The names a target asks about: a method's parameters, a class's fields or attributes."""
    return list(t.params if isinstance(t, Method) else t.names)


def narrow(facts: Mapping[str, Fact], targets: Iterable[Target] = TARGETS) -> dict[str, Fact]:
    """``facts`` cut to what :func:`problems` reads (a method's parameters; of a class's
    names, those asked about, or the leading ones of an ``ordered`` class), for a file kept
    beside the tests: the same problems, a few lines per target."""
    out: dict[str, Fact] = {}
    for t in targets:
        found = facts.get(t.key)
        if found is None or isinstance(t, Method | Abstract):
            out[t.key] = found
        elif isinstance(t, Fields) and t.ordered:
            out[t.key] = found[: len(t.names)]
        else:
            out[t.key] = [n for n in found if n in t.names]
    return out
