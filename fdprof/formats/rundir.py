"""The run directory: ``run.json`` (format ``fdprof-run/1``) beside one
``<role>-<dp_rank>-<pid>.rec`` record file per process.

Its names, and the manifest's writer, for every writer of run directories (the engine's
supervisor, the vLLM plugin, the generic A/B for a command that writes none, any engine run
through ``FDPROF_RUN_DIR``, the native converter) and for the native reader, so the format's
name and layout are spelled once. A run recorded through the environment, where no fdprof
supervisor saw the processes start, gets its processes from the record files' own headers.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fdprof import files
from fdprof.formats import records as R

#: the run's manifest, and the format it declares
MANIFEST = "run.json"
RUN_FORMAT = "fdprof-run/1"
#: ``<role>-<dp_rank>-<pid>.rec``: a process's record file (:func:`record_file_name`)
RECORD_NAME = re.compile(r"^(?P<role>.+)-(?P<dp>\d+)-(?P<pid>\d+)\.rec$")


def record_file_name(role: str, dp_rank: int, pid: int) -> str:
    """The name of a process's record file in its run directory."""
    return f"{role}-{dp_rank}-{pid}.rec"


def processes_from_records(
    run_dir: str | os.PathLike, tp_ranks: Mapping[int, int] | None = None
) -> list[dict[str, Any]]:
    """One ``run.json`` process entry per readable ``*.rec`` in ``run_dir`` (pid and role from
    the header, DP rank from the file name; ``tp_ranks`` maps pid -> TP rank, else -1).
    Files that are not record files are skipped: the reader names them later."""
    out = []
    for path in sorted(Path(run_dir).glob("*.rec")):
        try:
            with path.open("rb") as f:
                header = R.read_header(f.read(R.FILE_HEADER.size))
        except (OSError, ValueError):
            continue
        match = RECORD_NAME.match(path.name)
        dp_rank = int(match["dp"]) if match else -1
        out.append({
            "pid": header.pid,
            "role": header.role,
            "name": f"{header.role}-{dp_rank}",
            "dp_rank": dp_rank,
            "tp_rank": (tp_ranks or {}).get(header.pid, -1),
            "record": path.name,
            "exitcode": None,
        })  # fmt: skip
    return out


def write_run_manifest(
    run_dir: str | os.PathLike,
    *,
    status: str,
    config: Mapping[str, Any] | None = None,
    results: Mapping[str, Any] | None = None,
    error: str | None = None,
    processes: list[dict[str, Any]] | None = None,
) -> Path:
    """Write ``run_dir/run.json`` atomically (a reader never sees half of it; a link planted
    under its name is replaced, not followed; mode ``FDPROF_FILE_MODE``); processes are found
    from the record files unless given. Returns its path."""
    run_dir = Path(run_dir)
    manifest = {
        "format": RUN_FORMAT,
        "config": dict(config or {}),
        "processes": processes if processes is not None else processes_from_records(run_dir),
        "results": dict(results or {}),
        "status": status,
        "error": error,
    }
    return files.write_atomic(
        run_dir / MANIFEST, json.dumps(manifest, indent=2, default=str) + "\n"
    )
