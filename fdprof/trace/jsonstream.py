"""Streaming JSON: read a large document one element at a time, plain or gzip.

A Chrome trace is one JSON document whose ``traceEvents`` array can hold millions of events;
``json.load`` would build all of them as dicts at once (HTA's users report 6 GB of memory for an
800 MB trace). Here the C decoder of :mod:`json` decodes one event at a time from a sliding text
buffer, so memory holds the columns being built plus one buffer, never the whole document.

Non-integer numbers decode as :class:`decimal.Decimal`, so microsecond timestamps with
fractions convert to nanoseconds exactly; :func:`plain` turns them back into floats.

Only JSON is read: Python's decoder also takes ``NaN``, ``Infinity`` and ``-Infinity``, which
JSON does not have (RFC 8259), and a number past a double's range as infinity; here both are
bad input, in the stream and in every small JSON file a reader opens (:func:`loads`).

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
import os
import re
import stat
import sys
import zlib
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import msgspec

from fdprof.errors import FdprofError
from fdprof.trace import limits


class NotJSON(ValueError):
    """A value Python's JSON decoder takes but JSON does not have."""


def _constant(name: str) -> Any:
    raise NotJSON(f"{name} is not JSON (its numbers are finite)")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise NotJSON(f"the number {text[:40]} is beyond the range of a double")
    return value


def loads(data: str | bytes) -> Any:
    """A whole JSON document (a manifest, an index), strictly JSON: a ``ValueError`` for
    text that is not JSON, ``NaN``/``Infinity`` and numbers past a double's range included."""
    return json.loads(data, parse_constant=_constant, parse_float=_finite)


_DECODER = json.JSONDecoder(parse_float=Decimal, parse_constant=_constant)
#: msgspec decoders for batches of elements: plain, and exact when timestamps have fractions
_FAST = msgspec.json.Decoder()
_EXACT = msgspec.json.Decoder(float_hook=Decimal)
_SPACE = re.compile(r"[ \t\n\r]*")
CHUNK_CHARS = 1 << 20
#: characters of elements decoded at once by :meth:`Stream.batches`: their Python objects are
#: what a load holds beyond its columns, so a batch is kept small (256 K characters: about a
#: thousand PyTorch-profiler events)
BATCH_CHARS = 1 << 18
#: bytes any gzip file may inflate to beyond the ``inflate_ratio`` limit
INFLATE_SLACK = 16 << 20


def open_text(path: Path) -> TextIO:
    """``path`` as text, decompressing gzip whatever the file name says; a gzip file stops
    with one line once it has inflated past the ``inflate_ratio`` limit (a gzip bomb)."""
    raw = open_regular(path)
    if raw.read(2) == b"\x1f\x8b":
        raw.seek(0)
        inflated = _Inflated(raw, path)
        return io.TextIOWrapper(io.BufferedReader(inflated, CHUNK_CHARS), encoding="utf-8")
    raw.seek(0)
    return io.TextIOWrapper(raw, encoding="utf-8")


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file: a FIFO would block the read for
    ever, a device (``/dev/zero``) never end."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise FdprofError(f"{path}: cannot open ({exc.strerror})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise FdprofError(f"{path}: not a regular file ({file_kind(mode)})")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    kinds = {stat.S_ISFIFO: "a FIFO", stat.S_ISCHR: "a character device",
             stat.S_ISBLK: "a block device", stat.S_ISSOCK: "a socket",
             stat.S_ISDIR: "a directory", stat.S_ISLNK: "a symbolic link"}  # fmt: skip
    return next((kind for test, kind in kinds.items() if test(mode)), "not a file")


class _Inflated(io.RawIOBase):
    """A gzip stream held to the ``inflate_ratio`` limit: what it has inflated may not pass
    that many times the compressed bytes read so far (plus :data:`INFLATE_SLACK`, for small
    files that compress well), so a bomb stops after a few MiB, not at the end."""

    def __init__(self, raw: BinaryIO, path: Path) -> None:
        self._raw, self._gz, self._path = raw, gzip.GzipFile(fileobj=raw), path
        self._ratio = limits.current().inflate_ratio
        self._total = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._gz.readinto(buffer)
        self._total += n
        read = self._raw.tell()
        if self._ratio and self._total > self._ratio * read + INFLATE_SLACK:
            raise limits.exceeded(
                f"{self._path}: {read:,} compressed bytes inflate to more than "
                f"{self._total:,} (a gzip bomb?)",
                "inflate_ratio",
            )
        return n

    @property
    def compressed(self) -> BinaryIO:
        """The gzip file itself: where a progress bar counts bytes."""
        return self._raw

    def close(self) -> None:
        self._gz.close()
        self._raw.close()
        super().close()


