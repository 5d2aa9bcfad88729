"""The SDK's probe: the API's :class:`~fdprof.probe.api.Probe` fanned out to its sinks, the
native recorder and NVTX.

With the recorder as the only sink, ``begin``/``end``/``span``/``set_*``/``release``/``acquire``
are the recorder's own (C) methods, bound on the instance: no Python frame between the engine
and the record. With NVTX on, the methods below fan out to both.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from contextlib import AbstractContextManager

from fdprof import semconv as S
from fdprof.formats.records import PID_SHIFT
from fdprof.probe.api import Key, Name, Obj, Probe, StreamProbe
from fdprof.probe.context import format_traceparent, parse_traceparent
from fdprof.probe.sdk.device import RecordingStream
from fdprof.probe.sdk.nvtx_sink import NvtxSink
from fdprof.probe.sdk.recorder import SpanScope


class RecordingProbe(Probe):
    """One process's probe with at least one sink. Span ids are unique per run:
    ``pid << 40 | counter``."""

    enabled = True

    def __init__(self, recorder=None, nvtx_sink: NvtxSink | None = None) -> None:
        if recorder is None and nvtx_sink is None:
            raise ValueError("a recording probe needs a sink (the no-op probe is the API's)")
        self.recorder = recorder
        self.nvtx = nvtx_sink
        self._ids = itertools.count((os.getpid() << PID_SHIFT) + 1)
        self._rooted: set[int] = set()
        if nvtx_sink is None:
            for method in _RECORDER_METHODS:
                setattr(self, method, getattr(recorder, method))

    def name_thread(self, thread_name: str) -> None:
        if self.recorder is not None:
            self.recorder.name_thread(thread_name)

    def begin(self, span_name: Name, parent: int = 0) -> int:
        rec = self.recorder
        sid = rec.begin(span_name, parent) if rec is not None else next(self._ids)
        self.nvtx.begin(sid, span_name)
        return sid

    def end(self, sid: int) -> None:
        self.nvtx.end(sid)
        if self.recorder is not None:
            self.recorder.end(sid)

    def span(self, span_name: Name, parent: int = 0) -> AbstractContextManager[int]:
        return SpanScope(self, span_name, parent)

    def set_int(self, sid: int, k: Key, value: int) -> None:
        if self.recorder is not None:
            self.recorder.set_int(sid, k, value)

    def set_float(self, sid: int, k: Key, value: float) -> None:
        if self.recorder is not None:
            self.recorder.set_float(sid, k, value)

    def set_str(self, sid: int, k: Key, value: str) -> None:
        if self.recorder is not None:
            self.recorder.set_str(sid, k, value)

    def set_ints(self, sid: int, k: Key, values: Sequence[int]) -> None:
        if self.recorder is not None:
            self.recorder.set_ints(sid, k, values)

    def release(self, o: Obj, seq: int | None = None, sid: int = 0) -> None:
        if self.recorder is not None:
            self.recorder.release(o, seq, sid)
        self.nvtx.sync(o, S.SyncOp.RELEASE, seq)

    def acquire(self, o: Obj, seq: int | None = None, sid: int = 0) -> None:
        if self.recorder is not None:
            self.recorder.acquire(o, seq, sid)
        self.nvtx.sync(o, S.SyncOp.ACQUIRE, seq)

    def link_context(self, sid: int, traceparent: str, link: bool = False) -> None:
        if self.recorder is not None and traceparent:
            trace_id, span_id = parse_traceparent(traceparent)
            self.recorder.context(sid, trace_id, span_id, link)

    def traceparent(self, sid: int, trace_id: bytes) -> str:
        """The first call for a span records that ``sid`` belongs to ``trace_id`` (a CONTEXT
        record with remote span 0: "trace id only, no parent"), so the exported root span
        carries the trace id its remote children name."""
        if self.recorder is not None and sid not in self._rooted:
            self._rooted.add(sid)
            self.recorder.context(sid, trace_id, 0, False)
        return format_traceparent(trace_id, sid)

    def stream(self, lane: str) -> StreamProbe:
        return RecordingStream(lane, self.recorder, self.nvtx, self.release)

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.close()


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
