"""What one step of the engine's model costs, against another checkout's model, side by side.

The steps are the worker's: ``Decoder.forward_paged`` on one CPU thread over a paged pool, a
decode step (8 sequences, one token each, 20 to 300 tokens of context) and a prefill step (two
sequences of 64 tokens). Each sample is a fresh process with one tree on its path (this one, or
``--against DIR``: e.g. a worktree of the previous commit); the trees alternate, and the ratio is
taken pair by pair, so a machine whose speed drifts still compares like with like. The logits
of both trees are compared too: a faster step that changed the tokens would not be the same
engine.

    python bench/bench_model_step.py [--against DIR] [--pairs 5] [--steps 200]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sample(steps: int) -> dict:
    """Milliseconds per decode and per prefill step of the importable tree's model."""
    import random
    import time

    import torch

    from fdprof.engine.config import EngineConfig
    from fdprof.engine.model import Decoder, SeqInput

    torch.set_num_threads(1)  # as the worker runs
    cfg = EngineConfig()
    model = Decoder(cfg)
    pool = torch.randn(cfg.layers, 2, 256, cfg.block_size, cfg.kv_heads, cfg.head_dim,
                       generator=torch.Generator().manual_seed(1))  # fmt: skip
    rng = random.Random(0)
    bs = cfg.block_size

    def decode() -> list[SeqInput]:
        seqs = []
        for i in range(8):
            ctx = rng.randint(20, 300)
            table = list(range(i * 20, i * 20 + (ctx + bs - 1) // bs))
            seqs.append(SeqInput(tokens=[rng.randrange(cfg.vocab)], start=ctx - 1,
                                 block_table=table))  # fmt: skip
        return seqs

    def prefill() -> list[SeqInput]:
        tokens = [[rng.randrange(cfg.vocab) for _ in range(64)] for _ in range(2)]
        return [SeqInput(t, 0, list(range(160 + 4 * i, 164 + 4 * i))) for i, t in enumerate(tokens)]

    out: dict = {}
    digest = hashlib.sha256()
    for name, make in (("decode_ms", decode), ("prefill_ms", prefill)):
        batches = [make() for _ in range(steps)]
        for seqs in batches[:5]:  # warm-up
            model.forward_paged(pool, seqs)
        t0 = time.perf_counter()
        for seqs in batches:
            digest.update(model.forward_paged(pool, seqs).numpy().tobytes())
        out[name] = (time.perf_counter() - t0) / steps * 1e3
    out["logits_sha256"] = digest.hexdigest()
    return out


def _run(tree: Path, steps: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    code = f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); import json; " \
           f"from bench_model_step import sample; print(json.dumps(sample({steps})))"  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          cwd=tree, check=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", type=Path, help="another checkout, e.g. the previous commit's")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    trees = {"this": ROOT} | ({"against": args.against.resolve()} if args.against else {})
    samples: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(args.pairs):
        for name, tree in trees.items():
            samples[name].append(_run(tree, args.steps))
    for key in ("decode_ms", "prefill_ms"):
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
    if args.against:
        same = {s["logits_sha256"] for group in samples.values() for s in group}
        print("logits: " + ("identical in both trees" if len(same) == 1 else "DIFFER"))


if __name__ == "__main__":
    main()
