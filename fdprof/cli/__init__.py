"""The ``fdprof`` command. Each subcommand lives in its own module of this package and
exposes ``register(subparsers)``; modules are discovered, so adding a command touches one file.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import signal
import sys
from pathlib import Path

from fdprof.errors import FdprofError, missing_extra
from fdprof.trace import Trace, load


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line and exit 2, like every other bad input."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def warn(args: argparse.Namespace, message: object) -> None:
    """A warning on stderr, one line, named after the command (as errors are in :func:`main`)."""
    print(f"fdprof {args.command}: warning: {message}", file=sys.stderr)


def load_trace(args: argparse.Namespace, path: Path, join: Path | None = None) -> Trace:
    """``fdprof.trace.load`` for a command's TRACE argument, its reader's warnings on stderr."""
    trace = load(path, join=join)
    for warning in trace.meta.get("warnings", []):
        warn(args, warning)
    return trace


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fdprof",
        description=(
            "Profile an LLM-serving engine: run it, capture traces, diff runs, find KV hazards."
        ),
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        importlib.import_module(f"{__name__}.{info.name}").register(sub)
    return parser


def _bad_input(args: argparse.Namespace, message: str) -> int:
    """Exit 2: one line on stderr, and a JSON error object on stdout when JSON was asked for
    (a script reading stdout then always gets one object)."""
    print(f"fdprof {args.command}: {message}", file=sys.stderr)
    if getattr(args, "format", None) == "json":
        error = {"command": args.command, "message": message, "exit_code": 2}
        print(json.dumps({"error": error}), flush=True)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    #: the command line as given, for a command that starts itself again (run --nsys)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return int(args.func(args) or 0)
    except FdprofError as exc:
        return _bad_input(args, str(exc))
    except ModuleNotFoundError as exc:  # an extra not installed (the engine without torch)
        error = missing_extra(exc)
        if error is None:
            raise
        return _bad_input(args, str(error))
    except BrokenPipeError:  # the reader went away (| head): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OSError as exc:  # an output path that cannot be written, a full disk, ...
        where = f"{exc.filename}: " if exc.filename else ""
        return _bad_input(args, f"{where}{exc.strerror or exc}")
    except KeyboardInterrupt:
        print(f"fdprof {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
