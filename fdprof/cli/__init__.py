"""The ``fdprof`` command. Each subcommand lives in its own module of this package and
exposes ``register(subparsers)``; modules are discovered, so adding a command touches one file.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import pkgutil
import signal
import sys
import traceback
from pathlib import Path

from fdprof import files, interrupts
from fdprof.contracts import dumps, stamped
from fdprof.errors import FdprofError, missing_extra
from fdprof.trace import Trace, limits, load


class _UsageError(Exception):
    """A command line argparse refused: :func:`main` says it in one line, exit 2 (and as a
    JSON error object on stdout when the command line asked for JSON)."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(f"{prog}: error: {message}")
        self.command = prog.split()[1] if len(prog.split()) > 1 else None


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """``--help`` shows every option's default: ``(default: X)`` after a help text that does
    not already say it, for options whose default is a value (not None, not a flag's False)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        shown = " ".join(map(str, default)) if isinstance(default, list | tuple) else default
        return f"{text} (default: {str(shown).replace('%', '%%')})"


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line and exit 2, like every other bad input."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        raise _UsageError(self.prog, message)


def warn(args: argparse.Namespace, message: object) -> None:
    """A warning on stderr, one line, named after the command (as errors are in :func:`main`)."""
    print(f"fdprof {args.command}: warning: {message}", file=sys.stderr)


def load_trace(args: argparse.Namespace, path: Path, join: Path | None = None) -> Trace:
    """``fdprof.trace.load`` for a command's TRACE argument, its reader's warnings on stderr."""
    trace = load(path, join=join)
    for warning in trace.meta.get("warnings", []):
        warn(args, warning)
    return trace


#: what makes a run safe, for ``hazards`` and ``ab`` alike (:mod:`fdprof.analysis.verdicts`)
SAFETY_RULE = """safety (hazards and ab alike; docs/analysis.md "Verdicts and exit codes"):
  a run is unsafe (exit 1) when two conflicting KV-block accesses are unordered (a race,
  overlapping this run or latent), when an access falls outside its block's lifetime, when a
  block's ownership is broken (handed out, freed or written while another request holds it,
  used without a hold or after its content was reused, freed under a transfer, a reference
  count below zero or leaked: where the trace records holders), or (ab, run) when a block's
  content does not match what was written. A lock whose holds overlapped
  on two lanes is named in the verdict (BROKEN LOCK) and its edges are left out of the order
  before races are counted: a run that relied on it has races, and is unsafe for them; the lock
  alone does not make a run unsafe."""


def add_force_argument(p: argparse.ArgumentParser, what: str = "--out") -> None:
    """``--force``: the one way to write into an output directory that is not empty."""
    p.add_argument(
        "--force",
        action="store_true",
        help=f"replace what {what} already holds; without it a {what} directory that is not "
        "empty is refused (exit 2), so a run never mixes its files with an earlier one's",
    )


def claim_output(directory: Path, force: bool) -> Path:
    """``directory`` (made if need be) empty and ready to write, or bad input: see
    :func:`fdprof.files.claim_output`; checked holding its lock, so a run still writing
    there is never emptied under it."""
    out = files.make_dir(files.resolved(directory))
    with files.DirectoryLock(out):
        return files.claim_output(out, force)


def add_dask_argument(p: argparse.ArgumentParser) -> None:
    """``--dask [ADDRESS|local:N]``, shared by the analyses that run on Dask."""
    p.add_argument(
        "--dask",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="run on Dask: a scheduler's ADDRESS (tcp://host:8786), local:N for a LocalCluster "
        "of N workers on this machine, or nothing for DASK_SCHEDULER_ADDRESS; the trace is "
        "read as a Parquet store (converted to a temporary one if it is not), which every "
        "worker must see; the answer is the in-process one (docs/analysis.md, 'On Dask'); "
        "needs fdprof[dask]",
    )


#: the exit-status contract of every command (CONTRACTS.md); when several apply, 2 > 1 > 3 > 0
EXIT_CODES = """exit status (every command):
  0    ok / clean (a lock that did not exclude is named, not an error: see hazards --help)
  1    races or a block used outside its lifetime (hazards, ab), or corrupted KV
       blocks (ab, run integrity), or a clock alarm (merge)
  2    bad input (one line on stderr saying why), or a crashed run
  3    --require-gain not met
  70   internal error ("internal error, please report"; --debug prints the traceback)
  130  interrupted (Ctrl-C)   141  stdout closed   143  terminated (SIGTERM)
       (130/143: the engine's processes stopped, shared memory removed, run.json "interrupted";
       a second Ctrl-C or SIGTERM does not cut that cleanup short)
