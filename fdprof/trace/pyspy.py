"""py-spy's samples of a run (``fdprof run --py-spy``), read onto the run's timebase.

``<run>/pyspy/`` holds one Chrome trace per process (``py-spy record --format chrometrace
--threads --idle``) and ``index.json`` (:mod:`fdprof.capture.pyspy`). The native reader puts
what this module reads in ``trace.meta["pyspy"]`` (a :class:`Samples`), beside the spans and
out of every analysis that does not ask for it; :mod:`fdprof.analysis.python_time` attributes
it to the spans, the Perfetto writer draws it as tracks of its own.

What py-spy writes: not each sample but each *change* of a thread's stack, a ``B`` for every
frame that appeared and an ``E`` for every frame that went, at the time of the sample that saw
the change, in microseconds since the sampler started (``Instant::now()``, i.e.
``CLOCK_MONOTONIC``, the clock the probe records). A stack therefore holds from the sample that
first saw it to the sample that first saw the next one. The thread's native id comes from the
outermost frame ``--threads`` adds (``thread (<tid>): <name>``), so samples meet the spans of
the same ``(pid, tid)``.

The clock mapping (docs/probe.md "py-spy"): a sample at ``ts`` µs lies at monotonic
``started + ts·1000 - 1/rate`` and then on the run's timebase by the process's record-file
offset (:func:`fdprof.formats.records.epoch_offsets`, the same as its spans).

- ``started``: the sampler's start; ``index.json`` brackets it between the monotonic clock read
  before ``Popen`` and when ``Popen`` returned (py-spy creates its clock right after exec), so
  the error of the start is within that bracket (``start_error_ns``, typically ~1 ms).
- ``- 1/rate``: py-spy samples as a Poisson process (exponential gaps, mean 1/rate), so the
  first sample after a change of stack comes on average 1/rate after it (memorylessness): the
  timeline is moved that much earlier. Each boundary is still off by ±1/rate (one standard
  deviation), which the shares' intervals carry through the sample counts.
- The rate is the sampler's (``--rate``, in ``index.json``): py-spy's timer draws each gap
  from it and catches up when it falls behind, so it holds on average. py-spy's own
  ``Samples: N`` counts thread stacks, not sampling rounds, and cannot give it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from fdprof.errors import FdprofError, short
from fdprof.trace.jsonstream import loads

SUBDIR = "pyspy"
INDEX = "index.json"
#: the outermost frame ``py-spy --threads`` adds: the native thread id and the thread's name
THREAD_FRAME = re.compile(r"^thread \((\d+)\): ?(.*)$")
#: samples per second of an index that does not say (``fdprof.capture.pyspy.RATE``)
DEFAULT_RATE = 100.0
#: the most a sampler's Chrome trace may be (it is a run's own file, still read within bounds)
MAX_FILE = 1 << 30

SLICE_COLUMNS = {"pid": "int64", "tid": "int64", "depth": "int64", "frame": "int64",
                 "start": "int64", "end": "int64"}  # fmt: skip
SEGMENT_COLUMNS = {"pid": "int64", "tid": "int64", "start": "int64", "end": "int64",
                   "leaf": "int64", "caller": "int64"}  # fmt: skip


@dataclass
class Samples:
    """What py-spy saw of a run's processes, on the run's timebase."""

    #: one row per frame's stay on a thread's stack (what a timeline draws); ``depth`` 0 is the
    #: outermost Python frame (the ``thread (...)`` frame is not kept)
    slices: pd.DataFrame
    #: one row per interval a thread's stack stayed the same: its innermost frame and that
    #: frame's caller (frame ids; -1: none); sorted by (pid, tid, start)
    segments: pd.DataFrame
    #: frame id -> (function, file, line)
    frames: list[tuple[str, str, int]]
    #: (pid, tid) -> thread name
    threads: dict[tuple[int, int], str] = field(default_factory=dict)
    #: pid -> role, rate_hz (the sampler's), start_error_ns ([lo, hi] of the start; None: unknown)
    processes: dict[int, dict[str, Any]] = field(default_factory=dict)

    def frame_text(self, frame: int, line: bool = True) -> str:
        """``function (file:line)``; without ``line``, ``function (file)``; ``-``: no frame."""
        if frame < 0:
            return "-"
        name, path, number = self.frames[frame]
        where = f"{short_path(path)}:{number}" if line else short_path(path)
        return f"{name} ({where})" if path else name


def short_path(path: str) -> str:
    """A frame's file as a reader knows it: from the package on (``torch/nn/modules/linear.py``,
    ``engine/worker.py``), else its last two components."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.rsplit(marker, 1)[1]
    match = re.search(r"/lib/python3\.\d+/(.*)$", path)
    if match:
        return match[1]
    return "/".join(path.split("/")[-2:])