def raw_position(f: TextIO) -> int:
    """How many bytes of the file under ``open_text``'s stream have been read (compressed
    bytes for gzip): what a progress bar over the file's size counts."""
    raw = getattr(f.buffer, "raw", f.buffer)  # the gzip reader or the file
    return getattr(raw, "compressed", raw).tell()


def plain(value: Any) -> Any:
    """``value`` with every Decimal turned into a float (attribute values keep JSON's types)."""
    if isinstance(value, Decimal):
        return _finite(str(value))
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


class Stream:
    """A cursor over a JSON text read in chunks; errors are one-line :class:`FdprofError`.

    No value may span more than the ``event_size`` limit of text (:mod:`fdprof.trace.limits`):
    the buffer holds one value and the batch being cut, never the whole document however it is
    laid out, and a value that does not end within the limit is refused."""

    def __init__(self, f: TextIO, name: str) -> None:
        self._f = f
        self._name = name
        self._buf = ""
        self._pos = 0
        self._eof = False
        self._consumed = 0
        self._max = limits.current().event_size or float("inf")

    def _fill(self, one_value: bool = True) -> bool:
        """Read more text. ``one_value``: what the buffer holds is one value, held to the
        limit (else a batch of them being cut, :meth:`_split`, which bounds itself)."""
        if self._eof:
            return False
        held = len(self._buf) - self._pos
        if one_value and held > self._max:
            raise limits.exceeded(
                f"{self._name}: a JSON value at character {self._consumed + self._pos} runs "
                "past the maximum event size",
                "event_size",
            )
        # doubling, so a long value is not re-scanned every chunk, up to just past the limit
        bound = self._max if one_value else max(self._max, BATCH_CHARS)
        want = int(max(CHUNK_CHARS, min(held, bound - held + CHUNK_CHARS)))
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
                if _may_continue(exc, self._buf) and self._fill():
                    continue
                raise self.error(f"truncated or invalid JSON ({exc.msg})", exc.pos) from None
            except RecursionError:
                raise self.error(f"a value nested deeper than JSON decoding allows "
                                 f"({sys.getrecursionlimit()} levels)") from None  # fmt: skip
            except NotJSON as exc:
                raise self.error(str(exc)) from None
            # a number or literal at the end of the buffer may continue in the next chunk
            at_end = end == len(self._buf) and not isinstance(value, dict | list | str)
            if at_end and self._fill():
                continue
            self._pos = end
            return value

    def batches(
        self, *, allow_unterminated: bool = False, scan: Callable[[str], bool] | None = None
    ) -> Iterator[Any]:
        """Yield the elements of the array at the cursor in lists, decoded by msgspec where the
        text allows it (module doc); one element at a time elsewhere. ``scan``: a reader's own
        fast path, tried first on each batch's text (``[...]``); where it reads the text
        (returns True), True is yielded in place of the decoded list."""
        self.expect("[")
        while True:
            split = self._split()
            if split is None:
                break
            piece = "[" + self._buf[self._pos : split] + "]"
            try:
                batch = scan is not None and scan(piece)
                if batch is not True:
                    batch = _FAST.decode(piece)
                if type(batch) is list and any(
                    type(e.get("ts")) is float or type(e.get("dur")) is float
                    for e in batch
                    if type(e) is dict
                ):
                    batch = _EXACT.decode(piece)
            except (msgspec.DecodeError, RecursionError):  # decoded one at a time: it says where
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
                self._fill(one_value=False)
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
            # minified (no line breaks between elements) or one huge element: decoded one at
            # a time, within the size limit, not searched to the end of the document
            if scanned > max(self._max, BATCH_CHARS) or not self._fill(one_value=False):
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


def _may_continue(exc: json.JSONDecodeError, buf: str) -> bool:
    """Whether a decoding error may be a value cut by the end of the buffer (more text can
    complete it), rather than an error in the text itself, reported at once: a NUL after an
    open string in a sparse 8 GiB file is not read to the end."""
    return exc.msg.startswith("Unterminated string") or exc.pos >= len(buf) - _TOKEN_CHARS


#: the longest token (number, literal) an error near the end of the buffer may have cut
_TOKEN_CHARS = 64


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
