"""``fdprof run --nsys``: the run under Nsight Systems, its SQLite export joined to the records.

Why: the probe times device work itself (``docs/probe.md``), but Nsight Systems sees what the
GPU did, kernel by kernel. Where ``nsys`` is installed (GPU servers), one flag records both and
joins them by span id, the NVTX payload.

The whole ``fdprof run`` is re-executed under ``nsys profile --trace=cuda,nvtx,osrt`` (nsys
follows the engine's spawned processes); :data:`fdprof.settings.NSYS_INNER` tells that inner
run to turn the probe's NVTX sink on (nsys provides the NVTX tool). nsys writes
``RUN/nsys/report.nsys-rep`` and its SQLite export ``RUN/nsys/report.sqlite``; the export is
then joined to the run (:func:`fdprof.trace.join.join`) to check that its ranges carry the
run's span ids, and what the join found goes to ``run.json`` under ``"nsys"``. Read the joined
trace with ``fdprof hazards RUN/nsys/report.sqlite --join RUN`` (or ``diff``/``convert``
likewise).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from fdprof import settings
from fdprof.contracts import dumps, stamped
from fdprof.errors import FdprofError
from fdprof.formats.rundir import MANIFEST

TRACES = "cuda,nvtx,osrt"
REPORT = Path("nsys") / "report"


def nsys_executable() -> str:
    """``nsys`` on the PATH; bad input without it."""
    found = shutil.which("nsys")
    if found is None:
        raise FdprofError("--nsys needs Nsight Systems: no 'nsys' on the PATH")
    return found


def profile_command(nsys: str, run_dir: Path, inner: list[str]) -> list[str]:
    """``nsys profile`` around ``inner``, writing the report and its SQLite export."""
    return [
        nsys, "profile", f"--trace={TRACES}", f"--output={run_dir / REPORT}",
        "--force-overwrite=true", "--export=sqlite", *inner,
    ]  # fmt: skip


def run_under_nsys(argv: list[str], run_dir: Path, json_out: bool) -> int:
    """Run ``fdprof <argv>`` (without ``--nsys``) under nsys, then join its export. nsys's own
    output goes to stderr when JSON was asked for, so stdout stays one JSON object."""
    nsys = nsys_executable()
    (run_dir / REPORT).parent.mkdir(parents=True, exist_ok=True)
    inner = [sys.executable, "-m", "fdprof", *(a for a in argv if a != "--nsys")]
    env = settings.child_env({settings.NSYS_INNER: "1"})
    out = sys.stderr if json_out else None
    rc = subprocess.run(profile_command(nsys, run_dir, inner), env=env, stdout=out).returncode
    export = (run_dir / REPORT).with_suffix(".sqlite")
    if not export.exists():
        raise FdprofError(f"nsys wrote no SQLite export ({export}); its exit status was {rc}")
    summary = join_summary(export, run_dir)
    manifest = run_dir / MANIFEST
    data = json.loads(manifest.read_text())
    data["nsys"] = summary
    manifest.write_text(json.dumps(data, indent=2))
    if json_out:
        print(dumps(stamped("run", {**data.get("results", {}), "nsys": summary})))
    else:
        print(f"nsys: {summary['export']} joined to the run by span id: "
              f"{summary['ranges_joined']} NVTX ranges, clock offset "
              f"{summary['clock_offset_ns']} ns")  # fmt: skip
    return rc


def join_summary(export: Path, run_dir: Path) -> dict[str, Any]:
    """What joining ``export`` to ``run_dir`` found (raises if no range carries a span id)."""
    from fdprof.trace import load

    joined = load(export, join=run_dir)
    spans = joined.spans
    return {
        "report": str(export.with_suffix(".nsys-rep").relative_to(run_dir)),
        "export": str(export.relative_to(run_dir)),
        "ranges_joined": int(joined.meta.get("ranges_joined", 0)),
        "clock_offset_ns": joined.meta["clock_offset_ns"],
        "device_vs_nsys_ns": joined.meta.get("device_vs_nsys_ns"),
        "device_spans": int(spans["lane"].str.contains("/cuda:").fillna(False).sum()),
    }
