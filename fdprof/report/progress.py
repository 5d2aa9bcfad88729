"""A one-line terminal progress bar, redrawn in place; silent when the stream is not a TTY."""

from __future__ import annotations

from typing import TextIO


class ProgressBar:
    def __init__(self, stream: TextIO, unit: str, width: int = 30) -> None:
        self._stream = stream
        self._unit = unit
        self._width = width
        self._live = stream.isatty()

    def __call__(self, done: int, total: int, note: str = "") -> None:
        if not self._live:
            return
        filled = self._width * done // max(total, 1)
        bar = "#" * filled + "." * (self._width - filled)
        self._stream.write(f"\r[{bar}] {done}/{total} {self._unit} {note}".rstrip() + "\033[K")
        if done >= total:
            self._stream.write("\n")
        self._stream.flush()
