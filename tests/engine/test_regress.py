"""``make regress``, short: one seed each of the baseline, the lockless engine with the
asynchronous swap-in, DP=2 with EP, TP=2, Cache Manager V1 (swapping heavily, both ways at
once) and a seeded fault, checked four ways."""

import pytest

from fdprof.regress import Suite, cases, summary

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    found = Suite(tmp_path_factory.mktemp("regress")).run_all(cases(short=True))
    print(summary(found))
    return found


def test_correct_runs_are_intact_and_equal_to_the_reference(outcomes):
    correct = [o for o in outcomes if not o.case.faulty]
    assert {o.case.name for o in correct} == {"ipc", "none async", "dp2-ep ipc", "tp2 ipc",
                                               "v1 none"}  # fmt: skip
    for o in correct:
        assert (o.mismatches, o.nan, o.tokens_equal) == (0, 0, True), o.case.name
        assert o.results.swaps.to_cpu > 0, o.case.name
        assert o.races == 0, o.case.name


def test_the_seeded_fault_is_flagged(outcomes):
    (fault,) = [o for o in outcomes if o.case.faulty]
    assert fault.flagged and fault.races > 0


def test_the_summary_names_every_case(outcomes):
    text = summary(outcomes)
    for o in outcomes:
        assert f"| {o.case.name} |" in text
    assert "faults flagged 1/1" in text
