"""The device interface's ordering guarantees, and what it does not guarantee, on both
implementations: the CPU twin (always) and CUDA (skipped without a GPU)."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from fdprof import semconv as S
from fdprof.engine.device import CpuDevice, Device, DeviceError, open_device
from fdprof.probe import api

WORK = api.name("work", S.CATEGORY_DEVICE)


@dataclass
class Backend:
    """A device and the means to make its work slow or hold it until the test lets it go."""

    device: Device
    tensor_device: str

    def zeros(self, n: int = 4) -> torch.Tensor:
        return torch.zeros(n, device=self.tensor_device)

    def slow(self) -> None:
        """Work that takes a while, so a missing order would show in the result."""
        if self.tensor_device == "cuda":
            torch.cuda._sleep(100_000_000)  # ~50 ms of GPU cycles
        else:
            threading.Event().wait(0.05)

    def hold(self) -> tuple[Any, Any]:
        """``(work, release)``: work that does not finish before ``release()`` on the CPU twin;
        on CUDA, a long kernel (a GPU cannot wait on the host) and a ``release`` that does
        nothing."""
        if self.tensor_device == "cuda":
            return (lambda: torch.cuda._sleep(2_000_000_000)), (lambda: None)
        gate = threading.Event()
        return (lambda: gate.wait(30)), gate.set


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def backend(request):
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    dev = open_device(request.param)
    yield Backend(dev, request.param)
    dev.close()


@pytest.fixture
def cpu():
    dev = CpuDevice()
    yield Backend(dev, "cpu")
    dev.close()


def test_launch_returns_before_the_work_has_run(backend):
    work, release = backend.hold()
    s = backend.device.stream()
    e = backend.device.event()
    s.launch(WORK, work)
    s.record(e)
    assert not e.query()
    release()
    e.synchronize()
    assert e.query()


def test_one_stream_runs_its_work_in_launch_order(backend):
    s = backend.device.stream()
    x = backend.zeros(1) + 1
    expected = 1.0
    for i in range(20):
        s.launch(WORK, x.mul_, 3) if i % 2 else s.launch(WORK, x.add_, i)
        expected = expected * 3 if i % 2 else expected + i
    s.synchronize()
    assert x.item() == expected


def test_a_stream_waiting_on_an_event_runs_after_the_recorded_work(backend):
    a, b = backend.device.stream(), backend.device.stream()
    e = backend.device.event()
    x, y = backend.zeros(), backend.zeros()
    a.launch(WORK, backend.slow)
    a.launch(WORK, x.fill_, 7)
    a.record(e)
    b.wait(e)
    b.launch(WORK, y.copy_, x)
    b.synchronize()
    assert y.tolist() == [7.0] * 4


def test_the_host_waiting_on_an_event_sees_the_recorded_work(backend):
    s = backend.device.stream()
    e = backend.device.event()
    x = backend.zeros()
    s.launch(WORK, backend.slow)
    s.launch(WORK, x.fill_, 3)
    s.record(e)
    e.synchronize()
    assert x.tolist() == [3.0] * 4


def test_a_wait_is_for_the_record_made_before_it_not_a_later_one(backend):
    """CUDA's rule: ``wait`` takes the event's most recent record at the time of the call."""
    a, b = backend.device.stream(), backend.device.stream()
    e = backend.device.event()
    x, y = backend.zeros(), backend.zeros()
    work, release = backend.hold()
    a.launch(WORK, x.fill_, 1)
    a.record(e)
    b.wait(e)
    a.launch(WORK, work)
    a.launch(WORK, x.fill_, 2)
    a.record(e)
    b.launch(WORK, y.copy_, x)
    b.synchronize()  # returns while a is held: b waited for the first record only
    assert y.tolist() == [1.0] * 4
    release()
    a.synchronize()


def test_an_event_never_recorded_is_complete(backend):
    s = backend.device.stream()
    e = backend.device.event()
    assert e.query()
    e.synchronize()
    s.wait(e)
    s.synchronize()


def test_device_synchronize_waits_for_every_stream(backend):
    streams = [backend.device.stream() for _ in range(3)]
    xs = [backend.zeros() for _ in streams]
    for i, (s, x) in enumerate(zip(streams, xs, strict=True)):
        s.launch(WORK, backend.slow)
        s.launch(WORK, x.fill_, i + 1)
    backend.device.synchronize()
    assert [x[0].item() for x in xs] == [1.0, 2.0, 3.0]


def test_streams_are_lanes_of_this_process(backend):
    lanes = [backend.device.stream().lane for _ in range(2)]
    kind = backend.device.kind
    assert lanes == [S.device_lane(os.getpid(), kind, 0, n) for n in (1, 2)]


def test_two_streams_without_an_event_really_overlap(cpu):
    """Not ordered means not ordered: each stream's work waits for the other's to start, which
    only ends if both run at the same time (a twin that serialised streams would time out)."""
    both = threading.Barrier(2, timeout=30)
    met: list[bool] = []
    a, b = cpu.device.stream(), cpu.device.stream()
    a.launch(WORK, lambda: met.append(both.wait() >= 0))
    b.launch(WORK, lambda: met.append(both.wait() >= 0))
    cpu.device.synchronize()
    assert met == [True, True]


def test_failed_work_raises_where_the_host_next_synchronises(cpu):
    s, other = cpu.device.stream(), cpu.device.stream()
    e = cpu.device.event()
    ran: list[int] = []
    s.launch(WORK, lambda: 1 / 0)  # launch itself does not raise: the host has moved on
    s.launch(WORK, ran.append, 1)
    s.record(e)
    with pytest.raises(DeviceError, match="ZeroDivisionError"):
        s.synchronize()
    with pytest.raises(DeviceError):
        e.synchronize()
    other.wait(e)
    with pytest.raises(DeviceError):
        other.synchronize()
    assert ran == []  # a failed stream runs nothing more


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="device kind"):
        open_device("tpu")


def _record_after(slot: str, data: str, generation: int) -> None:
    """Another process: slow work writes ``data``, then records the shared event."""
    import numpy as np

    dev = CpuDevice()
    s = dev.stream()
    ev = dev.shared_event("test/done", Path(slot))
    out = np.memmap(data, dtype=np.int64, mode="r+", shape=(1,))

    def write():
        threading.Event().wait(0.2)
        out[0] = 42

    s.launch(WORK, write)
    s.record(ev, generation)
    dev.close()


def test_a_shared_event_orders_a_stream_after_another_process(tmp_path):
    """The waiter learns the generation from a message (here: the argument) and waits for it
    on its stream; what the other process wrote before recording it is there."""
    import multiprocessing as mp

    import numpy as np

    slot, data = tmp_path / "slot", tmp_path / "data"
    for f in (slot, data):
        f.write_bytes(bytes(8))
    dev = CpuDevice()
    try:
        s = dev.stream()
        ev = dev.shared_event("test/done", slot)
        seen = torch.zeros(1, dtype=torch.int64)
        out = np.memmap(data, dtype=np.int64, mode="r", shape=(1,))
        proc = mp.get_context("spawn").Process(target=_record_after,
                                               args=(str(slot), str(data), 7))  # fmt: skip
        proc.start()
        s.wait(ev, 7)
        s.launch(WORK, lambda: seen.fill_(int(out[0])))
        s.synchronize()
        assert seen.item() == 42 and ev.query(7) and not ev.query(8)
        ev.synchronize(7)  # the host: already complete
        proc.join(30)
        assert proc.exitcode == 0
    finally:
        dev.close()