def read(run_dir: Path, offsets: dict[int, int]) -> Samples | None:
    """The samples under ``run_dir/pyspy`` (None when there are none), each process's times
    moved by its ``offsets[pid]`` (monotonic -> the run's timebase); a process without an
    offset (no record file) is left out."""
    index_path = run_dir / SUBDIR / INDEX
    if not index_path.is_file():
        return None
    try:
        index = loads(index_path.read_text())
    except (OSError, ValueError) as exc:
        raise FdprofError(f"{index_path}: not a py-spy index ({exc})") from None
    if not isinstance(index, list):
        raise FdprofError(f"{index_path}: not a py-spy index (expected a list)")
    builder = _Builder()
    for i, entry in enumerate(index):
        _check(entry, _INDEX_FIELDS, f"{index_path}: entry {i}")
        if not entry.get("ok") or entry.get("pid") not in offsets:
            continue
        pid = int(entry["pid"])
        path = run_dir / SUBDIR / Path(str(entry.get("file", ""))).name
        events = _events(path)
        if not events:
            continue
        rate = float(entry.get("rate") or DEFAULT_RATE)
        started, error = _start(entry, offsets[pid])
        origin = started + offsets[pid] - round(1e9 / rate)
        builder.add(pid, events, origin)
        builder.processes[pid] = {"role": entry.get("role", ""), "rate_hz": rate,
                                  "start_error_ns": error}  # fmt: skip
    return builder.build() if builder.processes else None


def _events(path: Path) -> list[dict[str, Any]]:
    try:
        if path.stat().st_size > MAX_FILE:
            raise FdprofError(f"{path}: larger than {MAX_FILE >> 20} MiB")
        events = loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise FdprofError(f"{path}: not a py-spy Chrome trace ({exc})") from None
    if not isinstance(events, list):
        raise FdprofError(f"{path}: not a py-spy Chrome trace (expected a list of events)")
    for i, event in enumerate(events):
        _check(event, _EVENT_FIELDS, f"{path}: event {i}")
        _check(event.get("args") or {}, _ARGS_FIELDS, f"{path}: event {i} args")
        if event.get("ph") in ("B", "E") and "ts" not in event:
            raise FdprofError(f"{path}: event {i} has no ts")
    return [e for e in events if e.get("ph") in ("B", "E")]


#: what the reader uses of an index entry, an event and its args, and the types each may have
#: (absent or null aside): a field of another type, or out of its range, is bad input
_INDEX_FIELDS = {"ok": (bool,), "pid": (int,), "file": (str,), "rate": (int, float),
                 "role": (str,), "started_monotonic_ns": (int,),
                 "popen_returned_monotonic_ns": (int,), "started_epoch_ns": (int,)}  # fmt: skip
_EVENT_FIELDS = {"ph": (str,), "ts": (int, float), "tid": (int,), "name": (str,),
                 "args": (dict,)}  # fmt: skip
_ARGS_FIELDS = {"filename": (str,), "line": (int,)}
#: fields whose values must be at least 0 (a rate above it)
_NON_NEGATIVE = ("ts", "line", "pid")


