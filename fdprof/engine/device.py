"""Asynchronous device work: streams, launches, events, synchronisation.

Why: a GPU engine's host call returns once its work is *queued*; what it queued runs later, in
stream order, and is ordered with anything else only by events and synchronisation. The bugs
fdprof hunts (a copy reading blocks a kernel still writes, a lock around a host call that does
not cover the kernel) live in that gap, so the engine must have it too, on a CPU as on CUDA.

One interface, two implementations with the same semantics (``tests/engine/test_device.py``
runs the same tests on both):

- :class:`CudaDevice`: torch streams and events. ``launch`` runs the callable on the host under
  the stream, so the kernels and copies it enqueues go to that stream.
- :class:`CpuDevice`, the CPU twin: a stream is a FIFO executor thread; ``launch`` enqueues the
  callable and returns at once; an event record is a marker in the FIFO, and a stream waiting on
  an event blocks its FIFO until that marker has executed.

What is guaranteed, as CUDA guarantees it: work on one stream runs in launch order; work runs
after the host code before its launch; ``wait(event)`` orders the waiting stream's later work
after everything before the event's most recent ``record`` *at the time of the wait call*
(a later re-record is not waited for; a never-recorded event is complete); ``Event.synchronize``
and ``Stream.synchronize`` return to the host after that work. Nothing else is: two streams
without an event between them run concurrently (they really overlap on the CPU twin).

Every item is recorded through the probe's :class:`fdprof.probe.StreamProbe` (its span on the
stream's lane with the interval it really ran, and the launch/event edges), when the process's
probe records. A stream takes its recorder from the probe set when the stream is made: make
streams after the process is configured (``fdprof.probe.sdk.configure``).

Between processes, a :class:`SharedEvent` is recorded at explicit, increasing generations
(a step's sequence number, a task id) and waited for at one: the waiter names the generation
it needs, as it learnt it from a message (CPU twin: a shared-memory slot the marker writes and
waiters poll; CUDA: an interprocess event whose recorder publishes each recorded generation in
that slot, so a waiter knows the event's latest record covers the one it needs).

A failure inside launched work does not raise at ``launch`` (the host has moved on, as with a
CUDA error): the CPU twin keeps the first exception and raises :class:`DeviceError` from the
next synchronisation of that stream or an event recorded after it; CUDA raises torch's own
error there.
"""

from __future__ import annotations

import collections
import itertools
import os
import queue
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fdprof import probe as fdprobe
from fdprof import semconv as S
from fdprof.engine.ipc import backoff
from fdprof.probe import Name, Probe, event_object


class DeviceError(RuntimeError):
    """Launched work failed; raised where the host next synchronises with it."""


class Event(ABC):
    """A marker recorded on a stream; complete once the stream has run everything before it.
    Its records are counted on the host (``generation``): a wait is for the record made before
    it, and the probe pairs each wait with that record."""

    def __init__(self, probe: Probe) -> None:
        self.obj = event_object()
        self._probe = probe
        self._lock = threading.Lock()
        self._recorded = 0

    def _next_record(self, generation: int | None = None) -> int:
        """The generation of a new record: the next count, or the one a shared event is given."""
        with self._lock:
            self._recorded = self._recorded + 1 if generation is None else generation
            return self._recorded

    @property
    def generation(self) -> int:
        """How many times it has been recorded (0: never; it is then complete)."""
        return self._recorded

    def synchronize(self, generation: int | None = None) -> None:
        """Block the host until the most recent record (or record ``generation`` of a shared
        event) has completed."""
        generation = self._recorded if generation is None else generation
        if generation:
            self._host_wait(generation)
            self._probe.acquire(self.obj, generation)

    def query(self, generation: int | None = None) -> bool:
        """Whether the most recent record (or ``generation``) has completed (never recorded:
        True)."""
        generation = self._recorded if generation is None else generation
        if not generation:
            return True
        done = self._completed(generation)
        if done:
            self._probe.acquire(self.obj, generation)
        return done

    @abstractmethod
    def _host_wait(self, generation: int) -> None: ...

    @abstractmethod
    def _completed(self, generation: int) -> bool: ...


