"""``run.json`` for a run recorded through the environment (``FDPROF_RUN_DIR``), where no fdprof
supervisor saw the processes start: they are found from the record files' own headers.

Used by the vLLM plugin's main process at exit, and available to any runner (the generic A/B)
that sets ``FDPROF_RUN_DIR`` for a command and writes the manifest after it.
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

MANIFEST = "run.json"
RUN_FORMAT = "fdprof-run/1"
#: ``<role>-<dp_rank>-<pid>.rec``, as :func:`fdprof.probe.configure` names record files
RECORD_NAME = re.compile(r"^(?P<role>.+)-(?P<dp>\d+)-(?P<pid>\d+)\.rec$")


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
