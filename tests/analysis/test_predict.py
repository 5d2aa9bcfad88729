"""Predicted races on hand-built traces: the lock alone orders two non-conflicting critical
sections around accesses outside them (predicted); conflicting ones (not predicted)."""

import pytest

from fdprof.analysis.predict import predict_races

from .builder import TraceBuilder
from .scenarios import swap_in_then_execute


def _around_lock(conflict: bool):
    b = TraceBuilder()
    b.span("1/1", "produce", 0, 10, writes=(1,))
    b.acquire("lock:kv", 11, "1/1")
    b.span("1/1", "cs_a", 12, 15, writes=(5,))
    b.release("lock:kv", 16, "1/1")
    b.acquire("lock:kv", 20, "2/1")
    b.span("2/1", "cs_b", 21, 25, reads=(5 if conflict else 9,))
    b.release("lock:kv", 26, "2/1")
    b.span("2/1", "consume", 30, 40, reads=(1,))
    return b.build()


@pytest.mark.parametrize("conflict", [False, True])
def test_a_lock_ordering_non_conflicting_sections_predicts_the_race(conflict):
    report = predict_races(_around_lock(conflict))
    assert report.races.empty  # happens-before: the lock orders produce before consume
    names = set(zip(report.predicted["name_a"], report.predicted["name_b"], strict=True))
    assert names == (set() if conflict else {("produce", "consume")})
    assert report.counts["predicted"] == len(names)


@pytest.mark.parametrize("wait_for", [1, None])
def test_the_engines_lock_protecting_a_swap_predicts_nothing(wait_for):
    """The cache manager's hold waits for the swap it issued; the worker's reads the block
    the swap writes: the holds conflict, so WCP keeps the lock's order."""
    report = predict_races(swap_in_then_execute(lock=True, wait_for=wait_for))
    assert report.clean and report.predicted.empty


def test_hazards_predict_on_the_command_line(tmp_path, capsys):
    """``hazards --predict``: the predicted race in every format, the exit status still 0
    (predicted races alone are not observed ones)."""
    import json

    from fdprof.cli import main
    from fdprof.trace import save

    b = TraceBuilder()
    b.span("1/1", "produce", 0, 10, attrs={"kv.gpu_write": [1]})
    b.acquire("lock:kv", 11, "1/1")
    b.span("1/1", "cs_a", 12, 15, attrs={"kv.gpu_write": [5]})
    b.release("lock:kv", 16, "1/1")
    b.acquire("lock:kv", 20, "2/1")
    b.span("2/1", "cs_b", 21, 25, attrs={"kv.gpu_read": [9]})
    b.release("lock:kv", 26, "2/1")
    b.span("2/1", "consume", 30, 40, attrs={"kv.gpu_read": [1]})
    save(b.build(), tmp_path / "run")
    assert main(["hazards", str(tmp_path / "run"), "--predict", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["counts"]["predicted"] == 1 and doc["counts"]["races"] == 0
    assert {doc["predicted_races"][0]["name_a"], doc["predicted_races"][0]["name_b"]} == {
        "produce", "consume"}  # fmt: skip
    assert main(["hazards", str(tmp_path / "run"), "--predict"]) == 0
    out = capsys.readouterr().out
    assert "1 predicted race(s)" in out and "Predicted races" in out and "consume" in out
    assert main(["hazards", str(tmp_path / "run")]) == 0
    assert "predicted" not in capsys.readouterr().out
