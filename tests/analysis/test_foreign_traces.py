"""The analyses on real third-party traces: HTA's PyTorch-profiler control and test runs."""

from pathlib import Path

import pytest

from fdprof.analysis.diff import diff_traces
from fdprof.analysis.hazards import find_hazards
from fdprof.report import markdown, text
from fdprof.trace import load

HTA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "hta"


@pytest.fixture(scope="module")
def hta():
    return load(HTA / "control.json.gz"), load(HTA / "test.json.gz")


def test_diff_of_hta_control_and_test_by_profiler_step(hta):
    d = diff_traces(*hta, "ProfilerStep#", labels=("control", "test"))
    assert d.base.n_steps == d.new.n_steps == 6
    assert d.throughput_unit == "steps/s"
    # the test run is slower; each ratio carries its interval
    assert d.step_latency.ratio > 1 and d.step_latency.lo <= d.step_latency.ratio
    assert d.throughput.ratio == pytest.approx(d.base.seconds / d.new.seconds)
    assert "aten::copy_" in set(d.by_name["name"])
    assert "ProfilerStep#" not in text.render(d).split("Time by span name")[0]
    assert markdown.render(d).count("| --- |") == 0  # separators are |---|


def test_hazards_on_a_trace_without_kv_accesses_finds_no_race(hta):
    report = find_hazards(hta[0])
    assert report.clean and report.counts["races"] == 0