class Stream(ABC):
    """An in-order queue of device work, on lane :attr:`lane`."""

    def __init__(self, lane: str, probe: Probe, sync_event: Event) -> None:
        self.lane = lane
        self.probe = probe.stream(lane)
        self._sync_event = sync_event

    @abstractmethod
    def launch(self, name: Name, fn: Callable[..., Any], *args: Any, parent: int = 0) -> int:
        """Queue ``fn(*args)`` as span ``name`` (child of host span ``parent``) and return its
        span id (0 when the probe is off; set its attributes, e.g. the KV blocks it touches,
        from the host) without waiting for it."""

    @abstractmethod
    def record(self, event: Event, generation: int | None = None) -> None:
        """Record ``event`` here: it completes when the work launched so far has run. A
        :class:`SharedEvent` is recorded at the ``generation`` given (increasing)."""

    @abstractmethod
    def wait(self, event: Event, generation: int | None = None) -> None:
        """Later work on this stream waits for ``event``'s most recent record, or record
        ``generation`` of a shared event (the host goes on)."""

    def synchronize(self) -> None:
        """Block the host until the work launched so far on this stream has run: a record of
        the stream's own event and a host wait on it, so the probe sees the same edges."""
        self.record(self._sync_event)
        self._sync_event.synchronize()

    @abstractmethod
    def close(self) -> None:
        """Let the stream run what it was given; no more launches after this."""


class Device(ABC):
    """One device: makes streams and events of its kind."""

    kind: str

    def __init__(self, index: int = 0) -> None:
        self.index = index
        self.probe = fdprobe.get()
        self._streams: list[Stream] = []
        self._ordinals = itertools.count(1)

    def _next_lane(self) -> str:
        """The lane of this process's next stream on this device (streams are numbered 1, 2 ...
        in the order the process makes them)."""
        return S.device_lane(os.getpid(), self.kind, self.index, next(self._ordinals))

    def stream(self) -> Stream:
        s = self._new_stream(self._next_lane())
        self._streams.append(s)
        return s

    @abstractmethod
    def _new_stream(self, lane: str) -> Stream: ...

    @abstractmethod
    def event(self) -> Event: ...

    @abstractmethod
    def shared_event(self, name: str, slot: Path, torch_event: Any = None) -> SharedEvent:
        """The event ``name`` that several processes record and wait on, its generations in the
        shared file ``slot`` (made beforehand, zeroed); on CUDA ``torch_event`` is the
        interprocess event (made by one process, passed to the others)."""

    def synchronize(self) -> None:
        """Block the host until every stream of this device has run its work."""
        for s in self._streams:
            s.synchronize()

    def close(self) -> None:
        """Let every stream run what it was given and release what it holds (threads on the
        CPU). Errors stay unraised: whoever cared synchronised."""
        for s in self._streams:
            s.close()
        self._streams.clear()


# -- the CPU twin ---------------------------------------------------------------------------


class CpuEvent(Event):
    """Completions are counted where the marker executes; waiters block on a condition."""

    def __init__(self, probe: Probe) -> None:
        super().__init__(probe)
        self._cond = threading.Condition()
        self._done = 0
        self._error: BaseException | None = None

    def _complete(self, generation: int, error: BaseException | None) -> None:
        with self._cond:
            self._done = max(self._done, generation)
            self._error = error
            self._cond.notify_all()

    def _host_wait(self, generation: int) -> None:
        """Block until record ``generation`` has completed; raise if work before it failed."""
        with self._cond:
            self._cond.wait_for(lambda: self._done >= generation)
            error = self._error
        if error is not None:
            raise DeviceError(f"device work failed: {error!r}") from error

    def _completed(self, generation: int) -> bool:
        with self._cond:
            return self._done >= generation