when several apply: 2 over 1 over 3 over 0"""


@functools.cache
def build_parser() -> argparse.ArgumentParser:
    """The command line's parser, built once per process: parsing leaves it as it was, and
    building it (every command's options) costs more than a small trace's ``hazards`` when
    :func:`main` is called in-process, as tests and scripts do."""
    parser = _Parser(
        prog="fdprof",
        description=(
            "Profile an LLM-serving engine: run it, capture traces, diff runs, find KV hazards."
        ),
        epilog=EXIT_CODES,
    )
    _add_common_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        importlib.import_module(f"{__name__}.{info.name}").register(sub)
    for command in sub.choices.values():
        _add_common_options(command, top=False)
    return parser


def _add_common_options(parser: argparse.ArgumentParser, top: bool) -> None:
    """``--debug`` and the input limits, given before or after the command: the command's
    copies leave the attribute alone unless given (SUPPRESS), so either place works."""
    default = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--debug",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="on an internal error (exit 70), print the traceback",
    )
    group = parser.add_argument_group(
        "input limits",
        "what a trace may make fdprof allocate, whatever it claims; over a limit: one line, "
        "exit 2. Sizes take K/M/G; 0: no limit (docs/trace.md)",
    )
    for name, (env, flag, what) in limits.SETTINGS.items():
        group.add_argument(
            flag,
            dest=f"limit_{name}",
            metavar="N",
            default=default,
            type=_limit_value(name),
            help=f"{what}; also {env}",
        )


def _limit_value(name: str):
    def parse(text: str) -> float:
        try:
            return limits.parse(name, text)
        except FdprofError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = limits.SETTINGS[name][1]
    return parse


#: exit status of an internal error (sysexits' EX_SOFTWARE)
INTERNAL_ERROR = 70
#: the longest error line: a message quoting input is cut, never a screenful
MAX_LINE = 1000


def one_line(message: object) -> str:
    """``message`` as one line of at most :data:`MAX_LINE` characters."""
    text = " ".join(str(message).split("\n"))
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 3] + "..."


def _bad_input(args: argparse.Namespace, message: str, code: int = 2) -> int:
    """Exit ``code`` (2: bad input): one line on stderr, and a JSON error object on stdout
    when JSON was asked for (a script reading stdout then always gets one object)."""
    message = one_line(message)
    print(f"fdprof {args.command}: {message}", file=sys.stderr)
    if getattr(args, "format", None) == "json" or getattr(args, "json", False):
        print_error_object(args.command, message, code)
    return code


def print_error_object(command: str | None, message: str, code: int) -> None:
    """The JSON error object on stdout (schema ``fdprof.error``)."""
    error = {"command": command, "message": message, "exit_code": code}
    print(dumps(stamped("error", {"error": error})), flush=True)


def _internal_error(args: argparse.Namespace, exc: BaseException) -> int:
    """Exit 70 (EX_SOFTWARE): not the input but fdprof is wrong. One line that says so and
    what was raised; the traceback before it with ``--debug``."""
    if getattr(args, "debug", False):
        traceback.print_exception(exc, file=sys.stderr)
    what = one_line(f"{type(exc).__name__}: {exc}")[:300]
    hint = "" if getattr(args, "debug", False) else "; --debug shows the traceback"
    return _bad_input(args, f"internal error, please report ({what}){hint}", INTERNAL_ERROR)


def _wants_json(argv: list[str]) -> bool:
    """Whether a command line asks for JSON (``--json``, ``--format json``), read from the
    raw words: a usage error comes before the parsed options."""
    words = argv[: argv.index("--")] if "--" in argv else argv
    pairs = zip(words, words[1:], strict=False)
    return "--json" in words or "--format=json" in words or ("--format", "json") in pairs


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    """The names of the commands."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def main(argv: list[str] | None = None) -> int:
    #: the command line as given, for a command that starts itself again (run --nsys)
    given = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(given)
    except _UsageError as exc:
        if exc.command is None and "required: command" in str(exc):  # `fdprof` alone
            parser.print_usage(sys.stderr)
            names = ", ".join(sorted(_commands(parser)))
            exc = _UsageError("fdprof", f"no command given (one of {names}; fdprof --help)")
        print(exc, file=sys.stderr)
        if _wants_json(given):
            print_error_object(exc.command, str(exc), 2)
        return 2
    args.argv = given
    limits.override(**{
        name: value for name in limits.SETTINGS
        if (value := getattr(args, f"limit_{name}", None)) is not None
    })  # fmt: skip
    with interrupts.handled():
        return _dispatch(args)


def _dispatch(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except FdprofError as exc:
        return _bad_input(args, str(exc))
    except ModuleNotFoundError as exc:  # an extra not installed (the engine without torch)
        error = missing_extra(exc)
        if error is None:
            return _internal_error(args, exc)
        return _bad_input(args, str(error))
    except MemoryError:  # past the limits, a trace as large as it says it is
        return _bad_input(args, "out of memory: the input needs more than this process may have")
    except BrokenPipeError:  # the reader went away (| head): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OSError as exc:  # an output path that cannot be written, a full disk, ...
        where = f"{exc.filename}: " if exc.filename else ""
        return _bad_input(args, f"{where}{exc.strerror or exc}")
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (interrupts.Terminated)
        what = "terminated (SIGTERM)" if isinstance(exc, interrupts.Terminated) else "interrupted"
        print(f"fdprof {args.command}: {what}", file=sys.stderr)
        return interrupts.exit_code(exc)
    except Exception as exc:  # anything else is a bug of fdprof's, not of the input
        return _internal_error(args, exc)


if __name__ == "__main__":
    sys.exit(main())
