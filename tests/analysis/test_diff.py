"""Diff, step breakdown and ideal gain on synthetic engine runs and hand-built traces."""

import json

import numpy as np
import pytest
from synthetic import engine_trace

from fdprof.analysis.breakdown import PARTS, ideal_gain, step_breakdown, steps
from fdprof.analysis.device_time import host_overlap as swap_overlap
from fdprof.analysis.diff import FEW_STEPS, diff_traces
from fdprof.analysis.hazards import find_hazards
from fdprof.analysis.stats import ratio_ci
from fdprof.errors import FdprofError

from .builder import TraceBuilder


@pytest.fixture(scope="module")
def runs():
    return engine_trace(120, mode="baseline", seed=1), engine_trace(120, mode="lockless", seed=2)


def test_breakdown_parts_sum_to_the_step(runs):
    for run in runs:
        b = step_breakdown(run)
        assert (b[list(PARTS)].sum(axis=1) == b["duration"]).all()
        assert (b[list(PARTS)] >= 0).all().all()


def test_breakdown_paints_compute_first_then_lock_then_swap():
    b = TraceBuilder()
    b.span("1/1", "step", 0, 100, step=0)
    b.span("3/1", "execute_model", 10, 40, step=0)
    b.span("3/1", "lock_wait", 30, 60, step=0)  # 10 of it under compute
    b.span("1/1", "issue_swap_task", 50, 80, step=0)  # 10 of it under the lock wait
    row = step_breakdown(b.build()).iloc[0]
    assert (row["compute"], row["lock_wait"], row["swap_blocking"], row["idle"]) == (30, 20, 20, 30)


def test_where_the_time_moved(runs):
    d = diff_traces(*runs)
    moved = d.moved.set_index("part")
    # the lockless run hides its swaps under compute: swap blocking is what went away
    assert moved.loc["swap_blocking", "delta_mean"] < -0.9 * moved.loc["swap_blocking", "base_mean"]
    assert moved.loc["step", "delta_mean"] < 0
    assert d.throughput.ratio > 1.5 and not d.throughput.includes_one
    assert d.throughput_unit == "tokens/s"
    assert d.step_latency.hi < 1
    assert d.base.swap_overlap.ratio == 0 and d.new.swap_overlap.ratio > 0.9
    assert set(d.base.locks["name"]) == {"lock_wait", "lock_hold"} and d.new.locks.empty
    assert {"count_base", "total_new", "p99_base", "delta_total"} <= set(d.by_name.columns)
    doc = json.loads(json.dumps(d.to_json()))
    assert doc["throughput"]["unit"] == "tokens/s" and len(doc["throughput"]["ci95"]) == 2
    assert doc["throughput"]["resampled"] == "steps within token-count classes"


def test_tokens_per_second(runs):
    base = diff_traces(*runs).base
    assert base.tokens == 120 * 64
    assert base.tokens_per_s == pytest.approx(base.tokens / base.seconds)


def test_ideal_gain_from_the_baseline_alone(runs):
    gain = ideal_gain(runs[0])
    b = step_breakdown(runs[0])
    blocked = b["swap_blocking"] + b["lock_wait"]  # nothing overlaps in the baseline
    # blocking hidden under the run's compute as a whole, not step by step
    expected = b["duration"].sum() / (b["idle"].sum() + max(b["compute"].sum(), blocked.sum()))
    assert gain.ratio.ratio == pytest.approx(expected, rel=1e-3)
    assert gain.ratio.lo < gain.ratio.ratio < gain.ratio.hi
    # the lockless run already overlaps: only its few unhidden swap waits remain to win
    assert 1.0 <= ideal_gain(runs[1]).ratio.ratio < 1.05 < gain.ratio.ratio