def _check(record: Any, fields: dict[str, tuple[type, ...]], where: str) -> None:
    if type(record) is not dict:
        raise FdprofError(f"{where}: should be an object, not {short(record)}")
    for key, kinds in fields.items():
        value = record.get(key)
        if value is None:
            continue
        if type(value) not in kinds:
            raise FdprofError(f"{where}: {key} {short(value)} should be "
                              f"{' or '.join(k.__name__ for k in kinds)}")  # fmt: skip
        bad = (key in _NON_NEGATIVE and value < 0) or (key == "rate" and not 0 < value < 1e9)
        if bad or (type(value) is float and not math.isfinite(value)):
            raise FdprofError(f"{where}: {key} {short(value)} is out of range")


def _start(entry: dict[str, Any], offset: int) -> tuple[int, list[int] | None]:
    """The sampler's start on the monotonic clock and the bracket of its error (ns); an index
    from before the monotonic bracket has the wall clock after ``Popen`` only (error unknown)."""
    if "started_monotonic_ns" in entry:
        lo = int(entry["started_monotonic_ns"])
        hi = int(entry.get("popen_returned_monotonic_ns", lo))
        return hi, [lo - hi, 0]
    return int(entry.get("started_epoch_ns", 0)) - offset, None


class _Builder:
    def __init__(self) -> None:
        self.frames: list[tuple[str, str, int]] = []
        self._frame_ids: dict[tuple[str, str, int], int] = {}
        self.slices: list[tuple[int, int, int, int, int, int]] = []
        self.segments: list[tuple[int, int, int, int, int, int]] = []
        self.threads: dict[tuple[int, int], str] = {}
        self.processes: dict[int, dict[str, Any]] = {}

    def frame(self, event: dict[str, Any]) -> int:
        args = event.get("args") or {}
        key = (str(event.get("name", "")), str(args.get("filename") or ""),
               int(args.get("line") or 0))  # fmt: skip
        found = self._frame_ids.get(key)
        if found is None:
            found = self._frame_ids[key] = len(self.frames)
            self.frames.append(key)
        return found

    def add(self, pid: int, events: list[dict[str, Any]], origin: int) -> None:
        by_thread: dict[Any, list[dict[str, Any]]] = {}
        for e in events:
            by_thread.setdefault(e.get("tid"), []).append(e)
        for thread_events in by_thread.values():
            thread_events.sort(key=lambda e: e["ts"])  # stable: E before B at one time
            self._thread(pid, thread_events, origin)

    def _thread(self, pid: int, events: list[dict[str, Any]], origin: int) -> None:
        tid = -1
        stack: list[tuple[int, int]] = []  # (frame id, begin time)
        since = origin  # when the stack last changed
        i = 0
        while i < len(events):
            ts = events[i]["ts"]
            t = origin + int(ts) * 1000
            if stack and tid >= 0 and t > since:  # the stack held from ``since`` to now
                caller = stack[-2][0] if len(stack) > 1 else -1
                self.segments.append((pid, tid, since, t, stack[-1][0], caller))
            while i < len(events) and events[i]["ts"] == ts:
                e = events[i]
                i += 1
                match = THREAD_FRAME.match(str(e.get("name", "")))
                if match:  # the synthetic outermost frame: which thread this is
                    tid = int(match[1])
                    self.threads[(pid, tid)] = match[2]
                elif e["ph"] == "B":
                    stack.append((self.frame(e), t))
                elif stack:
                    frame, begin = stack.pop()
                    self.slices.append((pid, tid, len(stack), frame, begin, t))
            since = t
        for depth, (frame, begin) in enumerate(stack):  # py-spy closes them all at its end
            self.slices.append((pid, tid, depth, frame, begin, since))

    def build(self) -> Samples:
        slices = pd.DataFrame(self.slices, columns=list(SLICE_COLUMNS)).astype(SLICE_COLUMNS)
        slices = slices[slices["tid"] >= 0].reset_index(drop=True)
        segments = pd.DataFrame(self.segments, columns=list(SEGMENT_COLUMNS))
        segments = segments.astype(SEGMENT_COLUMNS).sort_values(["pid", "tid", "start"])
        return Samples(slices, segments.reset_index(drop=True), self.frames, self.threads,
                       self.processes)  # fmt: skip