class SharedEvent(Event):
    """An event of several processes, recorded at explicit generations (module doc). Its sync
    object is named by ``name``, the same in every process: ``event:<name>``."""

    def __init__(self, probe: Probe, name: str, slot: Path) -> None:
        super().__init__(probe)
        self.obj = fdprobe.obj(f"{S.DEVICE_EVENT_PREFIX}{name}")
        self._slot = np.memmap(slot, dtype=np.int64, mode="r+", shape=(1,))

    def _publish(self, generation: int) -> None:
        self._slot[0] = max(int(self._slot[0]), generation)

    def _reached(self, generation: int) -> bool:
        return int(self._slot[0]) >= generation

    def _poll(self, generation: int) -> None:
        for _ in backoff():  # a waiter on a shared event looks at its slot
            if self._reached(generation):
                return

    def record_host(self, generation: int) -> None:
        """Record ``generation`` from the host, after everything this thread has done so far
        (a synchronous worker's step, which ran on the host or on the current stream): the
        thread releases the event's object there, then publishes the generation."""
        self._mark_host()
        generation = self._next_record(generation)
        self._probe.release(self.obj, generation)
        self._publish(generation)

    def _mark_host(self) -> None:
        """CUDA: record the device event on the current stream (CPU: nothing is queued)."""


class CpuSharedEvent(SharedEvent):
    """CPU twin: the slot holds the highest generation whose marker has executed."""

    def _complete(self, generation: int, error: BaseException | None) -> None:
        self._publish(generation)

    def _host_wait(self, generation: int) -> None:
        self._poll(generation)

    def _completed(self, generation: int) -> bool:
        return self._reached(generation)


_WORK, _RECORD, _WAIT, _STOP = range(4)


class CpuStream(Stream):
    """A FIFO executor thread. Items: ``(_WORK, fn, args, name, sid, seq, parent)``,
    ``(_RECORD | _WAIT, event, generation, sid, seq)``, ``(_STOP,)``."""

    def __init__(self, lane: str, probe: Probe, sync_event: Event) -> None:
        super().__init__(lane, probe, sync_event)
        self._fifo: queue.SimpleQueue[tuple] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"stream {lane}", daemon=True)
        self._thread.start()

    def launch(self, name: Name, fn: Callable[..., Any], *args: Any, parent: int = 0) -> int:
        sid, seq = self.probe.launched()
        self._fifo.put((_WORK, fn, args, name, sid, seq, parent))
        return sid

    def record(self, event: Event, generation: int | None = None) -> None:
        assert isinstance(event, CpuEvent | CpuSharedEvent), "a CPU stream records CPU events"
        assert generation is not None or not isinstance(event, SharedEvent), "needs a generation"
        generation = event._next_record(generation)
        self._fifo.put((_RECORD, event, generation, *self.probe.launched()))

    def wait(self, event: Event, generation: int | None = None) -> None:
        assert isinstance(event, CpuEvent | CpuSharedEvent), "a CPU stream waits on CPU events"
        generation = event.generation if generation is None else generation
        if generation:
            self._fifo.put((_WAIT, event, generation, *self.probe.launched()))

    def close(self) -> None:
        self._fifo.put((_STOP,))
        self._thread.join()

    def _run(self) -> None:
        sp = self.probe
        clock = time.monotonic_ns
        while True:
            item = self._fifo.get()
            kind = item[0]
            if kind == _WORK:
                _, fn, args, name, sid, seq, parent = item
                if self._error is not None:
                    continue  # a failed stream runs nothing more (a sticky error)
                sp.nvtx_begin(sid, name)
                t0 = clock()
                try:
                    fn(*args)
                except BaseException as exc:  # noqa: BLE001 - handed to the host
                    self._error = exc
                t1 = clock()
                sp.nvtx_end(sid)
                sp.ran(name, sid, parent, seq, t0, t1)
            elif kind == _RECORD:
                _, event, generation, sid, seq = item
                sp.recorded(sid, seq, event.obj, generation, clock())
                event._complete(generation, self._error)
            elif kind == _WAIT:
                _, event, generation, sid, seq = item
                t0 = clock()
                try:
                    event._host_wait(generation)
                except DeviceError as exc:
                    self._error = self._error or exc
                sp.waited(sid, seq, event.obj, generation, t0, clock())
            else:
                return


