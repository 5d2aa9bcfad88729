"""``fdprof`` as a real process under an address-space cap, forked from a warm parent.

The hardening tests run every crafted input through a real ``fdprof`` process whose address
space is capped (``prlimit --as``): the cap is the boundary they check, so the command cannot
run in the test process (pytest's own address space is past it). A new interpreter per case
spends most of its second importing pandas and pyarrow, for hundreds of cases. Here one server
process imports fdprof's commands once; each call is a child forked from it that sets the cap
(``RLIMIT_AS``, what ``prlimit --as`` sets), takes the call's environment and output files,
runs ``fdprof``'s ``main`` and exits with its status: a real process, capped, with the
server's imports counted against the cap as an interpreter's own would be.

Server: ``python capped.py``, one JSON request per line on stdin (``argv``, ``env``, ``cap``,
``out``, ``err``); it answers ``<pid>`` when the child started and ``<status>`` when it ended.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping

#: a hang guard, not a timing threshold: a call that takes this long is a hang
HANG_S = 120


def _child(request: dict) -> int:
    import resource
    import traceback

    from fdprof.cli import main

    resource.setrlimit(resource.RLIMIT_AS, (request["cap"], request["cap"]))
    os.environ.clear()
    os.environ.update(request["env"])
    for path, fd in ((os.devnull, 0), (request["out"], 1), (request["err"], 2)):
        opened = os.open(path, os.O_RDWR if fd == 0 else os.O_WRONLY | os.O_TRUNC)
        os.dup2(opened, fd)
        os.close(opened)
    try:
        return main(request["argv"])
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - as the interpreter would: a traceback, status 1
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def serve() -> None:
    import importlib
    import pkgutil

    import fdprof.cli

    for module in pkgutil.iter_modules(fdprof.cli.__path__):
        importlib.import_module(f"fdprof.cli.{module.name}")
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                code = _child(request)
            finally:
                os._exit(code)
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)


class _Server:
    """The server process, started on first use, stopped at exit."""

    def __init__(self) -> None:
        # unbuffered: a line read must not take the next one with it, or select() would wait
        # for a status already read (a child that ended before its pid was read hung here)
        self.proc = subprocess.Popen(
            [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            bufsize=0,
        )  # fmt: skip
        atexit.register(self.close)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)

    def call(self, argv: list[str], env: Mapping[str, str], cap: int) -> tuple[int, str, str]:
        with tempfile.NamedTemporaryFile() as out, tempfile.NamedTemporaryFile() as err:
            request = {"argv": argv, "env": dict(env), "cap": cap, "out": out.name,
                       "err": err.name}  # fmt: skip
            data = (json.dumps(request) + "\n").encode()
            while data:
                data = data[self.proc.stdin.write(data) :]
            code = self._status()
            return code, out.read().decode(errors="replace"), err.read().decode(errors="replace")

    def _status(self) -> int:
        """The call's exit status: its pid comes first, then (at most ``HANG_S`` later) its
        status."""
        import select

        pid = int(self.proc.stdout.readline())
        ready, _, _ = select.select([self.proc.stdout], [], [], HANG_S)
        if not ready:
            with contextlib.suppress(ProcessLookupError):  # it ended just now: as hung
                os.kill(pid, 9)
            self.proc.stdout.readline()  # its status, which no one will ask for
            raise subprocess.TimeoutExpired(f"fdprof (pid {pid})", HANG_S)
        return int(self.proc.stdout.readline())


_server: _Server | None = None


def fdprof_capped(
    *args: str, cap: int, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``fdprof ARGS`` in a process of its own whose address space is capped at ``cap`` bytes;
    ``env``: its whole environment (default: this process's)."""
    global _server
    if _server is None or _server.proc.poll() is not None:
        _server = _Server()
    argv = [str(a) for a in args]
    code, out, err = _server.call(argv, os.environ if env is None else env, cap)
    return subprocess.CompletedProcess(["fdprof", *argv], code, out, err)


if __name__ == "__main__":
    serve()
