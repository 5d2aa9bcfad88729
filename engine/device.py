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

A failure inside launched work does not raise at ``launch`` (the host has moved on, as with a
CUDA error): the CPU twin keeps the first exception and raises :class:`DeviceError` from the
next synchronisation of that stream or an event recorded after it.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch

from fdprof import semconv as S


class DeviceError(RuntimeError):
    """Launched work failed; raised where the host next synchronises with it."""


class Event(ABC):
    """A marker recorded on a stream; complete once the stream has run everything before it."""

    @abstractmethod
    def synchronize(self) -> None:
        """Block the host until the most recent record has completed."""

    @abstractmethod
    def query(self) -> bool:
        """Whether the most recent record has completed (never recorded: True)."""


class Stream(ABC):
    """An in-order queue of device work, on lane :attr:`lane`."""

    def __init__(self, lane: str) -> None:
        self.lane = lane

    @abstractmethod
    def launch(self, fn: Callable[..., Any], *args: Any) -> None:
        """Queue ``fn(*args)`` on this stream and return without waiting for it."""

    @abstractmethod
    def record(self, event: Event) -> None:
        """Record ``event`` here: it completes when the work launched so far has run."""

    @abstractmethod
    def wait(self, event: Event) -> None:
        """Later work on this stream waits for ``event``'s most recent record (host goes on)."""

    @abstractmethod
    def synchronize(self) -> None:
        """Block the host until the work launched so far on this stream has run."""


class Device(ABC):
    """One device: makes streams and events of its kind."""

    kind: str

    def __init__(self, index: int = 0) -> None:
        self.index = index
        self._streams: list[Stream] = []
        self._ordinals = itertools.count(1)

    def _next_lane(self) -> str:
        """The lane of this process's next stream on this device (streams are numbered 1, 2 ...
        in the order the process makes them)."""
        return S.device_lane(os.getpid(), self.kind, self.index, next(self._ordinals))

    def stream(self) -> Stream:
        s = self._new_stream()
        self._streams.append(s)
        return s

    @abstractmethod
    def _new_stream(self) -> Stream: ...

    @abstractmethod
    def event(self) -> Event: ...

    def synchronize(self) -> None:
        """Block the host until every stream of this device has run its work."""
        for s in self._streams:
            s.synchronize()

    def close(self) -> None:
        """Finish every stream's work and release what the streams hold (threads on the CPU)."""
        self.synchronize()


# -- the CPU twin ---------------------------------------------------------------------------