class CpuDevice(Device):
    kind = S.DEVICE_CPU

    def _new_stream(self, lane: str) -> CpuStream:
        return CpuStream(lane, self.probe, self.event())

    def event(self) -> CpuEvent:
        return CpuEvent(self.probe)

    def shared_event(self, name: str, slot: Path, torch_event: Any = None) -> CpuSharedEvent:
        return CpuSharedEvent(self.probe, name, slot)


# -- CUDA -----------------------------------------------------------------------------------


class CudaClock:
    """Maps CUDA timing events to the host's monotonic clock (docs/probe.md, "Device lanes").

    An anchor event is recorded on an idle device between two host clock reads; its device
    time is taken to be their midpoint, so a mapped time is off by at most ``error_ns`` (half
    that interval) plus ``elapsed_time``'s resolution (about 0.5 us) plus the drift between
    the GPU's and the host's clocks since the anchor."""

    def __init__(self, index: int) -> None:
        torch.cuda.synchronize(index)
        self.anchor = torch.cuda.Event(enable_timing=True)
        before = time.monotonic_ns()
        self.anchor.record(torch.cuda.current_stream(index))
        self.anchor.synchronize()
        after = time.monotonic_ns()
        self.host_ns = (before + after) // 2
        self.error_ns = (after - before + 1) // 2

    def host_time(self, event) -> int:
        """The host time of a completed timing event."""
        return self.host_ns + round(self.anchor.elapsed_time(event) * 1e6)


class CudaEvent(Event):
    def __init__(self, probe: Probe, torch_event: Any = None) -> None:
        super().__init__(probe)
        self.torch_event = torch.cuda.Event() if torch_event is None else torch_event

    def _host_wait(self, generation: int) -> None:
        self.torch_event.synchronize()

    def _completed(self, generation: int) -> bool:
        return self.torch_event.query()


class CudaSharedEvent(SharedEvent):
    """CUDA: an interprocess event; the slot holds the highest generation *recorded* (published
    by the recording host after the record call), so a waiter that sees its generation there
    knows the event's latest record covers it (records of one event follow stream order)."""

    def __init__(self, probe: Probe, name: str, slot: Path, torch_event: Any) -> None:
        super().__init__(probe, name, slot)
        self.torch_event = torch_event

    def _mark_host(self) -> None:
        self.torch_event.record(torch.cuda.current_stream())

    def _host_wait(self, generation: int) -> None:
        self._poll(generation)
        self.torch_event.synchronize()

    def _completed(self, generation: int) -> bool:
        return self._reached(generation) and self.torch_event.query()


def interprocess_event() -> Any:
    """A CUDA event other processes can open (torch pickles it as an IPC handle)."""
    return torch.cuda.Event(interprocess=True)


