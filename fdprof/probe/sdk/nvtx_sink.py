"""The NVTX sink: probe spans as NVTX start/end ranges in domain ``fdprof``.

Each span name's category (``swap``, ``execute_model``, ``lock`` ...) is an NVTX category;
the span id is the range's int64 payload, so an Nsight Systems export (or our own capture
library) joins back to the recorded attributes. Start/end ranges, not push/pop, because a
span may end on another thread. Sync events are marks in category ``sync`` whose int64
payload is the sequence number; an unkeyed one (a lock) has no payload.

When no tool is attached the ``nvtx`` package hands out a dummy domain; :func:`open_nvtx_sink`
then returns ``None`` so the probe pays one ``is None`` test and nothing else.
"""

from __future__ import annotations

import threading

from fdprof import semconv as S

DOMAIN = "fdprof"


class NvtxSink:
    """Emits ranges into an enabled ``nvtx.Domain``. Thread-safe."""

    def __init__(self, domain) -> None:
        self._domain = domain
        self._attrs: dict[object, object] = {}
        self._ranges: dict[int, object] = {}
        # attributes objects are reused and mutated (payload): one emitter at a time
        self._lock = threading.Lock()

    def _attributes(self, handle, message: str, category: str):
        attrs = self._attrs.get(handle)
        if attrs is None:
            attrs = self._domain.get_event_attributes(message=message, category=category)
            self._attrs[handle] = attrs
        return attrs

    def begin(self, sid: int, span_name) -> None:
        attrs = self._attributes(span_name, span_name.text, span_name.category)
        with self._lock:
            attrs.payload = sid
            self._ranges[sid] = self._domain.start_range(attrs)

    def end(self, sid: int) -> None:
        range_id = self._ranges.pop(sid, None)
        if range_id is not None:
            self._domain.end_range(range_id)

    def sync(self, o, op: S.SyncOp, seq: int | None) -> None:
        message = f"{op} {o.text}"
        attrs = self._attributes((o, op), message, S.CATEGORY_SYNC)
        with self._lock:
            attrs.payload = seq
            self._domain.mark(attrs)


def open_nvtx_sink() -> NvtxSink | None:
    """A sink on domain ``fdprof``, or ``None`` when no NVTX tool is attached to this process."""
    import nvtx

    domain = nvtx.get_domain(DOMAIN)
    if not getattr(domain, "handle", None):
        return None
    return NvtxSink(domain)
