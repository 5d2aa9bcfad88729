"""Diff, step breakdown and ideal gain on synthetic engine runs and hand-built traces."""

import json

import numpy as np
import pandas as pd
import pytest
from synthetic import engine_trace

from fdprof.analysis.breakdown import PARTS, ideal_gain, step_breakdown, steps
from fdprof.analysis.device_time import host_overlap as swap_overlap
from fdprof.analysis.diff import FEW_STEPS, diff_traces, time_by
from fdprof.analysis.hazards import find_hazards
from fdprof.analysis.stats import ratio_ci
from fdprof.errors import FdprofError
from fdprof.report.render import render
from fdprof.report.tables import as_document

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


def _polling_run(durations, tokens, polls: int = 0, vllm: bool = True):
    """Steps of the given durations (ns) and tokens, each a ``step`` span with an
    ``execute_model`` inside; ``polls`` empty steps of 200 ns after the first (vLLM polling
    pending transfers). ``vllm``: both spans carry the batch's tokens, as vLLM's adapter
    records them; else only execute_model does, as fdprof's engine."""
    b = TraceBuilder()
    t, step = 0, 0
    for i, (dur, tok) in enumerate(zip(durations, tokens, strict=True)):
        step += 1
        b.span("1/1", "step", t, t + dur, step=step,
               attrs={"batch.size": 2} | ({"batch.tokens": tok} if vllm else {}))  # fmt: skip
        b.span("3/1", "execute_model", t + 1, t + dur - 1, step=step,
               attrs={"batch.size": 2, "batch.tokens": tok})  # fmt: skip
        t += dur + 10
        for _ in range(polls if i == 0 else 0):
            step += 1
            b.span("1/1", "step", t, t + 200, step=step,
                   attrs={"batch.size": 0} | ({"batch.tokens": 0} if vllm else {}))  # fmt: skip
            b.span("3/1", "execute_model", t + 1, t + 199, step=step,
                   attrs={"batch.size": 0})  # fmt: skip
            t += 210
    return b.build()


DURATIONS = [int(1e6 * (5 + (i * 7) % 11)) for i in range(40)]
TOKENS = [512 if i % 10 == 0 else 8 for i in range(40)]


def test_steps_that_schedule_nothing_are_marked_in_any_engines_trace():
    for vllm in (True, False):
        st = steps(_polling_run(DURATIONS[:3], TOKENS[:3], polls=2, vllm=vllm))
        assert st["no_tokens"].tolist() == [False, True, True, False, False]
        # vLLM's step and execute_model both carry the batch's tokens: counted once
        assert st["tokens"].fillna(0).tolist() == [512, 0, 0, 8, 8]
    b = TraceBuilder()  # a step whose trace says nothing of its batch: taken as work
    b.span("1/1", "step", 0, 100, step=1)
    b.span("1/1", "step", 100, 200, step=2, attrs={"batch.size": 0})
    assert steps(b.build())["no_tokens"].tolist() == [False, True]


def test_polls_drive_neither_step_latency_nor_where_the_time_moved():
    """The same real steps, with and without 50 polls: nothing changes but the polls' count
    and the throughput (the polls' time is time inside steps)."""
    quiet = _polling_run(DURATIONS, TOKENS)
    polled = _polling_run(DURATIONS, TOKENS, polls=50)
    d = diff_traces(quiet, polled)
    assert d.step_latency.ratio == 1.0 and d.step_latency.includes_one
    assert d.per_token.ratio == 1.0 and d.per_token.includes_one
    assert d.new.step_latency == d.base.step_latency and len(d.new.working) == 40
    assert (d.moved["delta_mean"] == 0).all()
    assert d.base.empty_steps["count"] == 0 and d.new.empty_steps["count"] == 50
    assert d.new.empty_steps["total_ns"] == 50 * 200
    assert d.throughput.ratio < 1  # the polls took time
    doc = json.loads(json.dumps(d.to_json()))
    share = 10000 / (sum(DURATIONS) + 10000)
    assert doc["new"]["empty_steps"] == {"count": 50, "total_ns": 10000.0,
                                         "share": pytest.approx(share)}  # fmt: skip
    assert doc["new"]["working_steps"] == 40
    assert doc["step_latency"]["steps"] == "that scheduled tokens"
    text = render(as_document(d), "text")
    assert ("empty steps (scheduled no tokens; not in step latency): 0 (0 ns, 0.0% of step "
            "time) -> 50 (10 µs, ") in text  # fmt: skip