class CudaStream(Stream):
    """A torch CUDA stream; ``launch`` runs the callable under it, so what it enqueues runs on
    it. Tensors made on another stream and used here need ``Tensor.record_stream`` (torch's
    caching allocator would otherwise reuse their memory too early).

    With the probe on, each item is bracketed by timing events; items are recorded once their
    last timing event has completed (checked at each launch and synchronisation), their times
    mapped by the device's :class:`CudaClock`."""

    def __init__(self, lane: str, probe: Probe, sync_event: Event, device: CudaDevice) -> None:
        super().__init__(lane, probe, sync_event)
        self.torch_stream = torch.cuda.Stream(device=device.index)
        self._device = device
        self._pending: collections.deque[tuple] = collections.deque()

    def launch(self, name: Name, fn: Callable[..., Any], *args: Any, parent: int = 0) -> int:
        sp = self.probe
        sid, seq = sp.launched()
        with torch.cuda.stream(self.torch_stream):
            if not sp.enabled:
                fn(*args)
                return 0
            start, end = self._device.timer(), self._device.timer()
            sp.nvtx_begin(sid, name)  # around the launch: Nsight projects it onto the kernels
            start.record(self.torch_stream)
            fn(*args)
            end.record(self.torch_stream)
            sp.nvtx_end(sid)
        self._pending.append((_WORK, end, start, name, sid, seq, parent))
        self.collect()
        return sid

    def record(self, event: Event, generation: int | None = None) -> None:
        assert isinstance(event, CudaEvent | CudaSharedEvent), "a CUDA stream records CUDA events"
        event.torch_event.record(self.torch_stream)
        generation = event._next_record(generation)
        if isinstance(event, CudaSharedEvent):
            event._publish(generation)
        if self.probe.enabled:
            mark = self._device.timer()
            mark.record(self.torch_stream)
            self._pending.append((_RECORD, mark, event, generation, *self.probe.launched()))

    def wait(self, event: Event, generation: int | None = None) -> None:
        assert isinstance(event, CudaEvent | CudaSharedEvent), "a CUDA stream waits on CUDA events"
        generation = event.generation if generation is None else generation
        if not generation:
            return  # CUDA: waiting on an event never recorded waits for nothing
        if isinstance(event, CudaSharedEvent):
            event._poll(generation)  # its latest record must cover the generation we need
        if not self.probe.enabled:
            self.torch_stream.wait_event(event.torch_event)
            return
        before, after = self._device.timer(), self._device.timer()
        before.record(self.torch_stream)
        self.torch_stream.wait_event(event.torch_event)
        after.record(self.torch_stream)
        self._pending.append((_WAIT, after, before, event, generation, *self.probe.launched()))

    def synchronize(self) -> None:
        super().synchronize()
        self.collect()

    def close(self) -> None:
        self.synchronize()

    def collect(self) -> None:
        """Record the items whose timing events have completed, in stream order."""
        sp, clock, pool = self.probe, self._device.clock, self._device.timers
        while self._pending and self._pending[0][1].query():
            item = self._pending.popleft()
            kind, last = item[0], item[1]
            if kind == _WORK:
                _, _, start, name, sid, seq, parent = item
                sp.ran(name, sid, parent, seq, clock.host_time(start), clock.host_time(last))
                pool.append(start)
            elif kind == _RECORD:
                _, _, event, generation, sid, seq = item
                sp.recorded(sid, seq, event.obj, generation, clock.host_time(last))
            else:
                _, _, before, event, generation, sid, seq = item
                t0, t1 = clock.host_time(before), clock.host_time(last)
                sp.waited(sid, seq, event.obj, generation, t0, t1)
                pool.append(before)
            pool.append(last)


class CudaDevice(Device):
    kind = S.DEVICE_CUDA

    def __init__(self, index: int = 0) -> None:
        if not torch.cuda.is_available():
            raise DeviceError("CUDA is not available on this machine")
        super().__init__(index)
        self.clock = CudaClock(index) if self.probe.enabled else None
        #: timing events free for reuse (returned once an item's times are read)
        self.timers: list = []

    def timer(self):
        return self.timers.pop() if self.timers else torch.cuda.Event(enable_timing=True)

    def _new_stream(self, lane: str) -> CudaStream:
        return CudaStream(lane, self.probe, self.event(), self)

    def event(self) -> CudaEvent:
        return CudaEvent(self.probe)

    def shared_event(self, name: str, slot: Path, torch_event: Any = None) -> CudaSharedEvent:
        if torch_event is None:
            raise DeviceError(f"shared event {name}: CUDA needs the interprocess event")
        return CudaSharedEvent(self.probe, name, slot, torch_event)


def open_device(kind: str, index: int = 0) -> Device:
    """The device of ``kind`` (``cpu`` or ``cuda``) and ``index``."""
    if kind == S.DEVICE_CUDA:
        return CudaDevice(index)
    if kind == S.DEVICE_CPU:
        return CpuDevice(index)
    raise ValueError(f"device kind must be one of {S.DEVICE_KINDS}, not {kind!r}")
