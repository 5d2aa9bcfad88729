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
from collections.abc import Callable

from fdprof import semconv as S
from fdprof.formats import records as R
from fdprof.formats.records import DEVICE_SPAN_BIT, PID_SHIFT
from fdprof.probe import api
from fdprof.probe import handles as H
from fdprof.probe.api import Name, Obj, StreamProbe


def _new_id_counter() -> itertools.count:
    return itertools.count((os.getpid() << PID_SHIFT) | DEVICE_SPAN_BIT | 1)


#: this process's device span ids (started again in a forked child: its pid is another)
_ids = _new_id_counter()
_RELEASE, _ACQUIRE = int(R.SyncCode.RELEASE), int(R.SyncCode.ACQUIRE)


def _after_fork_in_child() -> None:
    global _ids
    _ids = _new_id_counter()


os.register_at_fork(after_in_child=_after_fork_in_child)


class RecordingStream(StreamProbe):
    """Records one stream's items on its lane, through the process's recorder and NVTX sink
    (either may be None, not both); ``release`` is the probe's own, the host's side of a
    launch."""

    enabled = True

    def __init__(self, lane: str, recorder, nvtx, release: Callable[[Obj, int], None]) -> None:
        super().__init__(lane)
        self._rec = recorder
        self._nvtx = nvtx
        self._release = release
        self._launches = itertools.count(1)
        self._launch = api.obj(f"{S.DEVICE_LAUNCH_PREFIX}{lane}")
        if recorder is not None:
            self._launch_id = recorder.intern(self._launch.text)
            self._lane_key = recorder.intern(S.LANE)

    def launched(self) -> tuple[int, int]:
        seq = next(self._launches)
        self._release(self._launch, seq)
        return next(_ids), seq

    def _begin(self, sid: int, parent: int, name: Name, seq: int, t0: int) -> None:
        rec = self._rec
        rec.span_begin(sid, parent, rec.intern(name.text), t0)
        rec.attr_str(sid, self._lane_key, self.lane)
        rec.sync(sid, self._launch_id, _ACQUIRE, seq, t0, True)

    def ran(self, name: Name, sid: int, parent: int, seq: int, t0: int, t1: int) -> None:
        """(:meth:`_begin` inlined: this runs once per device span.)"""
        rec = self._rec
        if rec is not None:
            rec.span_begin(sid, parent, rec.intern(name.text), t0)
            rec.attr_str(sid, self._lane_key, self.lane)
            rec.sync(sid, self._launch_id, _ACQUIRE, seq, t0, True)
            rec.span_end(sid, t1)

    def recorded(self, sid: int, seq: int, event: Obj, generation: int, t: int) -> None:
        if self._rec is not None:
            rec = self._rec
            self._begin(sid, 0, H.DEVICE_EVENT_RECORD, seq, t)
            rec.sync(sid, rec.intern(event.text), _RELEASE, generation, t, True)
            rec.span_end(sid, t)

    def waited(self, sid: int, seq: int, event: Obj, generation: int, t0: int, t1: int) -> None:
        if self._rec is not None:
            rec = self._rec
            self._begin(sid, 0, H.DEVICE_EVENT_WAIT, seq, t0)
            rec.sync(sid, rec.intern(event.text), _ACQUIRE, generation, t1, True)
            rec.span_end(sid, t1)

    def nvtx_begin(self, sid: int, name: Name) -> None:
        if self._nvtx is not None:
            self._nvtx.begin(sid, name)

    def nvtx_end(self, sid: int) -> None:
        if self._nvtx is not None:
            self._nvtx.end(sid)
