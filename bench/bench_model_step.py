"""What one step of the engine's model costs, against another checkout's model, side by side.

The steps are the worker's: ``Decoder.forward_paged`` on one CPU thread over a paged pool, a
decode step (8 sequences, one token each, 20 to 300 tokens of context) and a prefill step (two
sequences of 64 tokens). Each sample is a fresh process with one tree on its path (this one, or
``--against DIR``: e.g. a worktree of the previous commit); the trees alternate, and the ratio is
taken pair by pair, so a machine whose speed drifts still compares like with like. The logits
of both trees are compared too: a faster step that changed the tokens would not be the same
engine (the pairing: ``bench/trees.py``).

    python bench/bench_model_step.py [--against DIR] [--pairs 5] [--steps 200]
"""

from __future__ import annotations

import hashlib

import trees


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


def main() -> None:
    trees.compare("bench_model_step", ["decode_ms", "prefill_ms"],
                  trees.arguments(__doc__, "steps", 200))  # fmt: skip


if __name__ == "__main__":
    main()
