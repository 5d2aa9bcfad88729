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
import io
import os
import subprocess
from collections.abc import Mapping
from unittest import mock

from fdprof.cli import main
from fdprof.trace import limits


def _environment(env: Mapping[str, str] | None) -> contextlib.AbstractContextManager:
    """The test's environment with ``env`` added for the call, restored after. ``COLUMNS``
    fixed at 80 unless given: a child's stdout is a pipe, so argparse wraps ``--help`` at 80
    there, whatever terminal the tests run in."""
    return mock.patch.dict(os.environ, {"COLUMNS": os.environ.get("COLUMNS", "80"), **(env or {})})


def fdprof(*args: object, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """``fdprof ARGS`` in this process, ``env`` added to the environment: its exit status (a
    :class:`SystemExit` from deep inside included), and what it wrote on stdout and stderr."""
    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    # the flags' limits live in the module for the life of a process: one call's must not leak
    with (
        mock.patch.dict(limits._overrides),
        _environment(env),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = main(argv)
        except SystemExit as exc:  # --help, --version: argparse exits
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return subprocess.CompletedProcess(["fdprof", *argv], code, out.getvalue(), err.getvalue())
