"""Bootstrap ratios and interval unions, against values worked out by hand."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fdprof.analysis.stats import (
    difference_ci,
    geometric_mean_ci,
    paired_difference_ci,
    paired_ratio_ci,
    ratio_ci,
    spread,
)
from fdprof.analysis.timeline import covered, union
from fdprof.errors import FdprofError


def test_ratio_of_medians_and_a_seeded_interval():
    rng = np.random.default_rng(1)
    base, new = rng.normal(100, 5, 200), rng.normal(120, 5, 200)
    r = ratio_ci(base, new, seed=3)
    assert r.ratio == pytest.approx(np.median(new) / np.median(base))
    assert r.lo < r.ratio < r.hi and not r.includes_one
    assert ratio_ci(base, new, seed=3) == r  # same seed, same interval


def test_interval_includes_one_when_samples_agree():
    rng = np.random.default_rng(2)
    assert ratio_ci(rng.normal(100, 5, 50), rng.normal(100, 5, 50), "mean").includes_one


def test_rate_statistic_is_total_over_total():
    base = np.array([[10, 1.0], [10, 1.0]])
    new = np.array([[30, 1.0], [10, 1.0]])
    assert ratio_ci(base, new, "rate").ratio == pytest.approx(2.0)
    assert paired_ratio_ci([4, 4], [2, 2]).ratio == pytest.approx(2.0)


def test_difference_of_means_and_its_interval():
    """The change a part of the step moved, in its own unit; zero parts are fine (no ratio)."""
    rng = np.random.default_rng(6)
    base, new = rng.normal(50, 4, 300), rng.normal(47, 4, 300)
    d = difference_ci(base, new, seed=1)
    assert d.delta == pytest.approx(new.mean() - base.mean())
    assert d.lo < d.delta < d.hi and d.hi < 0 and not d.includes_zero
    assert difference_ci(base, new, seed=1) == d
    gone = difference_ci(rng.exponential(7, 100), np.zeros(100), seed=1)
    assert gone.hi < 0 and gone.lo < gone.delta < gone.hi
    assert difference_ci(rng.normal(5, 1, 80), rng.normal(5, 1, 80)).includes_zero


def test_few_paired_runs_get_a_student_t_interval():
    """Worked by hand: log ratios ln 2 and ln 8 have mean ln 4 and standard error ln 4 / 2; with
    one degree of freedom the 95% half-width is 12.706 times that."""
    g = geometric_mean_ci([2.0, 8.0], "ratio")
    half = 12.7062047 * np.log(4) / 2
    assert g.ratio == pytest.approx(4.0)
    assert (g.lo, g.hi) == pytest.approx((4 * np.exp(-half), 4 * np.exp(half)))
    assert g.method == "Student t on log ratios, 2 units"
    d = paired_difference_ci([3.0, 5.0, 7.0], [1.0, 1.0, 1.0])
    half = 4.302653 * 2 / np.sqrt(3)  # differences 2, 4, 6: sd 2, two degrees of freedom
    assert (d.delta, d.lo, d.hi) == pytest.approx((4.0, 4 - half, 4 + half))
    with pytest.raises(FdprofError, match="at least two"):
        geometric_mean_ci([1.2], "ratio")
    with pytest.raises(FdprofError, match="positive"):
        geometric_mean_ci([1.2, 0.0], "ratio")


def test_the_interval_over_five_pairs_covers_as_it_claims():
    """A/B runs come in few seed pairs. Drawn 600 times from pairs with a known gain (shared
    drift per pair, noise per run): the t interval covers it about 95% of the time, where a
    bootstrap of the same five pairs covers it far less often (this is why ab uses t)."""
    rng = np.random.default_rng(7)
    gain, t_hits, boot_hits, trials = 1.15, 0, 0, 600
    for k in range(trials):
        drift = rng.normal(0, 0.05, 5)
        base = 230 * np.exp(drift + rng.normal(0, 0.04, 5))
        new = 230 * gain * np.exp(drift + rng.normal(0, 0.04, 5))
        t_ci = geometric_mean_ci(new / base, "ratio")
        boot = paired_ratio_ci(new, base, seed=k, n_boot=500)
        t_hits += t_ci.lo <= gain <= t_ci.hi
        boot_hits += boot.lo <= gain <= boot.hi
    assert 0.93 <= t_hits / trials <= 0.97
    assert boot_hits / trials < 0.88


def _mixed_steps(rng, speed: float) -> np.ndarray:
    """(tokens, seconds) per step: 90 decode steps of 8 tokens, 10 prefill steps of 400; a step
    costs a fixed overhead plus its tokens, so tokens per second differ by class."""
    tokens = np.array([8.0] * 90 + [400.0] * 10)
    seconds = (1.0 + tokens / 100) / speed * rng.uniform(0.9, 1.1, len(tokens))
    return np.column_stack([tokens, seconds])


def test_strata_keep_a_fixed_mix_out_of_the_interval():
    rng = np.random.default_rng(4)
    base, new = _mixed_steps(rng, 100.0), _mixed_steps(rng, 110.0)
    classes = (base[:, 0] > 100, new[:, 0] > 100)
    plain = ratio_ci(base, new, "rate", seed=1)
    stratified = ratio_ci(base, new, "rate", seed=1, strata=classes)
    assert stratified.ratio == plain.ratio == pytest.approx(1.1, rel=0.03)
    assert stratified.lo > 1.0 and stratified.lo <= 1.1 <= stratified.hi
    assert stratified.hi - stratified.lo < (plain.hi - plain.lo) / 2


def test_one_stratum_is_the_plain_bootstrap():
    rng = np.random.default_rng(5)
    base, new = rng.normal(100, 5, 40), rng.normal(110, 5, 40)
    one = (np.zeros(40), np.zeros(40))
    assert ratio_ci(base, new, seed=2, strata=one) == ratio_ci(base, new, seed=2)
    with pytest.raises(FdprofError, match="strata labels"):
        ratio_ci(base, new, strata=(np.zeros(3), np.zeros(40)))


@pytest.mark.parametrize(
    ("base", "new", "kw", "match"),
    [([], [1.0], {}, "at least one"), ([0.0], [1.0], {}, "is 0"),
     ([1.0], [1.0], {"statistic": "mode"}, "unknown statistic")],
)  # fmt: skip
def test_bad_ratio_input_is_one_clear_error(base, new, kw, match):
    with pytest.raises(FdprofError, match=match):
        ratio_ci(base, new, **kw)


def test_spread():
    s = spread(range(1, 101))
    assert (s["n"], s["p50"], s["max"]) == (100, 50.5, 100.0)
    assert spread([])["p99"] is None


def test_union_and_covered():
    u = union(np.array([0, 5, 2, 20]), np.array([3, 8, 4, 30]))
    assert u[0].tolist() == [0, 5, 20] and u[1].tolist() == [4, 8, 30]
    assert covered(u, np.array([0, 3, 25, 40]), np.array([10, 21, 100, 50])).tolist() == [
        7, 5, 5, 0,
    ]  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), max_size=12),
    st.integers(0, 60),
    st.integers(0, 30),
)
def test_covered_matches_counting_points(intervals, lo, width):
    s = np.array([a for a, _ in intervals], dtype=np.int64)
    e = np.array([a + d for a, d in intervals], dtype=np.int64)
    points = {t for a, b in zip(s, e, strict=True) for t in range(a, b)}
    expected = sum(1 for t in points if lo <= t < lo + width)
    assert covered(union(s, e), np.array([lo]), np.array([lo + width]))[0] == expected
