"""A stand-in for ``nsys profile``, for ``fdprof run --nsys`` where Nsight Systems is not
installed: the same command line (``profile --trace=... --output=BASE --force-overwrite=true
--export=sqlite PROGRAM ARGS...``), the program run with fdprof's own NVTX capture library as
its NVTX tool (real ranges from the real processes), and the captured ranges written as the
SQLite export Nsight documents (start/end ranges with their int64 payload, the session start)
to ``BASE.sqlite``, plus an empty ``BASE.nsys-rep``. Exit status: the program's."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trace"))

from nsys_export import EPOCH, STARTEND, build_export, gtid  # noqa: E402

from fdprof.capture.nvtx import injection_env, trim  # noqa: E402
from fdprof.trace.nvtx_capture import read_nvtx_capture  # noqa: E402


def main(argv: list[str]) -> int:
    assert argv[0] == "profile", argv
    options, program = {}, []
    for i, arg in enumerate(argv[1:], 1):
        if not arg.startswith("--"):
            program = argv[i:]
            break
        key, _, value = arg[2:].partition("=")
        options[key] = value
    assert options.get("export") == "sqlite" and program, argv
    base = Path(options["output"])
    with tempfile.TemporaryDirectory() as captured:
        env = {**os.environ, **injection_env(captured)}
        rc = subprocess.run(program, env=env).returncode
        trim(captured)
        ranges = read_nvtx_capture(captured).spans
    events = [
        {"start": int(r.start) - EPOCH, "end": None if r.end < 0 else int(r.end) - EPOCH,
         "eventType": STARTEND, "text": r.name, "globalTid": gtid(int(r.pid), int(r.tid)),
         "int64Value": int(r.span_id)}
        for r in ranges.itertuples()
    ]  # fmt: skip
    build_export(base.with_suffix(".sqlite"), events)
    base.with_suffix(".nsys-rep").touch()
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
