"""Every setting fdprof takes from the environment, read here and nowhere else: the
OpenTelemetry variables (``OTEL_*``, as the specification names them), fdprof's own
(``FDPROF_*``) and the few of other programs it honours. Other modules call these functions and
pass the values on (the OTLP exporters get every value explicitly), so one place says what each
variable means and a bad value fails the same way everywhere: one line naming the variable
(:class:`~fdprof.errors.FdprofError`). What fdprof sets for the processes it starts goes
through here too (:func:`child_env`, :func:`adopt`, :func:`export`), so ``os.environ``
appears in this module alone (``tests/test_vocabulary.py``).

No imports beyond the standard library: the engine's processes read their settings here too.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

from fdprof.errors import FdprofError

# -- fdprof's own -----------------------------------------------------------------------
#: the run directory an engine records into when fdprof drives it through the environment
RUN_DIR = "FDPROF_RUN_DIR"
#: ``python`` selects the pure-Python recorder even where the C extension is built
RECORDER = "FDPROF_RECORDER"
#: ``python`` runs the detector's inner loops in their Python twins even where C is built
KERNELS = "FDPROF_KERNELS"
#: ms the Prometheus endpoint waits at the end of a run for a scraper to take the final counts
METRICS_FINAL_SCRAPE_MS = "FDPROF_METRICS_FINAL_SCRAPE_MS"
#: the pair index of an ``ab --baseline/--candidate`` command's run, set for the command
AB_PAIR = "FDPROF_AB_PAIR"
#: the permission bits of the files a run writes (octal; default 0600), its directories the
#: same with search (x) added wherever read is (0600 -> 0700, 0640 -> 0750)
FILE_MODE = "FDPROF_FILE_MODE"
#: the pid of the vLLM process that owns the run, set by the adapter there for its children:
#: a fresh interpreter vLLM starts for a side job (its model inspection) is not another main
VLLM_MAIN_PID = "FDPROF_VLLM_MAIN_PID"
#: read by the NVTX injection library (C), set by :mod:`fdprof.capture.nvtx`
NVTX_DIR = "FDPROF_NVTX_DIR"
NVTX_CAPACITY_MB = "FDPROF_NVTX_CAPACITY_MB"
#: "1" in the run ``fdprof run --nsys`` starts under nsys (:mod:`fdprof.capture.nsys`)
NSYS_INNER = "FDPROF_NSYS"
#: seconds of work before a progress bar appears on a terminal (:mod:`fdprof.progress`)
PROGRESS_DELAY_S = "FDPROF_PROGRESS_DELAY_S"
#: the reader's limits (:mod:`fdprof.trace.limits`, each also a flag): characters of one event,
#: how many times a gzip trace may inflate, nesting, processes, distinct attribute keys
MAX_EVENT_SIZE = "FDPROF_MAX_EVENT_SIZE"
MAX_INFLATE_RATIO = "FDPROF_MAX_INFLATE_RATIO"
MAX_DEPTH = "FDPROF_MAX_DEPTH"
MAX_PROCESSES = "FDPROF_MAX_PROCESSES"
MAX_ATTR_KEYS = "FDPROF_MAX_ATTR_KEYS"

# -- other programs' variables, read (never set) here ------------------------------------
#: FastDeploy's switches of the baseline lock before fdprof (PR #6724 names the variable
#: USE_KVCACHE_LOCK and the attribute FD_USE_KVCACHE_LOCK): still honoured, deprecated
LEGACY_LOCK = ("USE_KVCACHE_LOCK", "FD_USE_KVCACHE_LOCK")
#: vLLM's: "0" runs the engine core in the main process
VLLM_MULTIPROCESSING = "VLLM_ENABLE_V1_MULTIPROCESSING"
#: a memory pool chosen for Arrow, which fdprof then leaves alone
ARROW_MEMORY_POOL = "ARROW_DEFAULT_MEMORY_POOL"
#: a malloc threshold chosen for glibc, which fdprof then leaves alone
MALLOC_MMAP_THRESHOLD = "MALLOC_MMAP_THRESHOLD_"

# -- Dask (the analyses' --dask, as nsys recipes read it) ---------------------------------
#: the scheduler ``--dask`` connects to when given no address
DASK_SCHEDULER_ADDRESS = "DASK_SCHEDULER_ADDRESS"

# -- OpenTelemetry ------------------------------------------------------------------------
SDK_DISABLED = "OTEL_SDK_DISABLED"
SERVICE_NAME = "OTEL_SERVICE_NAME"
RESOURCE_ATTRIBUTES = "OTEL_RESOURCE_ATTRIBUTES"
BSP_MAX_QUEUE_SIZE = "OTEL_BSP_MAX_QUEUE_SIZE"
BSP_MAX_EXPORT_BATCH_SIZE = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
BSP_SCHEDULE_DELAY = "OTEL_BSP_SCHEDULE_DELAY"
BSP_EXPORT_TIMEOUT = "OTEL_BSP_EXPORT_TIMEOUT"
METRIC_EXPORT_INTERVAL = "OTEL_METRIC_EXPORT_INTERVAL"
METRIC_EXPORT_TIMEOUT = "OTEL_METRIC_EXPORT_TIMEOUT"
#: ``OTEL_EXPORTER_OTLP_<NAME>`` for every signal, ``OTEL_EXPORTER_OTLP_<SIGNAL>_<NAME>`` for one
OTLP_PREFIX = "OTEL_EXPORTER_OTLP_"
OTLP_OPTIONS = (
    "ENDPOINT",
    "HEADERS",
    "TIMEOUT",
    "COMPRESSION",
    "CERTIFICATE",
    "CLIENT_KEY",
    "CLIENT_CERTIFICATE",
)
COMPRESSIONS = ("none", "gzip", "deflate")
#: where a base endpoint sends each signal (OTLP/HTTP)
SIGNAL_PATHS = {"traces": "/v1/traces", "metrics": "/v1/metrics"}


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def _text(name: str, env: Mapping[str, str] | None = None) -> str | None:
    value = _env(env).get(name, "").strip()
    return value or None


def _number(name: str, default, kind: type, env: Mapping[str, str] | None):
    """A number of ``kind`` from ``name``; a bad or negative one is a configuration error."""
    raw = _text(name, env)
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise FdprofError(
            f"{name}={raw!r} is not {'an integer' if kind is int else 'a number'}"
        ) from None
    if not value >= 0:
        raise FdprofError(f"{name}={raw!r} should not be negative")
    return value


def _int(name: str, default: int, env: Mapping[str, str] | None = None) -> int:
    return _number(name, default, int, env)


def _pairs(name: str, raw: str | None) -> dict[str, str]:
    """``k=v,k2=v2`` (W3C baggage style, percent-encoded), as the OTel variables write them."""
    out: dict[str, str] = {}
    for item in (raw or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise FdprofError(f"{name}: {item.strip()!r} is not key=value")
        out[urllib.parse.unquote(key.strip())] = urllib.parse.unquote(value.strip())
    return out


def run_dir(env: Mapping[str, str] | None = None) -> str | None:
    """``FDPROF_RUN_DIR``: where a process fdprof did not start records (None: nowhere)."""
    return _text(RUN_DIR, env)


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a process fdprof starts: this one's, with ``extra`` over it."""
    return {**os.environ, **extra}


