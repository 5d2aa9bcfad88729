"""Paged attention against a dense reference, over a scrambled block table."""

import random

import torch

from fdprof.engine.config import EngineConfig
from fdprof.engine.integrity import IntegrityChecker, fingerprints
from fdprof.engine.model import Decoder, SeqInput

CFG = EngineConfig(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, vocab=97, block_size=4)


def test_paged_prefill_and_decode_match_dense():
    torch.manual_seed(0)
    model = Decoder(CFG)
    pool = torch.zeros(CFG.kv_shape(32))
    rng = random.Random(1)
    tokens = [rng.randrange(CFG.vocab) for _ in range(11)]
    table = rng.sample(range(32), 8)
    # prefill in two chunks (a cached prefix, then the rest), then greedy decode
    model.forward_paged(pool, [SeqInput(tokens[:8], 0, table)])
    logits = model.forward_paged(pool, [SeqInput(tokens[8:], 8, table)])
    seq = list(tokens)
    for _ in range(5):
        dense = model.forward_dense(seq)[-1]
        torch.testing.assert_close(logits[0], dense, rtol=1e-4, atol=1e-4)
        seq.append(int(dense.argmax()))
        logits = model.forward_paged(pool, [SeqInput(seq[-1:], len(seq) - 1, table)])


def test_batched_sequences_do_not_interfere():
    model = Decoder(CFG)
    pool = torch.zeros(CFG.kv_shape(16))
    a, b = [1, 2, 3, 4, 5, 6], [7, 8, 9]
    logits = model.forward_paged(pool, [SeqInput(a, 0, [3, 9]), SeqInput(b, 0, [5])])
    torch.testing.assert_close(logits[0], model.forward_dense(a)[-1], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(logits[1], model.forward_dense(b)[-1], rtol=1e-4, atol=1e-4)


def test_fingerprint_catches_one_changed_value_and_counts_nan():
    pool = torch.randn(CFG.kv_shape(4))
    fps = fingerprints(pool, [0, 2])
    checker = IntegrityChecker()
    assert checker.check(pool, [0, 2], fps) == []
    pool[1, 0, 2, 3, 1, 5] += 1e-3
    pool[0, 1, 0, 0, 0, 0] = float("nan")
    assert checker.check(pool, [0, 2], fps) == [0, 2]
    assert checker.stats.to_json() == {"blocks_checked": 4, "mismatches": 2, "nan": 1}


def test_nonfinite_values_in_touched_blocks_and_logits_are_counted():
    checker = IntegrityChecker()
    pool = torch.randn(CFG.kv_shape(8))
    assert checker.count_nonfinite_blocks(pool, [0, 1, 2, 5]) == 0
    pool[1, 1, 2, 0, 0, 3] = float("inf")
    pool[0, 0, 5, 1, 1, 1] = float("nan")
    pool[0, 0, 7, 0, 0, 0] = float("nan")  # not touched
    assert checker.count_nonfinite_blocks(pool, [0, 1, 2, 5]) == 2
    assert checker.count_nonfinite(torch.tensor([[0.0, float("-inf")], [1.0, 2.0]])) == 1
    assert checker.stats.nan == 3
