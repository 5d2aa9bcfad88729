"""NVTX capture without Nsight Systems: the environment that loads our injection library.

``fdprof run --nvtx-capture`` sets :func:`injection_env` in every child as it starts
(and turns the probe's NVTX sink on); each process then writes ``<run>/nvtx/nvtx-<pid>.cap``,
read back by :mod:`fdprof.trace.nvtx_capture`. The library is built by ``setup.py`` from
``nvtx_inject.c``.
"""

from __future__ import annotations

import importlib.machinery
from pathlib import Path

from fdprof import files, settings
from fdprof.errors import FdprofError
from fdprof.trace.nvtx_capture import RUN_SUBDIR, read_file

#: the directory each process writes its capture file into
#: capacity of one process's capture file in MiB (default 64; sparse until written)
#: NVTX's own variable naming the injection library
INJECTION_ENV = "NVTX_INJECTION64_PATH"


def library_path() -> Path:
    """Absolute path of the built injection library (NVTX silently ignores a wrong one)."""
    here = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = here / f"_nvtx_inject{suffix}"
        if candidate.is_file():
            return candidate
    raise FdprofError("NVTX capture library not built; run `pip install -e .` (make test does)")


def injection_env(run_dir: str | Path) -> dict[str, str]:
    """Environment variables that make a child process capture its NVTX ranges into
    ``run_dir/nvtx/``; creates that folder."""
    out = files.make_dir(files.make_dir(Path(run_dir).resolve()) / RUN_SUBDIR)
    return {INJECTION_ENV: str(library_path()), settings.NVTX_DIR: str(out)}


def trim(run_dir: str | Path) -> None:
    """Cut each capture file to the bytes written (they are sized to capacity up front).
    Call after the processes have exited; a file still open for writing must not be trimmed."""
    for path in (Path(run_dir) / RUN_SUBDIR).glob("nvtx-*.cap"):
        used = read_file(path).used
        with path.open("r+b") as f:
            f.truncate(used)