def adopt(environ: Mapping[str, str]) -> None:
    """This process's environment becomes ``environ``: a process forked from a fork server
    takes its starter's environment, not the server's."""
    os.environ.clear()
    os.environ.update(environ)


def export(name: str, value: str) -> None:
    """Set ``name`` for the rest of this process and every process it starts."""
    os.environ[name] = value


def text(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The value of ``name`` (one of the variables named here), stripped; None when unset or
    blank."""
    return _text(name, env)


def is_set(name: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether ``name`` is in the environment at all (even empty): another program's choice
    fdprof leaves alone."""
    return name in _env(env)


def nsys_inner(env: Mapping[str, str] | None = None) -> bool:
    """``FDPROF_NSYS=1``: this process is the run ``fdprof run --nsys`` started under nsys."""
    return _text(NSYS_INNER, env) == "1"


def progress_delay_s(default: float, env: Mapping[str, str] | None = None) -> float:
    """``FDPROF_PROGRESS_DELAY_S``: seconds of work before a progress bar appears."""
    return _number(PROGRESS_DELAY_S, default, float, env)


def legacy_lock_switch(env: Mapping[str, str] | None = None) -> str | None:
    """The name of the first of :data:`LEGACY_LOCK` set to 1 (or true), else None."""
    return next(
        (n for n in LEGACY_LOCK if _env(env).get(n, "").strip() in ("1", "true", "True")), None
    )


def vllm_single_process(env: Mapping[str, str] | None = None) -> bool:
    """``VLLM_ENABLE_V1_MULTIPROCESSING=0``: vLLM runs its engine core in the main process."""
    return _env(env).get(VLLM_MULTIPROCESSING, "1") == "0"


def dask_scheduler(env: Mapping[str, str] | None = None) -> str | None:
    """``DASK_SCHEDULER_ADDRESS``: the Dask scheduler of ``--dask`` without an address."""
    return _text(DASK_SCHEDULER_ADDRESS, env)


def vllm_main_pid(env: Mapping[str, str] | None = None) -> int | None:
    """``FDPROF_VLLM_MAIN_PID``: the vLLM process that owns the run (None: not set, or not a
    pid; then this process may be that one)."""
    text = _text(VLLM_MAIN_PID, env)
    return int(text) if text is not None and text.isdigit() else None


#: only the owner reads and writes what a run records, unless ``FDPROF_FILE_MODE`` says otherwise
DEFAULT_FILE_MODE = 0o600


def file_mode(env: Mapping[str, str] | None = None) -> int:
    """``FDPROF_FILE_MODE``: the permission bits of the files a run writes (octal, e.g.
    ``0640``; default 0600). The owner must keep read and write; no execute bits."""
    raw = _text(FILE_MODE, env)
    if raw is None:
        return DEFAULT_FILE_MODE
    try:
        mode = int(raw, 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o777:
        raise FdprofError(f"{FILE_MODE}={raw!r} is not an octal file mode (e.g. 0600, 0640)")
    if mode & 0o600 != 0o600 or mode & 0o111:
        raise FdprofError(
            f"{FILE_MODE}={raw!r}: the owner needs read and write (0600), and files are not "
            "programs (no execute bits)"
        )
    return mode


def dir_mode(env: Mapping[str, str] | None = None) -> int:
    """The mode of the directories a run makes: :func:`file_mode` with search permission
    wherever it gives read (0600 -> 0700)."""
    mode = file_mode(env)
    return mode | (mode & 0o444) >> 2


def python_recorder(env: Mapping[str, str] | None = None) -> bool:
    """``FDPROF_RECORDER=python``: the pure-Python recorder instead of the C extension."""
    return _text(RECORDER, env) == "python"


def python_kernels(env: Mapping[str, str] | None = None) -> bool:
    """``FDPROF_KERNELS=python``: the detector's Python twins instead of its C kernels."""
    return _text(KERNELS, env) == "python"


def otlp_asked(env: Mapping[str, str] | None = None) -> bool:
    """Whether any ``OTEL_EXPORTER_OTLP_*`` variable is set (a run then exports over OTLP)."""
    return any(k.startswith(OTLP_PREFIX) and v.strip() for k, v in _env(env).items())


def check_url(url: str, what: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise FdprofError(f"{what} {url!r} should be an http:// or https:// URL")
    return url


@dataclass(frozen=True)
class OtlpSignal:
    """How one signal (traces or metrics) goes out over OTLP/HTTP."""

    #: the full URL to POST to; None: no endpoint configured for it
    endpoint: str | None
    headers: dict[str, str] = field(default_factory=dict)
    #: seconds one export may take, retries included (the Python SDK reads the variable as
    #: seconds, where the specification says milliseconds; fdprof keeps the SDK's reading)
    timeout_s: float = 10.0
    compression: str = "none"
    certificate: str | None = None
    client_key: str | None = None
    client_certificate: str | None = None


def _signal(
    signal: str, base: str | None, env: Mapping[str, str] | None, default_base: str | None
) -> OtlpSignal:
    def option(name: str) -> str | None:
        return _text(f"{OTLP_PREFIX}{signal.upper()}_{name}", env) or _text(
            f"{OTLP_PREFIX}{name}", env
        )

    path = SIGNAL_PATHS[signal]
    if base is not None:  # a command-line base URL wins over the environment
        base = check_url(base.rstrip("/"), "endpoint")
        endpoint = base if base.endswith(path) else base + path
    elif own := _text(f"{OTLP_PREFIX}{signal.upper()}_ENDPOINT", env):
        endpoint = check_url(own, f"{OTLP_PREFIX}{signal.upper()}_ENDPOINT")
    elif shared := _text(f"{OTLP_PREFIX}ENDPOINT", env) or default_base:
        endpoint = check_url(shared.rstrip("/"), f"{OTLP_PREFIX}ENDPOINT") + path
    else:
        endpoint = None
    specific = f"{OTLP_PREFIX}{signal.upper()}_TIMEOUT"
    timeout = _number(
        specific if _text(specific, env) else f"{OTLP_PREFIX}TIMEOUT", 10.0, float, env
    )
    compression = (option("COMPRESSION") or "none").lower()
    if compression not in COMPRESSIONS:
        raise FdprofError(
            f"{OTLP_PREFIX}COMPRESSION={compression!r}: one of {', '.join(COMPRESSIONS)}"
        )
    return OtlpSignal(
        endpoint=endpoint,
        headers=_pairs(f"{OTLP_PREFIX}HEADERS", option("HEADERS")),
        timeout_s=timeout,
        compression=compression,
        certificate=option("CERTIFICATE"),
        client_key=option("CLIENT_KEY"),
        client_certificate=option("CLIENT_CERTIFICATE"),
    )


@dataclass(frozen=True)
class OtelSettings:
    """The OpenTelemetry export's settings (docs/probe.md lists them with their defaults)."""

    disabled: bool
    traces: OtlpSignal
    metrics: OtlpSignal
    #: ``OTEL_RESOURCE_ATTRIBUTES``, under each process's own attributes
    resource: dict[str, str]
    #: ``OTEL_SERVICE_NAME``, in place of fdprof's default ``service.name``
    service_name: str | None
    max_queue_size: int
    max_export_batch_size: int
    schedule_delay_ms: int
    #: the whole budget for the last export when a run ends (fdprof's default 5000 ms, not the
    #: specification's 30000: the end of a run is not held half a minute by a dead collector)
    export_timeout_ms: int
    metric_interval_ms: int
    metric_timeout_ms: int
    final_scrape_ms: int


def otel(
    endpoint: str | None = None,
    *,
    default_endpoint: str | None = None,
    env: Mapping[str, str] | None = None,
) -> OtelSettings:
    """The settings, with ``endpoint`` (a command-line base URL, or a traces URL ending in
    ``/v1/traces``) over the ``OTEL_EXPORTER_OTLP_*`` endpoints; ``default_endpoint`` is used
    when neither names one (``export-otlp``: the local collector)."""
    batch = _int(BSP_MAX_EXPORT_BATCH_SIZE, 512, env)
    queue = _int(BSP_MAX_QUEUE_SIZE, 8192, env)
    if not 0 < batch <= queue:
        raise FdprofError(
            f"{BSP_MAX_EXPORT_BATCH_SIZE}={batch} should be at least 1 and at most "
            f"{BSP_MAX_QUEUE_SIZE}={queue}"
        )
    resource = _pairs(RESOURCE_ATTRIBUTES, _text(RESOURCE_ATTRIBUTES, env))
    return OtelSettings(
        disabled=(_text(SDK_DISABLED, env) or "").lower() == "true",
        traces=_signal("traces", endpoint, env, default_endpoint),
        metrics=_signal("metrics", endpoint, env, default_endpoint),
        resource=resource,
        service_name=_text(SERVICE_NAME, env),
        max_queue_size=queue,
        max_export_batch_size=batch,
        schedule_delay_ms=max(1, _int(BSP_SCHEDULE_DELAY, 5000, env)),
        export_timeout_ms=_int(BSP_EXPORT_TIMEOUT, 5000, env),
        metric_interval_ms=max(1, _int(METRIC_EXPORT_INTERVAL, 5000, env)),
        metric_timeout_ms=_int(METRIC_EXPORT_TIMEOUT, 5000, env),
        final_scrape_ms=_int(METRICS_FINAL_SCRAPE_MS, 3000, env),
    )
