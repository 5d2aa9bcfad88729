"""Streaming JSON: read a large document one element at a time, plain or gzip.

A Chrome trace is one JSON document whose ``traceEvents`` array can hold millions of events;
``json.load`` would build all of them as dicts at once (HTA's users report 6 GB of memory for an
800 MB trace). Here the C decoder of :mod:`json` decodes one event at a time from a sliding text
buffer, so memory holds the columns being built plus one buffer, never the whole document.

Non-integer numbers decode as :class:`decimal.Decimal`, so microsecond timestamps with
fractions convert to nanoseconds exactly; :func:`plain` turns them back into floats.

:meth:`Stream.batches` is the fast path for arrays written one element per line (PyTorch,
Perfetto and fdprof all write them so): it cuts the buffer after the last ``},\n{`` within
:data:`BATCH_CHARS` and decodes the whole batch at once with msgspec (2-3× the speed of
:mod:`json`), falling back to one element at a time where the text is laid out otherwise or a
cut turns out not to be between two elements.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

import msgspec

from fdprof.errors import FdprofError

_DECODER = json.JSONDecoder(parse_float=Decimal)
#: msgspec decoders for batches of elements: plain, and exact when timestamps have fractions
_FAST = msgspec.json.Decoder()
_EXACT = msgspec.json.Decoder(float_hook=Decimal)
_SPACE = re.compile(r"[ \t\n\r]*")
CHUNK_CHARS = 1 << 20
#: characters of elements decoded at once by :meth:`Stream.batches`: their Python objects are
#: what a load holds beyond its columns, so a batch is kept small (256 K characters: about a
#: thousand PyTorch-profiler events)
BATCH_CHARS = 1 << 18


def open_text(path: Path) -> TextIO:
    """``path`` as text, decompressing gzip whatever the file name says."""
    raw = path.open("rb")
    if raw.read(2) == b"\x1f\x8b":
        raw.seek(0)
        return io.TextIOWrapper(gzip.GzipFile(fileobj=raw), encoding="utf-8")
    raw.seek(0)
    return io.TextIOWrapper(raw, encoding="utf-8")


def raw_position(f: TextIO) -> int:
    """How many bytes of the file under ``open_text``'s stream have been read (compressed
    bytes for gzip): what a progress bar over the file's size counts."""
    raw = f.buffer
    raw = getattr(raw, "fileobj", raw)
    return raw.tell()


