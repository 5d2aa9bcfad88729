"""Follow a record file while its process writes it: each poll returns the records added since.

Reads with ``pread`` rather than a mapping: the writer trims its file at close, and touching
a mapped page past the new end of file would kill the reader with SIGBUS. Each poll reads
only the bytes after the last complete record. A zero kind there is either a record not yet
published or the unused tail of a chunk; it is the latter once the file has grown past that
chunk, since the writer only grows the file when it leaves a chunk for good.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from fdprof.formats import records as R

_NO_CHUNK = 1 << 62


def _zero_kind(fd: int, offset: int) -> bool:
    return os.pread(fd, 1, offset) == b"\0"


class RecordTail:
    """Incremental reader of one record file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.header: R.FileHeader | None = None
        self._fd: int | None = None
        self._offset = 0  # set from the header, once it is there

    def read_header(self) -> R.FileHeader | None:
        """The file's header, once the file and its header are there (None before)."""
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return None
        if self.header is None:
            try:
                self.header = R.read_header(os.pread(self._fd, R.FILE_HEADER.size, 0))
            except ValueError:  # not written yet
                return None
            self._offset = self.header.size
        return self.header

    def poll(self) -> Iterator[tuple[int, int, int, tuple]]:
        """``(kind, flags, tid, fields)`` of each complete record not returned before."""
        if self.read_header() is None:
            return
        size = os.fstat(self._fd).st_size
        while self._offset < size:
            start = self._offset
            data = os.pread(self._fd, size - start, start)
            # an unbounded chunk: a zero kind ends this read instead of skipping ahead
            for kind, flags, tid, fields, nxt in R.iter_records(data, 0, _NO_CHUNK):
                self._offset = start + nxt
                yield kind, flags, tid, fields
            boundary = (self._offset // R.CHUNK + 1) * R.CHUNK
            if boundary >= size or not _zero_kind(self._fd, self._offset):
                return
            self._offset = boundary  # the file grew past this chunk: its tail is unused

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
