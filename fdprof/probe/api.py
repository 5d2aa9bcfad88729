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
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fdprof.probe import records as R
from fdprof.probe.config import ProbeConfig
from fdprof.probe.context import format_traceparent, parse_traceparent
from fdprof.probe.recorder import Recorder


@dataclass(frozen=True)
class Name:
    """An interned span name with the category its NVTX range is filed under."""

    text: str
    category: str


@dataclass(frozen=True)
class Key:
    text: str


@dataclass(frozen=True)
class Obj:
    """A synchronisation object (``lock:kv``, ``queue:swap``, ``signal:swap_done`` ...)."""

    text: str


def name(text: str, category: str) -> Name:
    return Name(text, category)


def key(text: str) -> Key:
    return Key(text)


def obj(text: str) -> Obj:
    return Obj(text)


_PID_SHIFT = 40


class Probe:
    """One process's probe. Span ids are unique per run: ``pid << 40 | counter``."""

    def __init__(self, recorder: Recorder | None = None, nvtx_sink=None) -> None:
        self._rec = recorder
        self._nvtx = nvtx_sink
        self._ids = itertools.count((os.getpid() << _PID_SHIFT) + 1)
        self._ids_of: dict[object, int] = {}

    @property
    def enabled(self) -> bool:
        return self._rec is not None or self._nvtx is not None

    def _id(self, handle: Name | Key | Obj) -> int:
        iid = self._ids_of.get(handle)
        if iid is None:
            iid = self._rec.intern(handle.text) if self._rec is not None else len(self._ids_of) + 1
            self._ids_of[handle] = iid
        return iid

    def name_thread(self, thread_name: str) -> None:
        if self._rec is not None:
            self._rec.name_thread(thread_name)

    def begin(self, span_name: Name, parent: int = 0) -> int:
        """Start a span (it may end on another thread); returns its id."""
        sid = next(self._ids)
        t0 = time.monotonic_ns()
        if self._rec is not None:
            self._rec.span_begin(sid, parent, self._id(span_name), t0)
        if self._nvtx is not None:
            self._nvtx.begin(sid, span_name)
        return sid

    def end(self, sid: int) -> None:
        t1 = time.monotonic_ns()
        if self._nvtx is not None:
            self._nvtx.end(sid)
        if self._rec is not None:
            self._rec.span_end(sid, t1)

    @contextmanager
    def span(self, span_name: Name, parent: int = 0) -> Iterator[int]:
        sid = self.begin(span_name, parent)
        try:
            yield sid
        finally:
            self.end(sid)

    def set_int(self, sid: int, k: Key, value: int) -> None:
        if self._rec is not None:
            self._rec.attr_int(sid, self._id(k), value)

    def set_float(self, sid: int, k: Key, value: float) -> None:
        if self._rec is not None:
            self._rec.attr_float(sid, self._id(k), value)

    def set_str(self, sid: int, k: Key, value: str) -> None:
        if self._rec is not None:
            self._rec.attr_str(sid, self._id(k), value)

    def set_ints(self, sid: int, k: Key, values: Sequence[int]) -> None:
        """A list attribute, e.g. the block ids of ``kv.gpu_read``."""
        if self._rec is not None:
            self._rec.attr_ints(sid, self._id(k), values)

    def release(self, o: Obj, seq: int = R.NO_SEQ, sid: int = 0) -> None:
        """This thread publishes everything it did so far on ``o`` (generation ``seq``)."""
        if self._rec is not None:
            self._rec.sync(sid, self._id(o), R.SyncOp.RELEASE, seq, time.monotonic_ns())

    def acquire(self, o: Obj, seq: int = R.NO_SEQ, sid: int = 0) -> None:
        """This thread has observed the release of ``o`` with the same ``seq``."""
        if self._rec is not None:
            self._rec.sync(sid, self._id(o), R.SyncOp.ACQUIRE, seq, time.monotonic_ns())

    def link_context(self, sid: int, traceparent: str, link: bool = False) -> None:
        """Attach a W3C ``traceparent`` received in a message to span ``sid``: as its parent,
        or (``link=True``) as one of its links, e.g. a step span linking the requests it served."""
        if self._rec is not None and traceparent:
            trace_id, span_id = parse_traceparent(traceparent)
            self._rec.context(sid, trace_id, span_id, link)

    def traceparent(self, sid: int, trace_id: bytes) -> str:
        """The W3C ``traceparent`` naming span ``sid`` of ``trace_id``, to put in a message."""
        return format_traceparent(trace_id, sid)

    def close(self) -> None:
        if self._rec is not None:
            self._rec.close()


_NOOP = Probe()
_current: Probe = _NOOP


def configure(config: ProbeConfig, role: str, dp_rank: int = 0) -> Probe:
    """Set this process's probe from ``config``; call once at process start (after spawn)."""
    global _current
    recorder = None
    if config.run_dir is not None:
        path = Path(config.run_dir) / f"{role}-{dp_rank}-{os.getpid()}.rec"
        recorder = Recorder(path, role)
    nvtx_sink = None
    if config.nvtx:
        from fdprof.probe.nvtx_sink import NvtxSink

        nvtx_sink = NvtxSink()
    _current = Probe(recorder, nvtx_sink)
    return _current


def get() -> Probe:
    return _current


def shutdown() -> None:
    global _current
    _current.close()
    _current = _NOOP
