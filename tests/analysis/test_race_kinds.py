"""Races grouped by kind: a pair counts under one kind whichever of its spans came first."""

import pandas as pd

from fdprof.analysis.hazards import race_kinds


def _race(a, b, modes, blocks, overlapped, t):
    (name_a, role_a, span_a), (name_b, role_b, span_b) = a, b
    return {
        "span_a": span_a, "span_b": span_b, "name_a": name_a, "name_b": name_b,
        "lane_a": "1/1", "lane_b": "2/2", "role_a": role_a, "role_b": role_b,
        "step_a": -1, "step_b": -1, "start_a": t, "end_a": t + 5, "start_b": t + 1,
        "end_b": t + 6, "blocks": blocks, "n_blocks": len(blocks), "modes": modes,
        "layers_a": "all", "layers_b": "all", "overlapped": overlapped,
    }  # fmt: skip


def test_mirrored_pairs_are_one_kind_and_modes_follow_the_order():
    swap, comp1, comp2 = (
        ("swap", "transfer", 1),
        ("execute_model", "worker", 2),
        ("execute_model", "worker", 3),
    )
    races = pd.DataFrame([
        _race(swap, comp1, "wr", ["gpu:1", "gpu:2"], True, 300),   # swap writes, compute reads
        _race(comp2, swap, "rw", ["gpu:2", "gpu:3"], False, 100),  # the same kind, mirrored
        _race(swap, comp2, "rw", ["gpu:9"], True, 200),            # swap reads, compute writes
    ])  # fmt: skip
    columns = ["name_a", "name_b", "modes", "pairs", "overlapped", "spans_a", "spans_b",
               "blocks", "first_ns"]  # fmt: skip
    assert race_kinds(races)[columns].values.tolist() == [
        ["execute_model", "swap", "rw", 2, 1, 2, 1, 3, 100],
        ["execute_model", "swap", "wr", 1, 1, 1, 1, 1, 200],
    ]


def test_no_races_no_kinds():
    kinds = race_kinds(pd.DataFrame(columns=["name_a"]).iloc[:0])
    assert kinds.empty and "pairs" in kinds.columns
