"""Sweep: real engine runs, every mode and seeded fault, several seeds, through the detector.

Too slow for the test suite (each run takes seconds to a minute here), so it is a script:
``python -m tests.analysis.sweep_engine_faults --seeds 5 --out DIR``. It prints one line per
run and exits 1 unless every fault run has a race and every clean run has none (and the
lock what-if on each clean baseline finds nothing).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from fdprof.analysis.hazards import find_hazards
from fdprof.analysis.whatif import what_if_drop_lock
from fdprof.trace import load

CASES = {
    "baseline": ["--kv-lock", "ipc"],
    "lockless": ["--kv-lock", "none"],
    "no-wait-swap-in": ["--kv-lock", "none", "--fault", "no-wait-swap-in"],
    "free-before-swap-out": ["--kv-lock", "none", "--fault", "free-before-swap-out"],
    "ack-before-copy": ["--kv-lock", "none", "--fault", "ack-before-copy"],
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    ok = True
    for seed in range(args.seeds):
        for case, flags in CASES.items():
            run = args.out / f"{case}-{seed}"
            cmd = [sys.executable, "-m", "fdprof", "run", *flags, "--seed", str(seed),
                   "--out", str(run), "--json"]  # fmt: skip
            res = json.loads(subprocess.run(cmd, capture_output=True, text=True,
                                            check=True).stdout)  # fmt: skip
            trace = load(run)
            counts = find_hazards(trace).counts
            line = {"case": case, "seed": seed, "swaps": res["swaps"], **counts}
            expect_race = case not in ("baseline", "lockless")
            good = (counts["races"] > 0) == expect_race
            if case == "baseline":
                line["what_if_newly_unordered"] = len(what_if_drop_lock(trace).newly_unordered)
                good &= line["what_if_newly_unordered"] == 0
            ok &= good
            print(json.dumps(line | {"ok": bool(good)}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
