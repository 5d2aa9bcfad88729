"""The C kernels and their Python twins give the same answers: the clocks of every sync event
(happens-before and WCP) and the unordered and alarm pairs, on the random traces the oracle
tests use, and the C entry points refuse what would make them read out of bounds."""

from __future__ import annotations

import numpy as np
import pytest

from fdprof.analysis import kernels
from fdprof.analysis.hazards import prepare
from fdprof.analysis.predict import wcp_clocks
from fdprof.analysis.search import unordered_pairs

from .randomtrace import random_trace, random_wcp_trace

pytestmark = pytest.mark.skipif(kernels._c is None, reason="the C kernels are not built")


def _both(monkeypatch, compute):
    """``compute()`` with the C kernels, then with the Python twins."""
    monkeypatch.delenv("FDPROF_KERNELS", raising=False)
    c = compute()
    monkeypatch.setenv("FDPROF_KERNELS", "python")
    return c, compute()


def _pairs(found) -> tuple[set, set]:
    racy = set(zip(found.racy_x.tolist(), found.racy_y.tolist(), strict=True))
    alarms = set(zip(found.alarm_x.tolist(), found.alarm_y.tolist(), strict=True))
    return racy, alarms


@pytest.mark.parametrize("seed", range(150))
def test_happens_before_kernels_agree(monkeypatch, seed):
    trace = random_trace(seed, ("mixed", "skewed", "locks", "lifetime")[seed % 4])

    def compute():
        p = prepare(trace)
        return p.clocks.rows.copy(), p.src.copy(), _pairs(unordered_pairs(p.acc, p.clocks.lanes))

    (c_rows, c_src, c_pairs), (py_rows, py_src, py_pairs) = _both(monkeypatch, compute)
    assert np.array_equal(c_rows, py_rows) and np.array_equal(c_src, py_src)
    assert c_pairs == py_pairs


@pytest.mark.parametrize("seed", range(150))
def test_wcp_kernels_agree(monkeypatch, seed):
    trace = random_wcp_trace(seed)

    def compute():
        p = prepare(trace)
        clocks = wcp_clocks(p)
        return clocks, _pairs(unordered_pairs(p.acc, clocks, alarms=False))

    (c_clocks, c_pairs), (py_clocks, py_pairs) = _both(monkeypatch, compute)
    assert np.array_equal(c_clocks.vc, py_clocks.vc)
    assert np.array_equal(c_clocks.times, py_clocks.times)
    assert c_pairs == py_pairs


def test_the_search_refuses_rows_out_of_order(monkeypatch):
    monkeypatch.delenv("FDPROF_KERNELS", raising=False)
    two = np.zeros(2, np.int64)
    acc = {
        "key": np.array([1, 0]),
        "lane": two,
        "start": two,
        "end": two,
        "lo": two,
        "hi": np.ones(2, np.int64),
        "write": np.ones(2, bool),
    }
    clock = {"ev_off": np.array([0, 0]), "times": np.zeros(0, np.int64),
             "rel_off": np.array([0, 0]), "rel": np.zeros(0, np.int64),
             "tb": np.zeros(0, np.int64), "ta_off": np.array([0, 2]),
             "ta_time": np.zeros(2, np.int64)}  # fmt: skip
    with pytest.raises(ValueError, match="not sorted"):
        kernels.unordered(1, np.arange(2), np.arange(2), acc, clock, True)


def test_the_worklist_refuses_an_item_out_of_range(monkeypatch):
    monkeypatch.delenv("FDPROF_KERNELS", raising=False)
    w = kernels.Worklist.new([np.array([3])], 1, np.full(1, -1))
    with pytest.raises(ValueError, match="item out of range"):
        kernels.run_worklist(w, kernels.HbStep(np.zeros(1, bool)))
