"""The instrumentation API the engine imports: spans, attributes and sync edges.

Instrumented code holds a :class:`Probe` (``fdprof.probe.get()``) and handles made once at
import (:func:`name`, :func:`key`, :func:`obj`), so the hot path passes small ints, never
formats strings, and builds no OpenTelemetry object. Until :func:`configure` runs in a
process, ``get()`` returns a probe whose calls do nothing.

Sinks sit behind the probe: the native recorder (default), NVTX, OpenTelemetry (built later
from the records, off the hot path). A disabled sink costs one ``is None`` test.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from fdprof import files, settings
from fdprof import semconv as S
from fdprof.formats import records as R
from fdprof.probe.config import ProbeConfig
from fdprof.probe.context import format_traceparent, parse_traceparent
from fdprof.probe.sdk.recorder import PID_SHIFT, open_recorder


# eq=False: handles hash by identity, so the recorder's per-handle id cache is a C-speed lookup
@dataclass(frozen=True, eq=False)
class Name:
    """An interned span name with the category its NVTX range is filed under."""

    text: str
    category: str


@dataclass(frozen=True, eq=False)
class Key:
    text: str


@dataclass(frozen=True, eq=False)
class Obj:
    """A synchronisation object (``lock:kv``, ``queue:swap``, ``signal:swap_done`` ...)."""

    text: str


def name(text: str, category: str) -> Name:
    return Name(text, category)


def key(text: str) -> Key:
    return Key(text)


def obj(text: str) -> Obj:
    return Obj(text)


class Probe:
    """One process's probe. Span ids are unique per run: ``pid << 40 | counter``.

    With the recorder as the only sink, ``begin``/``end``/``span``/``set_*``/``release``/
    ``acquire`` are the recorder's own (C) methods, bound on the instance: no Python frame
    between the engine and the record. With NVTX on, the methods below fan out to both.
    """

    def __init__(self, recorder=None, nvtx_sink=None) -> None:
        self._rec = recorder
        self._nvtx = nvtx_sink
        self._ids = itertools.count((os.getpid() << PID_SHIFT) + 1)
        self._rooted: set[int] = set()
        if recorder is not None and nvtx_sink is None:
            for method in _RECORDER_METHODS:
                setattr(self, method, getattr(recorder, method))
        elif recorder is None and nvtx_sink is None:  # no sink: calls that do nothing, fast
            self.span = _null_span
            for method in ("end", "set_int", "set_float", "set_str", "set_ints"):
                setattr(self, method, _ignore)
            self.release = self.acquire = _ignore

    @property
    def enabled(self) -> bool:
        return self._rec is not None or self._nvtx is not None

    def name_thread(self, thread_name: str) -> None:
        if self._rec is not None:
            self._rec.name_thread(thread_name)

    def begin(self, span_name: Name, parent: int = 0) -> int:
        """Start a span (it may end on another thread); returns its id."""
        sid = self._rec.begin(span_name, parent) if self._rec is not None else next(self._ids)
        if self._nvtx is not None:
            self._nvtx.begin(sid, span_name)
        return sid

    def end(self, sid: int) -> None:
        if self._nvtx is not None:
            self._nvtx.end(sid)
        if self._rec is not None:
            self._rec.end(sid)

    def span(self, span_name: Name, parent: int = 0) -> AbstractContextManager[int]:
        """``with probe.span(NAME) as sid:``; the span ends when the block exits."""
        return _Span(self, span_name, parent)

    def set_int(self, sid: int, k: Key, value: int) -> None:
        if self._rec is not None:
            self._rec.set_int(sid, k, value)

    def set_float(self, sid: int, k: Key, value: float) -> None:
        if self._rec is not None:
            self._rec.set_float(sid, k, value)

    def set_str(self, sid: int, k: Key, value: str) -> None:
        if self._rec is not None:
            self._rec.set_str(sid, k, value)

    def set_ints(self, sid: int, k: Key, values: Sequence[int]) -> None:
        """A list attribute, e.g. the block ids of ``kv.gpu_read``."""
        if self._rec is not None:
            self._rec.set_ints(sid, k, values)

    def release(self, o: Obj, seq: int | None = None, sid: int = 0) -> None:
        """This thread publishes everything it did so far on ``o``. With a ``seq`` (any int64)
        only the acquire of that same seq pairs with it; without one (locks, mutexes) the next
        acquire in time does."""
        if self._rec is not None:
            self._rec.release(o, seq, sid)
        if self._nvtx is not None:
            self._nvtx.sync(o, R.SyncOp.RELEASE, seq)

    def acquire(self, o: Obj, seq: int | None = None, sid: int = 0) -> None:
        """This thread has observed the release of ``o`` with the same ``seq`` (None: the
        latest unkeyed release of ``o``)."""
        if self._rec is not None:
            self._rec.acquire(o, seq, sid)
        if self._nvtx is not None:
            self._nvtx.sync(o, R.SyncOp.ACQUIRE, seq)

    def link_context(self, sid: int, traceparent: str, link: bool = False) -> None:
        """Attach a W3C ``traceparent`` received in a message to span ``sid``: as its parent,
        or (``link=True``) as one of its links, e.g. a step span linking the requests it served."""
        if self._rec is not None and traceparent:
            trace_id, span_id = parse_traceparent(traceparent)
            self._rec.context(sid, trace_id, span_id, link)

    def traceparent(self, sid: int, trace_id: bytes) -> str:
        """The W3C ``traceparent`` naming span ``sid`` of ``trace_id``, to put in a message.

        The first call for a span records that ``sid`` belongs to ``trace_id`` (a CONTEXT
        record with remote span 0: "trace id only, no parent"), so the exported root span
        carries the trace id its remote children name."""
        if self._rec is not None and sid not in self._rooted:
            self._rooted.add(sid)
            self._rec.context(sid, trace_id, 0, False)
        return format_traceparent(trace_id, sid)

    def close(self) -> None:
        if self._rec is not None:
            self._rec.close()


_RECORDER_METHODS = (
    "begin",
    "end",
    "span",
    "set_int",
    "set_float",
    "set_str",
    "set_ints",
    "release",
    "acquire",
)


class _NullSpan:
    """The span of a probe with no sink: id 0, nothing recorded."""

    __slots__ = ()

    def __enter__(self) -> int:
        return 0

    def __exit__(self, *exc) -> bool:
        return False


_NULL_SPAN = _NullSpan()


def _null_span(span_name: Name, parent: int = 0) -> _NullSpan:
    return _NULL_SPAN


def _ignore(*args) -> None:
    """Stands in for end/set_*/release/acquire when no sink is on."""


class _Span:
    __slots__ = ("_probe", "_name", "_parent", "_sid")

    def __init__(self, probe: Probe, span_name: Name, parent: int) -> None:
        self._probe = probe
        self._name = span_name
        self._parent = parent

    def __enter__(self) -> int:
        self._sid = self._probe.begin(self._name, self._parent)
        return self._sid

    def __exit__(self, *exc) -> bool:
        self._probe.end(self._sid)
        return False


_NOOP = Probe()
_current: Probe = _NOOP


def configure(config: ProbeConfig, role: str, dp_rank: int = 0, tp_rank: int = -1) -> Probe:
    """Set this process's probe from ``config``; call once at process start (after spawn).
    ``dp_rank`` and ``tp_rank`` (-1: unknown) go to the record file's header: the analyses
    scope KV pools by them (equal block ids of two TP ranks are different memory)."""
    global _current
    recorder = None
    if config.run_dir is not None:
        path = Path(config.run_dir) / f"{role}-{dp_rank}-{os.getpid()}.rec"
        recorder = open_recorder(path, role, dp_rank, tp_rank)
    nvtx_sink = None
    if config.nvtx:
        from fdprof.probe.sdk.nvtx_sink import open_nvtx_sink

        nvtx_sink = open_nvtx_sink()
    _current = Probe(recorder, nvtx_sink)
    return _current


#: the run directory an engine records into when fdprof drives it through the environment
RUN_DIR_ENV = settings.RUN_DIR


def configure_from_env(role: str, dp_rank: int = 0, tp_rank: int = 0) -> Probe:
    """This process's probe for an engine fdprof did not start itself (vLLM, ``fdprof ab
    --baseline CMD``): with ``FDPROF_RUN_DIR`` set, the native recorder writes
    ``<role>-<dp_rank>-<pid>.rec`` there (the directory is made if missing, mode 0700);
    otherwise the no-op probe. ``tp_rank`` goes to the probe's resource attributes."""
    run_dir = settings.run_dir()
    if not run_dir:
        return _NOOP
    files.make_dir(run_dir)
    resource = {S.DP_RANK: str(dp_rank), S.TP_RANK: str(tp_rank)}
    return configure(ProbeConfig(run_dir=run_dir, resource=resource), role, dp_rank, tp_rank)


def get() -> Probe:
    return _current


def shutdown() -> None:
    global _current
    _current.close()
    _current = _NOOP
