"""The instrumentation API: what instrumented code calls (spans, attributes, sync edges).

Instrumented code (fdprof's engine, the vLLM adapter, any engine) imports this and nothing of
the SDK behind it (:mod:`fdprof.probe.sdk`: the recorder, NVTX, the OpenTelemetry export), as
OpenTelemetry keeps its API apart from its SDK. It holds a :class:`Probe` from :func:`get` and
handles made once at import (:func:`name`, :func:`key`, :func:`obj`), so the hot path passes
small ints, never formats strings, and builds no OpenTelemetry object.

- :class:`Probe` is the interface, and its own methods record nothing: it is the no-op probe a
  process has until the SDK sets one (``fdprof.probe.sdk.configure``, through
  :func:`set_probe`).
- :func:`get` returns the probe set, or, before one is, a proxy that forwards every call to
  whatever is set later: a module may take the probe at import, and the hot path of a
  configured process still calls the SDK's probe directly.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from fdprof import semconv as S
from fdprof.probe.context import format_traceparent


# eq=False: handles hash by identity, so the recorder's per-handle id cache is a C-speed lookup
@dataclass(frozen=True, eq=False)
class Name:
    """An interned span name with the category its NVTX range is filed under."""

    text: str
    category: str


@dataclass(frozen=True, eq=False)
class Key:
    """An attribute key."""

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


_events = itertools.count(1)


def event_object() -> Obj:
    """The sync object of a new device event of this process: ``event:<pid>/<n>``."""
    return obj(f"{S.DEVICE_EVENT_PREFIX}{os.getpid()}/{next(_events)}")


class _NullSpan:
    """The span of a probe that records nothing: id 0."""

    __slots__ = ()

    def __enter__(self) -> int:
        return 0

    def __exit__(self, *exc) -> bool:
        return False


_NULL_SPAN = _NullSpan()


class StreamProbe:
    """Records one device stream's work on its lane (docs/probe.md, "Device lanes"): the host
    calls :meth:`launched` at each launch; :meth:`ran`, :meth:`recorded` and :meth:`waited` say
    when an item ran, an event's marker executed, a wait was satisfied, wherever the device's
    times are known (times: monotonic ns). This base records nothing."""

    enabled = False

    def __init__(self, lane: str) -> None:
        self.lane = lane

    def launched(self) -> tuple[int, int]:
        """The new item's span id and launch seq, after the host's release of the launch; (0,
        0) when nothing records."""
        return 0, 0

    def ran(self, name: Name, sid: int, parent: int, seq: int, t0: int, t1: int) -> None:
        """Work ``sid`` (launch ``seq``, child of host span ``parent``) ran from ``t0`` to
        ``t1``."""

    def recorded(self, sid: int, seq: int, event: Obj, generation: int, t: int) -> None:
        """The marker of ``event``'s record ``generation`` executed at ``t``."""

    def waited(self, sid: int, seq: int, event: Obj, generation: int, t0: int, t1: int) -> None:
        """The stream stopped at ``t0`` for ``event``'s record ``generation``, went on at
        ``t1``."""

    def nvtx_begin(self, sid: int, name: Name) -> None:
        """Open the NVTX range of device span ``sid`` (around its launch on CUDA)."""

    def nvtx_end(self, sid: int) -> None:
        """Close the NVTX range of device span ``sid``."""


