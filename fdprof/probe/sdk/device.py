"""Device work on device lanes: what a stream ran, when, and the edges that order it.

Why: an asynchronous host call says nothing about when its work ran or what it was ordered
with. Each piece of device work is a span on its stream's lane (``fd.lane``, see
:func:`fdprof.semconv.device_lane`) with its real execution interval, measured by whoever
knows it: the CPU twin's stream thread as the work runs, CUDA timing events mapped to the host
clock (``fdprof/engine/device.py``; the mapping and its error are in docs/probe.md). The edges are
exactly what a device guarantees, each a keyed sync (an object per stream or event, ``seq`` a
per-object counter), so happens-before sees that and nothing more:

- launch -> execution: the host releases ``launch:<lane>`` seq n when it launches the stream's
  n-th item; the item, on the device lane, acquires it as it starts;
- event record -> wait: the marker releases ``event:<pid>/<n>`` seq g (the g-th record) where
  it executes on its stream; a stream waiting on it acquires g where the wait is satisfied,
  the host where ``synchronize``/``query`` returns;
- synchronize -> host: a stream's synchronisation is a record of its own event and a host wait.

Every one of them is recorded keyed (the record's SYNC_KEYED flag): only the same object's
same seq pairs.

The records go through the recorder's low-level writers, which take explicit times: device
spans begin and end when the device says, not when the record is written. Names, keys and
objects are interned (a lookup after the first time), so recording an item costs its records
and nothing it could avoid allocating. The NVTX range of a device span carries its span id as
payload: around the launch on CUDA (where Nsight projects it onto the kernels it launched),
around the execution on the CPU twin.
"""

from __future__ import annotations

import itertools
import os

from fdprof import semconv as S
from fdprof.formats import records as R
from fdprof.probe import api
from fdprof.probe.api import Name, Obj, Probe
from fdprof.probe.sdk.recorder import PID_SHIFT

#: device span ids are ``pid << PID_SHIFT | DEVICE_SPAN_BIT | n``: unique per run, and apart
#: from the ids the recorder hands out (it counts from 1 below this bit)
DEVICE_SPAN_BIT = 1 << (PID_SHIFT - 1)

EVENT_RECORD = api.name(S.DEVICE_EVENT_RECORD, S.CATEGORY_DEVICE)
EVENT_WAIT = api.name(S.DEVICE_EVENT_WAIT, S.CATEGORY_DEVICE)


def _new_id_counter() -> itertools.count:
    return itertools.count((os.getpid() << PID_SHIFT) | DEVICE_SPAN_BIT | 1)


#: this process's device span ids (started again in a forked child: its pid is another)
_ids = _new_id_counter()
_events = itertools.count(1)
_RELEASE, _ACQUIRE = int(R.SyncOp.RELEASE), int(R.SyncOp.ACQUIRE)


def _after_fork_in_child() -> None:
    global _ids
    _ids = _new_id_counter()


os.register_at_fork(after_in_child=_after_fork_in_child)


def event_object() -> Obj:
    """The sync object of a new event of this process: ``event:<pid>/<n>``."""
    return api.obj(f"{S.DEVICE_EVENT_PREFIX}{os.getpid()}/{next(_events)}")


class StreamProbe:
    """Records one stream's items on its lane. ``launched`` runs on the host at the launch;
    ``ran``/``recorded``/``waited`` wherever the item's device times are known (the host waiting
    on an event is the probe's own ``acquire`` of :attr:`event obj <event_object>`)."""

    __slots__ = ("lane", "enabled", "_rec", "_nvtx", "_release", "_launches", "_launch",
                 "_launch_id", "_lane_key")  # fmt: skip

    def __init__(self, probe: Probe, lane: str) -> None:
        self.lane = lane
        self._rec = probe._rec
        self._nvtx = probe._nvtx
        self._release = probe.release
        self.enabled = probe.enabled
        self._launches = itertools.count(1)
        self._launch = api.obj(f"{S.DEVICE_LAUNCH_PREFIX}{lane}")
        if self._rec is not None:
            self._launch_id = self._rec.intern(self._launch.text)
            self._lane_key = self._rec.intern(S.LANE)

    def launched(self) -> tuple[int, int]:
        """The new item's span id and launch seq; the host's release of the launch. (0, 0) and
        nothing recorded when the probe is off."""
        if not self.enabled:
            return 0, 0
        seq = next(self._launches)
        self._release(self._launch, seq)
        return next(_ids), seq

    def _begin(self, sid: int, parent: int, name: Name, seq: int, t0: int) -> None:
        rec = self._rec
        rec.span_begin(sid, parent, rec.intern(name.text), t0)
        rec.attr_str(sid, self._lane_key, self.lane)
        rec.sync(sid, self._launch_id, _ACQUIRE, seq, t0, True)

    def ran(self, name: Name, sid: int, parent: int, seq: int, t0: int, t1: int) -> None:
        """Work ``sid`` ran from ``t0`` to ``t1`` (monotonic ns). (:meth:`_begin` inlined: this
        runs once per device span.)"""
        rec = self._rec
        if rec is not None:
            rec.span_begin(sid, parent, rec.intern(name.text), t0)
            rec.attr_str(sid, self._lane_key, self.lane)
            rec.sync(sid, self._launch_id, _ACQUIRE, seq, t0, True)
            rec.span_end(sid, t1)

    def recorded(self, sid: int, seq: int, event: Obj, generation: int, t: int) -> None:
        """The marker of ``event``'s record ``generation`` executed at ``t``."""
        if self._rec is not None:
            rec = self._rec
            self._begin(sid, 0, EVENT_RECORD, seq, t)
            rec.sync(sid, rec.intern(event.text), _RELEASE, generation, t, True)
            rec.span_end(sid, t)

    def waited(self, sid: int, seq: int, event: Obj, generation: int, t0: int, t1: int) -> None:
        """The stream stopped at ``t0`` for ``event``'s record ``generation``, went on at
        ``t1``."""
        if self._rec is not None:
            rec = self._rec
            self._begin(sid, 0, EVENT_WAIT, seq, t0)
            rec.sync(sid, rec.intern(event.text), _ACQUIRE, generation, t1, True)
            rec.span_end(sid, t1)

    def nvtx_begin(self, sid: int, name: Name) -> None:
        if self._nvtx is not None:
            self._nvtx.begin(sid, name)

    def nvtx_end(self, sid: int) -> None:
        if self._nvtx is not None:
            self._nvtx.end(sid)