class CpuEvent(Event):
    """Counts records (host side, at the call) and completions (stream side, at the marker)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._recorded = 0
        self._completed = 0
        self._error: BaseException | None = None

    def _next_record(self) -> int:
        with self._cond:
            self._recorded += 1
            return self._recorded

    def _complete(self, generation: int, error: BaseException | None) -> None:
        with self._cond:
            self._completed = max(self._completed, generation)
            self._error = error
            self._cond.notify_all()

    def _await(self, generation: int) -> None:
        """Block until record ``generation`` has completed; raise if work before it failed."""
        with self._cond:
            self._cond.wait_for(lambda: self._completed >= generation)
            error = self._error
        if error is not None:
            raise DeviceError(f"device work failed: {error!r}") from error

    def synchronize(self) -> None:
        with self._cond:
            target = self._recorded
        self._await(target)

    def query(self) -> bool:
        with self._cond:
            return self._completed >= self._recorded


_WORK, _RECORD, _WAIT, _STOP = range(4)


class CpuStream(Stream):
    """A FIFO executor thread. Items are ``(kind, a, b)``: work ``(fn, args)``, a record
    ``(event, generation)``, a wait ``(event, generation)``."""

    def __init__(self, lane: str) -> None:
        super().__init__(lane)
        self._fifo: queue.SimpleQueue[tuple[int, Any, Any]] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"stream {lane}", daemon=True)
        self._thread.start()

    def launch(self, fn: Callable[..., Any], *args: Any) -> None:
        self._fifo.put((_WORK, fn, args))

    def record(self, event: Event) -> None:
        assert isinstance(event, CpuEvent), "a CPU stream records CPU events"
        self._fifo.put((_RECORD, event, event._next_record()))

    def wait(self, event: Event) -> None:
        assert isinstance(event, CpuEvent), "a CPU stream waits on CPU events"
        with event._cond:
            generation = event._recorded
        if generation:
            self._fifo.put((_WAIT, event, generation))

    def synchronize(self) -> None:
        marker = CpuEvent()
        self.record(marker)
        marker.synchronize()

    def close(self) -> None:
        self._fifo.put((_STOP, None, None))
        self._thread.join()

    def _run(self) -> None:
        while True:
            kind, a, b = self._fifo.get()
            if kind == _WORK:
                if self._error is None:  # a failed stream runs nothing more (a sticky error)
                    try:
                        a(*b)
                    except BaseException as exc:  # noqa: BLE001 - handed to the host
                        self._error = exc
            elif kind == _RECORD:
                a._complete(b, self._error)
            elif kind == _WAIT:
                try:
                    a._await(b)
                except DeviceError as exc:
                    self._error = self._error or exc
            else:
                return


class CpuDevice(Device):
    kind = S.DEVICE_CPU

    def _new_stream(self) -> CpuStream:
        return CpuStream(self._next_lane())

    def event(self) -> CpuEvent:
        return CpuEvent()

    def close(self) -> None:
        """Let every stream run what it was given, then stop its thread (errors stay unraised:
        whoever cared synchronised)."""
        for s in self._streams:
            s.close()
        self._streams.clear()


# -- CUDA -----------------------------------------------------------------------------------


class CudaEvent(Event):
    def __init__(self, torch_event) -> None:
        self.torch_event = torch_event

    def synchronize(self) -> None:
        self.torch_event.synchronize()

    def query(self) -> bool:
        return self.torch_event.query()


class CudaStream(Stream):
    """A torch CUDA stream; ``launch`` runs the callable under it, so what it enqueues runs on
    it. Tensors made on another stream and used here need ``Tensor.record_stream`` (torch's
    caching allocator would otherwise reuse their memory too early)."""

    def __init__(self, lane: str, torch_stream) -> None:
        super().__init__(lane)
        self.torch_stream = torch_stream

    def launch(self, fn: Callable[..., Any], *args: Any) -> None:
        with torch.cuda.stream(self.torch_stream):
            fn(*args)

    def record(self, event: Event) -> None:
        assert isinstance(event, CudaEvent), "a CUDA stream records CUDA events"
        event.torch_event.record(self.torch_stream)

    def wait(self, event: Event) -> None:
        assert isinstance(event, CudaEvent), "a CUDA stream waits on CUDA events"
        self.torch_stream.wait_event(event.torch_event)

    def synchronize(self) -> None:
        self.torch_stream.synchronize()


class CudaDevice(Device):
    kind = S.DEVICE_CUDA

    def __init__(self, index: int = 0) -> None:
        if not torch.cuda.is_available():
            raise DeviceError("CUDA is not available on this machine")
        super().__init__(index)

    def _new_stream(self) -> CudaStream:
        return CudaStream(self._next_lane(), torch.cuda.Stream(device=self.index))

    def event(self) -> CudaEvent:
        return CudaEvent(torch.cuda.Event())

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.index)


def open_device(kind: str, index: int = 0) -> Device:
    """The device of ``kind`` (``cpu`` or ``cuda``) and ``index``."""
    if kind == S.DEVICE_CUDA:
        return CudaDevice(index)
    if kind == S.DEVICE_CPU:
        return CpuDevice(index)
    raise ValueError(f"device kind must be one of {S.DEVICE_KINDS}, not {kind!r}")