class Probe:
    """One process's probe. Span ids are unique per run; 0 is "no span" (what this base, the
    no-op probe, returns), and every method accepts it. The SDK's probe records."""

    enabled = False

    def name_thread(self, thread_name: str) -> None:
        """Name the calling thread in the records."""

    def begin(self, span_name: Name, parent: int = 0) -> int:
        """Start a span (it may end on another thread); returns its id."""
        return 0

    def end(self, sid: int) -> None:
        """End span ``sid``."""

    def span(self, span_name: Name, parent: int = 0) -> AbstractContextManager[int]:
        """``with probe.span(NAME) as sid:``; the span ends when the block exits."""
        return _NULL_SPAN

    def set_int(self, sid: int, k: Key, value: int) -> None:
        """An integer attribute of span ``sid``."""

    def set_float(self, sid: int, k: Key, value: float) -> None:
        """A float attribute of span ``sid``."""

    def set_str(self, sid: int, k: Key, value: str) -> None:
        """A string attribute of span ``sid``."""

    def set_ints(self, sid: int, k: Key, values: Sequence[int]) -> None:
        """A list attribute, e.g. the block ids of ``kv.gpu_read``."""

    def release(self, o: Obj, seq: int | None = None, sid: int = 0) -> None:
        """This thread publishes everything it did so far on ``o``. With a ``seq`` (any int64)
        only the acquire of that same seq pairs with it; without one (locks, mutexes) the next
        acquire in time does."""

    def acquire(self, o: Obj, seq: int | None = None, sid: int = 0) -> None:
        """This thread has observed the release of ``o`` with the same ``seq`` (None: the
        latest unkeyed release of ``o``)."""

    def link_context(self, sid: int, traceparent: str, link: bool = False) -> None:
        """Attach a W3C ``traceparent`` received in a message to span ``sid``: as its parent,
        or (``link=True``) as one of its links, e.g. a step span linking the requests it served."""

    def traceparent(self, sid: int, trace_id: bytes) -> str:
        """The W3C ``traceparent`` naming span ``sid`` of ``trace_id``, to put in a message."""
        return format_traceparent(trace_id, sid)

    def stream(self, lane: str) -> StreamProbe:
        """What records a device stream's work on ``lane``
        (:func:`fdprof.semconv.device_lane`)."""
        return StreamProbe(lane)

    def close(self) -> None:
        """Flush and release the sinks (the SDK's ``shutdown`` calls it)."""


class ProxyProbe(Probe):
    """What :func:`get` returns while no probe is set: each call goes to the probe set by then
    (the no-op before), so a holder taken early records once the process is configured."""

    @property
    def enabled(self) -> bool:
        return _target.enabled

    def name_thread(self, thread_name: str) -> None:
        _target.name_thread(thread_name)

    def begin(self, span_name: Name, parent: int = 0) -> int:
        return _target.begin(span_name, parent)

    def end(self, sid: int) -> None:
        _target.end(sid)

    def span(self, span_name: Name, parent: int = 0) -> AbstractContextManager[int]:
        return _target.span(span_name, parent)

    def set_int(self, sid: int, k: Key, value: int) -> None:
        _target.set_int(sid, k, value)

    def set_float(self, sid: int, k: Key, value: float) -> None:
        _target.set_float(sid, k, value)

    def set_str(self, sid: int, k: Key, value: str) -> None:
        _target.set_str(sid, k, value)

    def set_ints(self, sid: int, k: Key, values: Sequence[int]) -> None:
        _target.set_ints(sid, k, values)

    def release(self, o: Obj, seq: int | None = None, sid: int = 0) -> None:
        _target.release(o, seq, sid)

    def acquire(self, o: Obj, seq: int | None = None, sid: int = 0) -> None:
        _target.acquire(o, seq, sid)

    def link_context(self, sid: int, traceparent: str, link: bool = False) -> None:
        _target.link_context(sid, traceparent, link)

    def traceparent(self, sid: int, trace_id: bytes) -> str:
        return _target.traceparent(sid, trace_id)

    def stream(self, lane: str) -> StreamProbe:
        return _target.stream(lane)

    def close(self) -> None:
        """The proxy owns no sink: nothing to close."""


NOOP = Probe()
_PROXY = ProxyProbe()
#: the probe set (the no-op until the SDK sets one), and what get() hands out
_target: Probe = NOOP
_current: Probe = _PROXY


def get() -> Probe:
    """This process's probe: the one set, else a proxy to whatever is set later."""
    return _current


def set_probe(probe: Probe | None) -> Probe:
    """Make ``probe`` this process's probe (None: none, as before configuration); returns the
    probe it replaces (the no-op if none was set). The SDK's ``configure`` calls this."""
    global _target, _current
    previous = _target
    _target = NOOP if probe is None else probe
    _current = _PROXY if probe is None else probe
    return previous
