"""Follow a record file while its process writes it: each poll returns the records added since.

Reads with ``pread`` rather than a mapping: the writer trims its file at close, and touching
a mapped page past the new end of file would kill the reader with SIGBUS. Each poll rereads
from the start of the chunk holding the last complete record, so a chunk's unused tail and
a record not yet published are both simply "not there yet".
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from fdprof.probe import records as R
from fdprof.probe.recorder import CHUNK


class RecordTail:
    """Incremental reader of one record file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.header: R.FileHeader | None = None
        self._fd: int | None = None
        self._offset = R.FILE_HEADER.size

    def poll(self) -> Iterator[tuple[int, int, int, tuple]]:
        """``(kind, flags, tid, fields)`` of each complete record not returned before."""
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return
        if self.header is None:
            head = os.pread(self._fd, R.FILE_HEADER.size, 0)
            if len(head) < R.FILE_HEADER.size or head[:8] != R.MAGIC:
                return
            self.header = R.read_header(head)
        base = self._offset // CHUNK * CHUNK
        size = os.fstat(self._fd).st_size
        if size <= self._offset:
            return
        data = os.pread(self._fd, size - base, base)
        for kind, flags, tid, fields, nxt in R.iter_records(data, self._offset - base, CHUNK):
            self._offset = base + nxt
            yield kind, flags, tid, fields

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