def test_per_token_time_is_step_time_per_scheduled_token_with_its_interval():
    base = _polling_run(DURATIONS, TOKENS)
    slower = _polling_run([2 * d for d in DURATIONS], TOKENS, polls=5)
    d = diff_traces(base, slower)
    per_token = sorted(dur / tok for dur, tok in zip(DURATIONS, TOKENS, strict=True))
    assert d.base.per_token_ns["p50"] == pytest.approx(np.median(per_token))
    assert d.per_token.ratio == pytest.approx(2.0)
    assert d.per_token.lo > 1.2 and not d.per_token.includes_one
    assert d.step_latency.ratio == pytest.approx(2.0)
    profiler = TraceBuilder()  # no token counts: no per-token time
    profiler.span("7/7", "ProfilerStep#1", 0, 90)
    profiler.span("7/7", "ProfilerStep#2", 100, 190)
    assert diff_traces(profiler.build(), profiler.build()).per_token is None


def _served(ttft_ns: int, tokens: int = 5):
    """Three requests of any engine: a span with fd.first_token_ns and request.output_tokens."""
    b = TraceBuilder()
    b.span("1/1", "step", 0, 10_000_000, step=1, attrs={"batch.tokens": 4})
    for i in range(3):
        start = 1000 * i
        b.span("1/1", "request", start, start + 9_000_000,
               attrs={"fd.first_token_ns": start + ttft_ns + 100 * i,
                      "request.output_tokens": tokens})  # fmt: skip
    return b.build()


def test_diff_reports_serving_latency_from_any_engines_request_spans():
    d = diff_traces(_served(1_000_000), _served(2_000_000))
    assert set(d.serving) == {"ttft", "tpot", "e2e"}
    assert d.serving["ttft"].ratio == pytest.approx(2.0, rel=0.01)
    assert d.serving["e2e"].ratio == pytest.approx(1.0)
    table = next(t for t in as_document(d).tables if t.title.startswith("Serving latency"))
    assert [r[0] for r in table.rows] == ["time to first token", "time per output token",
                                          "end-to-end latency"]  # fmt: skip
    bare = diff_traces(*[_polling_run(DURATIONS[:3], TOKENS[:3])] * 2)
    assert bare.serving == {}
    table = next(t for t in as_document(bare).tables if t.title.startswith("Serving latency"))
    assert table.rows == [] and any("Not measured" in n for n in table.notes)


def _time_by_with_groupby(spans: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """What ``time_by`` computes, written plainly with pandas' groupby and quantile."""
    done = spans[spans["end"] != -1]
    frame = done[keys].astype(str).assign(dur=(done["end"] - done["start"]).to_numpy())
    g = frame.groupby(keys, sort=True)["dur"]
    quantiles = g.quantile([0.5, 0.9, 0.99]).unstack().set_axis(["p50", "p90", "p99"], axis=1)
    out = g.agg(count="count", total="sum").join(quantiles).reset_index()
    return out.sort_values("total", ascending=False, kind="stable")


@pytest.mark.parametrize("keys", [["name"], ["role"], ["name", "role"]])
def test_time_by_is_groupby_and_quantile_exactly(keys):
    """Sorted codes and one pass (time_by) give pandas' groupby quantiles bit for bit: names
    missing here and there, unfinished spans, ties, one-span groups, durations near 2**62."""
    rng = np.random.default_rng(7)
    for trial in range(150):
        n = int(rng.integers(1, 40))
        start = rng.integers(0, 10**9, n)
        dur = [rng.integers(0, 10**6, n), rng.integers(0, 3, n), rng.integers(0, 2**62, n)][
            trial % 3
        ]
        spans = pd.DataFrame({
            "name": pd.Series(rng.choice(["a", "b", "ab", "B", "é"], n), dtype="string"),
            "role": pd.Series(rng.choice(["x", "y", None], n, p=[0.45, 0.45, 0.1]), dtype="string"),
            "start": start, "end": np.where(rng.random(n) < 0.1, -1, start + dur),
        })  # fmt: skip
        if (spans["end"] == -1).all() or spans.loc[spans["end"] != -1, keys].isna().any(
            axis=1
        ).all():
            continue  # no group at all: the next test
        expected = _time_by_with_groupby(spans, keys)
        pd.testing.assert_frame_equal(time_by(spans, keys), expected, check_exact=True)


def test_time_by_of_spans_without_the_key_is_empty_not_an_error():
    """Finished spans none of which has a role: no group (a groupby's quantiles of nothing
    failed to be labelled, an internal error of ``diff``)."""
    spans = pd.DataFrame({"role": pd.Series([None, None], dtype="string"),
                          "start": [0, 5], "end": [3, 9]})  # fmt: skip
    out = time_by(spans, "role")
    assert out.empty and list(out.columns) == ["role", "count", "total", "p50", "p90", "p99"]
