"""How a run creates its files on a shared machine: nothing planted in the output directory is
followed, what it records is the owner's alone, and two runs never write one directory.

- New files are made with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (:func:`create_new`: whatever had
  the name, a file or a symbolic link, is removed first, never opened) or written under a fresh
  temporary name and renamed over the old one (:func:`write_atomic`: a reader never sees half a
  file, and a rename replaces a symbolic link instead of writing where it points).
- Files get ``FDPROF_FILE_MODE`` (default 0600), directories a run makes the same with search
  permission (0700), whatever the umask (:mod:`fdprof.settings`).
- :class:`DirectoryLock`: an exclusive ``flock`` on ``DIR/.fdprof.lock`` while a run writes
  ``DIR``; a second run given the same directory refuses at once, before it removes anything.
- :func:`claim_output`: an output directory that already holds something is refused (a second
  run would mix its files with the first's), or emptied when the user said ``--force``.

Standard library only: every engine process and a foreign engine's probe import this.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

from fdprof import settings
from fdprof.errors import FdprofError

#: the lock file a run holds in its output directory (removed when the run ends)
LOCK_NAME = ".fdprof.lock"
_NEW = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def make_dir(path: str | os.PathLike) -> Path:
    """``path`` as a directory; one this call makes gets the run directory mode (0700). An
    existing directory is left as it is (the user made it so)."""
    path = Path(path)
    mode = settings.dir_mode()
    try:
        path.mkdir(parents=True, mode=mode)
    except FileExistsError:
        if not path.is_dir():
            raise FdprofError(f"{path}: exists and is not a directory") from None
    else:
        os.chmod(path, mode)
    return path


def resolved(path: str | os.PathLike) -> Path:
    """``path`` made absolute with its symbolic links resolved; a loop of links, or one that
    cannot be followed, is bad input (one line), not the ``RuntimeError`` of
    :meth:`Path.resolve`."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError) as exc:
        raise FdprofError(f"{path}: cannot resolve ({_reason(exc)})") from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return "a loop of symbolic links" if "loop" in str(exc).lower() else str(exc)


def claim_output(directory: str | os.PathLike, force: bool) -> Path:
    """``directory`` ready to be written by a run: a new or empty directory as it is; one that
    holds anything (its lock file aside) refused, unless ``force``, which empties it first:
    a run never leaves its files mixed with an earlier run's. Call it holding the directory's
    :class:`DirectoryLock`, so that no run still writing there loses its files."""
    path = Path(directory)
    try:
        entries = sorted(e.name for e in os.scandir(path) if e.name != LOCK_NAME)
    except OSError as exc:
        raise FdprofError(f"{path}: cannot list ({exc.strerror or exc})") from None
    if not entries:
        return path
    if not force:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise FdprofError(
            f"{path} is not empty ({len(entries)} entries: {shown}): give a new --out, or "
            "--force to replace what is there"
        )
    for name in entries:
        entry = path / name
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    return path


def create_new(path: str | os.PathLike, mode: int | None = None) -> int:
    """A descriptor (read-write) of a new empty file at ``path``, ``mode`` (default
    ``FDPROF_FILE_MODE``). Whatever had the name is removed first: a symbolic link planted
    there is never followed."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, _NEW, 0o600)
    try:
        os.fchmod(fd, settings.file_mode() if mode is None else mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_new(path: str | os.PathLike, mode: str = "wb"):
    """:func:`create_new` as a file object (``mode``: ``wb``, ``w``, ...)."""
    return os.fdopen(create_new(path), mode)


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` through a fresh temporary name beside it and a rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, settings.file_mode())
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


class DirectoryLock:
    """``with DirectoryLock(dir):`` holds an exclusive ``flock`` on ``dir/.fdprof.lock`` (which
    names the holder's pid) and removes the file at the end. A directory another process holds
    is bad input: one line naming that process (:class:`FdprofError`), nothing touched."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self._fd: int | None = None

    def __enter__(self) -> DirectoryLock:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise FdprofError(
                    f"{self.directory} is in use by another fdprof run{holder}: wait for it "
                    "to end, or give another --out"
                ) from None
            except BaseException:
                os.close(fd)
                raise
            if _same_file(fd, self.path):
                break
            # the last holder removed the file between our open and our lock: the lock we got
            # is on a name no one else sees; take the file that has the name now
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # still locked: whoever opens it next finds it gone
        os.close(self._fd)
        self._fd = None


def _holder(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode().strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


def _same_file(fd: int, path: Path) -> bool:
    try:
        named = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)
