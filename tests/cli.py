"""The ``fdprof`` command run in this test process: the one way the tests call the CLI.

A subprocess per call costs an interpreter start and fdprof's imports (about a second of CPU
each, several under load) and adds nothing a test checks, except where the process boundary is
the point (signals, a real process's exit status, resource limits, packaging, ``run --nsys``
starting itself again): those tests start ``python -m fdprof`` themselves and say why.

:func:`fdprof` returns what :class:`subprocess.CompletedProcess` would (``returncode``,
``stdout``, ``stderr``), so a test reads the same either way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from typing import TextIO
from unittest import mock

from fdprof.cli import main
from fdprof.trace import limits


def _environment(env: Mapping[str, str] | None) -> contextlib.AbstractContextManager:
    """The test's environment with ``env`` added for the call, restored after. ``COLUMNS``
    fixed at 80 unless given: a child's stdout is a pipe, so argparse wraps ``--help`` at 80
    there, whatever terminal the tests run in."""
    return mock.patch.dict(os.environ, {"COLUMNS": os.environ.get("COLUMNS", "80"), **(env or {})})


@contextlib.contextmanager
def _last_resort(stream: TextIO) -> Iterator[None]:
    """A warning fdprof logs reaches a command's stderr through logging's last resort (fdprof
    configures no handler); under pytest the root logger has pytest's handlers, so the last
    resort never speaks: a handler like it stands in for the call."""
    handler = logging.StreamHandler(stream)
    handler.setLevel(logging.WARNING)
    logging.getLogger().addHandler(handler)
    try:
        yield
    finally:
        logging.getLogger().removeHandler(handler)


@contextlib.contextmanager
def _captured() -> Iterator[dict[str, str]]:
    """What is written in the block to stdout and stderr, as text once it ends (``"out"``,
    ``"err"``): this process's ``sys.stdout``/``sys.stderr`` and its file descriptors 1 and 2,
    which the processes a command starts inherit (a run's children write there, as they would
    to a command's pipes)."""
    written: dict[str, str] = {}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            with (
                open(1, "w", encoding="utf-8", buffering=1, closefd=False) as text_out,
                open(2, "w", encoding="utf-8", buffering=1, closefd=False) as text_err,
                contextlib.redirect_stdout(text_out),
                contextlib.redirect_stderr(text_err),
                _last_resort(text_err),
            ):
                yield written
        finally:
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)
        for key, file in (("out", out), ("err", err)):
            file.seek(0)
            written[key] = file.read().decode("utf-8", errors="replace")


def fdprof(*args: object, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """``fdprof ARGS`` in this process, ``env`` added to the environment: its exit status (a
    :class:`SystemExit` from deep inside included), and what it and the processes it started
    wrote on stdout and stderr."""
    argv = [str(a) for a in args]
    # a command that was interrupted leaves its "only noted" handlers installed (a process on
    # its way out must not die of a second signal): this process lives on, so put them back
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    # the flags' limits live in the module for the life of a process: one call's must not leak
    try:
        with mock.patch.dict(limits._overrides), _environment(env), _captured() as written:
            try:
                code = main(argv)
            except SystemExit as exc:  # --help, --version: argparse exits
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return subprocess.CompletedProcess(["fdprof", *argv], code, written["out"], written["err"])