def plain(value: Any) -> Any:
    """``value`` with every Decimal turned into a float (attribute values keep JSON's types)."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


class Stream:
    """A cursor over a JSON text read in chunks; errors are one-line :class:`FdprofError`."""

    def __init__(self, f: TextIO, name: str) -> None:
        self._f = f
        self._name = name
        self._buf = ""
        self._pos = 0
        self._eof = False
        self._consumed = 0

    def _fill(self) -> bool:
        if self._eof:
            return False
        want = max(CHUNK_CHARS, len(self._buf) - self._pos)
        try:
            chunk = self._f.read(want)
        except (EOFError, OSError, zlib.error, UnicodeDecodeError) as exc:
            raise FdprofError(f"{self._name}: cannot read ({_reason(exc)})") from None
        if not chunk:
            self._eof = True
            return False
        self._consumed += self._pos
        self._buf = self._buf[self._pos :] + chunk
        self._pos = 0
        return True

    def peek(self) -> str | None:
        """The next non-blank character (not consumed), or None at the end of the text."""
        while True:
            self._pos = _SPACE.match(self._buf, self._pos).end()
            if self._pos < len(self._buf):
                return self._buf[self._pos]
            if not self._fill():
                return None

    def expect(self, char: str) -> None:
        got = self.peek()
        if got != char:
            raise self.error(f"expected {char!r}, found {'end of file' if got is None else got!r}")
        self._pos += 1

    def value(self) -> Any:
        """Decode the next JSON value."""
        if self.peek() is None:
            raise self.error("truncated JSON (ended where a value was expected)")
        while True:
            try:
                value, end = _DECODER.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as exc:
                if self._fill():
                    continue
                raise self.error(f"truncated or invalid JSON ({exc.msg})", exc.pos) from None
            # a number or literal at the end of the buffer may continue in the next chunk
            at_end = end == len(self._buf) and not isinstance(value, dict | list | str)
            if at_end and self._fill():
                continue
            self._pos = end
            return value

    def batches(self, *, allow_unterminated: bool = False) -> Iterator[list[Any]]:
        """Yield the elements of the array at the cursor in lists, decoded by msgspec where the
        text allows it (module doc); one element at a time elsewhere."""
        self.expect("[")
        while True:
            split = self._split()
            if split is None:
                break
            piece = "[" + self._buf[self._pos : split] + "]"
            try:
                batch = _FAST.decode(piece)
                if any(
                    type(e.get("ts")) is float or type(e.get("dur")) is float
                    for e in batch
                    if type(e) is dict
                ):
                    batch = _EXACT.decode(piece)
            except msgspec.DecodeError:
                break
            self._pos = split
            self.expect(",")  # the comma after the last element of the batch
            yield batch
        rest = list(self._elements(allow_unterminated))
        if rest:
            yield rest

    def _split(self) -> int | None:
        """Offset just past the last element that a newline separates from the next one
        (``},\n{``) within :data:`BATCH_CHARS` of the cursor, or past the first such element
        when one is longer; None when there is none. A raw newline cannot be inside a JSON
        string, so such a split is between two values (or two nested ones: decoding checks)."""
        scanned = 0  # characters after the window already searched, as the buffer refills
        while True:
            if not self._eof and len(self._buf) - self._pos < BATCH_CHARS:
                self._fill()
            buf, pos = self._buf, self._pos
            limit = min(len(buf), pos + BATCH_CHARS)
            nl = buf.rfind("\n", pos, limit)
            while nl > pos:
                end = _element_end(buf, pos, nl)
                if end is not None:
                    return end
                nl = buf.rfind("\n", pos, nl)
            nl = buf.find("\n", max(limit, pos + scanned))
            while nl != -1:
                end = _element_end(buf, pos, nl)
                if end is not None:
                    return end
                nl = buf.find("\n", nl + 1)
            scanned = len(buf) - pos
            if self._eof or not self._fill():
                return None

    def array(self, *, allow_unterminated: bool = False) -> Iterator[Any]:
        """Yield the elements of the array at the cursor one at a time."""
        self.expect("[")
        yield from self._elements(allow_unterminated)

    def _elements(self, allow_unterminated: bool) -> Iterator[Any]:
        while True:
            char = self.peek()
            if char == "]":
                self._pos += 1
                return
            if char is None and allow_unterminated:
                return
            yield self.value()
            char = self.peek()
            if char == ",":
                self._pos += 1
            elif char != "]" and not (char is None and allow_unterminated):
                raise self.error("expected ',' or ']' in an array")

    def members(self) -> Iterator[str]:
        """Yield the keys of the object at the cursor; the caller reads or skips each value."""
        self.expect("{")
        while True:
            char = self.peek()
            if char == "}":
                self._pos += 1
                return
            key = self.value()
            if not isinstance(key, str):
                raise self.error("expected a string key")
            self.expect(":")
            yield key
            char = self.peek()
            if char == ",":
                self._pos += 1
            elif char != "}":
                raise self.error("expected ',' or '}' in an object")

    def at_end(self) -> bool:
        return self.peek() is None

    def error(self, message: str, pos: int | None = None) -> FdprofError:
        at = self._consumed + (self._pos if pos is None else pos)
        return FdprofError(f"{self._name}: {message} at character {at}")


def _element_end(buf: str, pos: int, nl: int) -> int | None:
    """Where the element before the newline at ``nl`` ends, if the newline is between two
    elements (a comma before it, ``{`` after it, blanks aside), else None."""
    after = _SPACE.match(buf, nl + 1).end()
    if after >= len(buf) or buf[after] != "{":
        return None
    before = nl - 1
    while before >= pos and buf[before] in " \t\r\n":
        before -= 1
    if before < pos or buf[before] != ",":
        return None
    end = before
    while end > pos and buf[end - 1] in " \t\r\n":
        end -= 1
    return end if end > pos else None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, EOFError):
        return "compressed file is truncated"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
