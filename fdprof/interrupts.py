"""Ctrl-C and SIGTERM end a command the same way: the same exception, so the same cleanup.

CI runners and ``docker stop`` end a job with SIGTERM, a terminal with Ctrl-C (SIGINT). Both
raise a :class:`KeyboardInterrupt` in the main thread (SIGTERM its subclass :class:`Terminated`),
so every ``finally`` and ``except KeyboardInterrupt`` that stops the engine's processes and
removes their shared memory runs for either; the command then exits 130 or 143 (128 + the
signal, as a shell reports a process the signal killed).

A second signal must not cut that cleanup short: from the first one on, further Ctrl-C and
SIGTERM are only noted (:func:`handled`), and a cleanup that runs without an interrupt behind it
is wrapped in :func:`shielded`, which notes them inside and raises once it is done.

Standard library only: the engine's processes import this too.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: what the command exits with after each signal (128 + its number)
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises :class:`KeyboardInterrupt` (a subclass of it, so
    every cleanup Ctrl-C runs runs for SIGTERM too)."""

    signum = signal.SIGTERM


def exit_code(exc: KeyboardInterrupt) -> int:
    """130 after Ctrl-C, 143 after SIGTERM."""
    return EXIT_CODES[signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT]


def describe(exc: KeyboardInterrupt) -> str:
    """How ``run.json`` and the error line name the interrupt."""
    return "interrupted (SIGTERM)" if isinstance(exc, Terminated) else "interrupted (Ctrl-C)"


#: signals that arrived while they were only noted (oldest first)
_noted: list[int] = []
#: whether an interrupt has been raised since the innermost :func:`handled` began
_interrupted = False


def interrupted() -> bool:
    """Whether the command is being interrupted (Ctrl-C or SIGTERM raised in this
    :func:`handled` block): a cleanup then skips what is only worth doing after a run that
    ended, so the command exits promptly."""
    return _interrupted


def _note(signum: int, frame) -> None:
    _noted.append(signum)


def _raise(signum: int) -> None:
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _interrupt(signum: int, frame) -> None:
    """The first Ctrl-C or SIGTERM: later ones are only noted, then the exception is raised
    (the cleanup it sets off is never interrupted itself)."""
    global _interrupted
    _interrupted = True
    for sig in SIGNALS:
        signal.signal(sig, _note)
    _raise(signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """Inside the block, Ctrl-C raises :class:`KeyboardInterrupt` and SIGTERM
    :class:`Terminated`, once; the handlers before are put back after it unless one fired (the
    process is then on its way out with 130 or 143, and a late signal must not turn that into a
    death by signal). Outside the main thread, where signals cannot be handled, it does nothing."""
    global _interrupted
    if not _main_thread():
        yield
        return
    _interrupted = False
    saved = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        signal.signal(sig, _interrupt)
    try:
        yield
    finally:
        if all(signal.getsignal(sig) is _interrupt for sig in SIGNALS):
            for sig, handler in saved.items():
                signal.signal(sig, handler)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """A cleanup no Ctrl-C or SIGTERM interrupts: inside the block they are noted; after it,
    the first one noted is raised if an interrupt was still expected (:func:`handled` had not
    fired yet), as it would have been without the shield."""
    if not _main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in SIGNALS}
    seen = len(_noted)
    for sig in SIGNALS:
        signal.signal(sig, _note)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        late = _noted[seen:]
        del _noted[seen:]
        if late and saved[late[0]] is _interrupt:
            _interrupt(late[0], None)