def test_user_named_steps_and_foreign_traces_without_compute_spans():
    b = TraceBuilder()
    for k in range(3):
        b.span("7/7", f"ProfilerStep#{k + 10}", 100 * k, 100 * k + 90)
        b.span("7/7", "aten::mm", 100 * k + 10, 100 * k + 50)
    trace = b.build()
    # found without a flag, numbered as the profiler numbered them
    assert steps(trace)["step"].tolist() == [10, 11, 12]
    bare = TraceBuilder()
    bare.span("7/7", "aten::mm", 10, 50)
    with pytest.raises(FdprofError, match="--step-name"):
        steps(bare.build())
    st = steps(trace, "ProfilerStep#")
    assert st["step"].tolist() == [0, 1, 2] and st["tokens"].isna().all()
    row = step_breakdown(trace, "ProfilerStep#").iloc[0]
    assert (row["compute"], row["idle"]) == (40, 50)
    d = diff_traces(trace, trace, "ProfilerStep#")
    assert d.throughput_unit == "steps/s" and d.throughput.ratio == pytest.approx(1.0)
    assert d.cautions[0].startswith("only 3 and 3 steps: intervals that resample fewer than 10")
    assert d.to_json()["cautions"] == d.cautions


def test_enough_steps_need_no_caution(runs):
    assert diff_traces(*runs).cautions == []


def test_a_bootstrap_of_few_steps_is_too_narrow():
    """Why the diff cautions below FEW_STEPS: steps/s of two runs whose step time differs by a
    known factor, drawn 600 times: the throughput CI covers it far less than 95% of the time at
    6 steps a side, closer to 95% at 40."""

    def coverage(n: int) -> float:
        rng, hits = np.random.default_rng(n), 0
        for k in range(600):
            base = rng.lognormal(np.log(77), 0.2, n)
            new = rng.lognormal(np.log(77 * 1.3), 0.2, n)
            rows = [np.column_stack([np.ones(n), d]) for d in (base, new)]
            ci = ratio_ci(*rows, "rate", seed=k, n_boot=500)
            hits += ci.lo <= 1 / 1.3 <= ci.hi
        return hits / 600

    assert coverage(6) < 0.91
    assert coverage(4 * FEW_STEPS) >= 0.92


def test_steps_from_fd_step_ids_when_there_is_no_step_span():
    b = TraceBuilder()
    b.span("3/1", "execute_model", 10, 40, step=5)
    b.span("1/1", "schedule", 0, 12, step=5)
    assert steps(b.build())[["step", "start", "end"]].values.tolist() == [[5, 0, 40]]


def test_unknown_step_name_is_one_clear_error(runs):
    with pytest.raises(FdprofError, match="no span is named 'Nope'"):
        diff_traces(*runs, step_name="Nope")


def test_swap_overlap_is_the_share_of_swap_time_under_compute_with_its_interval():
    b = TraceBuilder()
    b.span("2/1", "swap", 0, 100)
    b.span("2/2", "swap", 50, 150)
    b.span("2/3", "swap", 300, 400)
    b.span("3/1", "execute_model", 100, 200)
    b.span("3/2", "execute_model", 250, 350)
    share = swap_overlap(b.build().spans)
    assert share.ratio == pytest.approx((0 + 50 + 50) / 300)
    assert 0 <= share.lo < share.ratio < share.hi <= 1
    assert swap_overlap(TraceBuilder().build().spans) is None


def test_seeded_faults_are_races_in_every_synthetic_run():
    for seed in range(5):
        for mode in ("baseline", "lockless"):
            assert find_hazards(engine_trace(30, mode=mode, seed=seed)).clean
            faulty = engine_trace(30, mode=mode, seed=seed, fault="no-wait-swap-in")
            assert find_hazards(faulty).counts["races"] == 3
    assert np.isfinite(ideal_gain(engine_trace(30, mode="baseline")).ratio.hi)


def test_tokens_count_even_when_some_steps_lack_an_id():
    b = TraceBuilder()
    b.span("1/1", "step", 0, 100, step=0)
    b.span("3/1", "execute_model", 10, 90, step=0, attrs={"batch.tokens": 8})
    b.span("1/1", "step", 100, 200)  # an idle step the engine did not number
    st = steps(b.build())
    assert st["step"].tolist() == [0, -1] and st["tokens"].fillna(0).tolist() == [8, 0]
    assert diff_traces(b.build(), b.build()).throughput_unit == "tokens/s"
