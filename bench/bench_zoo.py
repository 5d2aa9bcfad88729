"""The zoo of Cache Manager V1's faults over seeds (BENCHMARKS.md, "The zoo").

Why: each fault reproduces a public bug that was found from wrong outputs, by hand. This shows,
per fault and seed, both symptoms side by side: the tokens against a reference run of the same
seed without swaps, and ``fdprof hazards``' exit code with the races it names (span, role,
layer range, block); then the same seeds without the fault, which must be clean and
token-equal. Each fault runs under the pressure its reproduction needs
(``fdprof.engine.config.FAULT_PRESSURE``).

    python bench/bench_zoo.py [--seeds 0 1 2] [--requests 48] [--out out/zoo]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from fdprof.engine.config import FAULT_PRESSURE, V1_FAULTS, EngineConfig
from fdprof.regress import Case, Suite


def hazards(run_dir: Path) -> tuple[int, dict]:
    """``fdprof hazards RUN --json``: its exit code and its report."""
    done = subprocess.run([sys.executable, "-m", "fdprof", "hazards", str(run_dir), "--json"],
                          capture_output=True, text=True)  # fmt: skip
    return done.returncode, json.loads(done.stdout)


def named(report: dict) -> str:
    """The races in a few words: each kind's roles and spans, a layer range and a block."""
    kinds = [f"{k['name_a']}({k['role_a']})/{k['name_b']}({k['role_b']}) {k['modes']} "
             f"x{k['pairs']}" for k in report["race_kinds"][:2]]  # fmt: skip
    races = report["races"]
    if not races:
        return "-"
    first = races[0]
    layers = sorted({r["layers_a"] for r in races} | {r["layers_b"] for r in races})
    return f"{'; '.join(kinds)}; layers {','.join(layers)}; e.g. {first['blocks'][0]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--out", type=Path, default=Path("out/zoo"))
    args = ap.parse_args(argv)
    suite = Suite(args.out, log=lambda line: print(line, file=sys.stderr, flush=True))
    rows = ["| fault | seed | tokens differ | KV mismatches | hazards exit | races | what raced |",
            "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    clean_rows = ["| workload (no fault) | seed | tokens equal | hazards exit | races |",
                  "| --- | --- | --- | --- | --- |"]  # fmt: skip
    clean_done: set[tuple[str, int]] = set()
    ok = True
    for fault in V1_FAULTS:
        pressure = {"workload": "prefix-swap", "requests": args.requests,
                    **FAULT_PRESSURE.get(fault, {})}  # fmt: skip
        cfg = EngineConfig(fault=fault, **pressure)
        for seed in args.seeds:
            out = suite.run(Case(f"zoo {fault}", cfg, (seed,)), seed)
            code, report = hazards(Path(out.results.trace))
            differ = len(out.results.reference.mismatched)
            rows.append(f"| `{fault}` | {seed} | {differ}/{out.results.requests} | "
                        f"{out.mismatches} | {code} | {report['counts']['races']} | "
                        f"{named(report)} |")  # fmt: skip
            ok &= code == 1
            clean = cfg.with_(fault=None)  # the modes and pressure stay: only the bug goes
            key = (f"{clean.workload} chunk {clean.chunk}", seed)
            if key in clean_done:
                continue
            clean_done.add(key)
            out = suite.run(Case(f"zoo clean {key[0]}", clean, (seed,)), seed)
            code, report = hazards(Path(out.results.trace))
            clean_rows.append(f"| {key[0]} | {seed} | {out.tokens_equal} | {code} | "
                              f"{report['counts']['races']} |")  # fmt: skip
            ok &= code == 0 and out.tokens_equal
    print("\n".join(rows) + "\n\n" + "\n".join(clean_rows))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
