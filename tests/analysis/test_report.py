"""Every renderer renders every result type, showing the same numbers."""

import pytest
from synthetic import engine_trace

from fdprof.analysis.diff import diff_traces
from fdprof.analysis.hazards import find_hazards
from fdprof.analysis.whatif import what_if_drop_lock
from fdprof.report import markdown, text
from fdprof.report.tables import MAX_ROWS, document

from .scenarios import swap_in_then_execute

RENDERERS = [text.render, markdown.render]


@pytest.fixture(scope="module")
def results():
    base = engine_trace(30, mode="baseline")
    return {
        "hazards": find_hazards(engine_trace(30, mode="lockless", fault="no-wait-swap-in")),
        "what_if": what_if_drop_lock(swap_in_then_execute(wait_for=None, lock=True)),
        "diff": diff_traces(base, engine_trace(30, mode="lockless"), labels=("lock", "free")),
    }


@pytest.mark.parametrize("render", RENDERERS)
def test_every_result_renders_its_key_numbers(results, render):
    hz = render(results["hazards"])
    assert "3 race(s)" in hz and "gpu:18" in hz and "no (latent)" in hz
    wi = render(results["what_if"])
    assert "1 pair(s) of spans become unordered" in wi and "execute_model" in wi
    df = render(results["diff"])
    d = results["diff"]
    assert f"{d.throughput.ratio:.3f}" in df and f"{d.throughput.lo:.3f}" in df
    assert "swap_blocking" in df and "lock" in df and "free" in df
    assert "tokens/s (prefill + decode tokens per second inside steps)" in df


@pytest.mark.parametrize("render", RENDERERS)
def test_long_tables_are_cut_and_say_so(render):
    report = find_hazards(engine_trace(400, mode="lockless", fault="no-wait-swap-in",
                                       fault_every=2))  # fmt: skip
    assert report.counts["races"] > MAX_ROWS
    assert f"... {report.counts['races'] - MAX_ROWS} more" in render(report)


def test_markdown_tables_are_well_formed(results):
    for table in document(results["diff"]).tables:
        assert all(len(row) == len(table.headers) for row in table.rows)
    md = markdown.render(results["diff"])
    assert md.startswith("# fdprof diff") and "|---|" in md


def test_unknown_result_type_is_a_type_error():
    with pytest.raises(TypeError):
        document(object())


@pytest.mark.parametrize("render", RENDERERS)
def test_thousand_character_span_names_are_shortened_for_reading_only(render):
    """Third-party traces name spans after whole C++ signatures (1,646 characters in HTA's)."""
    long = "void kernel<" + "float, " * 300 + "long>(Params)"
    traces = [engine_trace(30, mode="baseline"), engine_trace(30, mode="lockless")]
    for trace in traces:
        trace.spans.loc[trace.spans.name == "issue_swap_task", "name"] = long
    result = diff_traces(*traces)
    out = render(result)
    assert long not in out and long[:40] in out and "long>(Params)" in out
    assert max(map(len, out.splitlines())) < 400
    assert long in set(result.by_name["name"])


@pytest.mark.parametrize("render", RENDERERS)
def test_a_report_that_checked_nothing_does_not_read_clean(render):
    trace = engine_trace(5, mode="lockless")
    trace.accesses = trace.accesses.iloc[0:0]
    out = render(find_hazards(trace))
    assert "0 KV-block access(es)" in out and "NOTHING CHECKED" in out and "clean" not in out
