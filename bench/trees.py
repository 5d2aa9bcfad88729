"""This checkout against another, side by side: each sample is a fresh process with one tree on
its path (this one, or ``--against DIR``: e.g. a worktree of the previous commit); the trees
alternate, and each ratio is taken pair by pair, so a machine whose speed drifts still compares
like with like. What a sample measures is a function ``sample(n)`` of a bench module returning
a dict: its numbers, and any ``*_sha256`` digest of what it computed, which must be the same in
both trees (a faster path that changed the answer would not be the same code)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def arguments(doc: str, size: str, size_default: int) -> argparse.Namespace:
    """``--against DIR``, ``--pairs`` and the sample size option ``size``, for a bench's main."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--against", type=Path, help="another checkout, e.g. the previous commit's")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument(f"--{size}", type=int, default=size_default, dest="size")
    return ap.parse_args()


def _sample(tree: Path, module: str, size: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    code = f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); import json; " \
           f"from {module} import sample; print(json.dumps(sample({size})))"  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          cwd=tree, check=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(module: str, keys: list[str], args: argparse.Namespace) -> None:
    """Print each of ``keys``: per tree its median [min-max], and the ratio this/against; then
    whether the digests agree."""
    trees = {"this": ROOT} | ({"against": args.against.resolve()} if args.against else {})
    samples: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(args.pairs):
        for name, tree in trees.items():
            samples[name].append(_sample(tree, module, args.size))
    for key in keys:
        line = [f"{key}:"]
        for name in trees:
            values = [s[key] for s in samples[name]]
            line.append(f"{name} {statistics.median(values):.2f} "
                        f"[{min(values):.2f}-{max(values):.2f}]")  # fmt: skip
        if args.against:
            ratios = [a[key] / b[key] for a, b in zip(samples["this"], samples["against"],
                                                      strict=True)]  # fmt: skip
            line.append(f"ratio this/against {statistics.median(ratios):.2f} "
                        f"[{min(ratios):.2f}-{max(ratios):.2f}]")  # fmt: skip
        print("  ".join(line))
    for digest in sorted(k for k in samples["this"][0] if k.endswith("_sha256")):
        if args.against:
            same = {s[digest] for group in samples.values() for s in group}
            print(f"{digest.removesuffix('_sha256')}: "
                  + ("identical in both trees" if len(same) == 1 else "DIFFER"))  # fmt: skip
