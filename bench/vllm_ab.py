"""The vLLM A/B: offloading with synchronous stores (baseline) against asynchronous stores
(candidate), prefix caching on, on the shared-prefix workload of ``bench/vllm_workload.py``.

Builds the tiny model once, then hands the two commands to fdprof's generic A/B
(``fdprof ab --baseline CMD --candidate CMD``), which runs them ABBA-interleaved, each run
recording into its own directory through ``FDPROF_RUN_DIR`` and seeding the workload with its
pair index (``FDPROF_AB_PAIR``), and reports the gain with its CI from the traces; the exit code
is ``fdprof ab``'s (0 safe, 1 races, 2 a failed run, 3 ``--require-gain`` not met).
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
    """(baseline, candidate) command lines: the same workload, only the store mode differs;
    the shell expands the pair index into the workload's seed, so a pair's runs match."""
    base = [str(python), str(WORKLOAD), "--model-dir", str(model_dir)]
    seed = ' --seed "$FDPROF_AB_PAIR"'
    baseline = shlex.join([*base, "--offload", "sync"]) + seed
    candidate = shlex.join([*base, "--offload", "async"]) + seed
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
    ab = [sys.executable, "-m", "fdprof", "ab", "--baseline", baseline, "--candidate", candidate,
          "--names", "sync stores", "async stores", "--out", str(args.out / "ab"),
          *ab_options]  # fmt: skip
    return subprocess.run(ab).returncode


if __name__ == "__main__":
    sys.exit(main())
