"""The vLLM A/B: offloading with synchronous stores (baseline) against asynchronous stores
(candidate), prefix caching on, on the shared-prefix workload of ``bench/vllm_workload.py``.

Builds the tiny model once, then hands the two commands to fdprof's generic A/B
(``fdprof ab --baseline CMD --candidate CMD``), which runs them ABBA-interleaved, each run
recording into its own directory through ``FDPROF_RUN_DIR``, and reports the gain with its CI
from the traces. Where that runner is not there yet, prints the two commands and exits 2.
Usage: ``python bench/vllm_ab.py [--python .venv-vllm/bin/python] [--out out/vllm-ab]
[ab options ...]`` (``make bench-vllm``).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "bench" / "vllm_workload.py"


def commands(python: Path, model_dir: Path) -> tuple[str, str]:
    """(baseline, candidate) command lines: the same workload, only the store mode differs."""
    base = [str(python), str(WORKLOAD), "--model-dir", str(model_dir)]
    baseline = shlex.join([*base, "--offload", "sync"])
    candidate = shlex.join([*base, "--offload", "async"])
    return baseline, candidate


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", type=Path, default=ROOT / ".venv-vllm" / "bin" / "python")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "vllm-ab")
    args, ab_options = ap.parse_known_args(argv)
    model_dir = args.out / "model"
    subprocess.run([str(args.python), str(WORKLOAD), "--model-dir", str(model_dir),
                    "--build-model"], check=True)  # fmt: skip
    baseline, candidate = commands(args.python, model_dir)
    fdprof = [sys.executable, "-m", "fdprof"]
    ab_help = subprocess.run([*fdprof, "ab", "--help"], capture_output=True, text=True).stdout
    if "--baseline" not in ab_help:
        print("fdprof ab --baseline/--candidate is not available in this checkout; the commands:")
        print(f"  baseline:  {baseline}")
        print(f"  candidate: {candidate}")
        return 2
    ab = [*fdprof, "ab", "--baseline", baseline, "--candidate", candidate,
          "--out", str(args.out / "ab"), *ab_options]  # fmt: skip
    return subprocess.run(ab).returncode


if __name__ == "__main__":
    sys.exit(main())
