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


def test_the_broken_lock_table_shows_times_into_the_run():
    """Seconds into the run, as a timeline reads them, not epoch nanoseconds (the JSON keeps
    those): the reference baseline, whose lock is broken as FastDeploy's was."""
    from pathlib import Path

    from fdprof.trace import load

    trace = load(Path(__file__).resolve().parents[2] / "traces" / "baseline")
    report = find_hazards(trace)
    assert not report.broken_locks.empty and report.broken_locks["start_a"].min() > 10**18
    (table,) = [t for t in document(report, trace.origin).tables if t.title.startswith("Broken")]
    span_s = (trace.spans["end"].max() - trace.origin) / 1e9
    for row in table.rows:
        for held in (row[2], row[4]):
            start, end = map(float, held.split(" - "))
            assert 0 <= start <= end <= span_s
        assert row[5].endswith(("ms", "µs", "ns", " s"))
    assert "epoch nanoseconds" in table.notes[-1]


@pytest.mark.parametrize(("labels", "columns"), [
    (("lock", "free"), ("lock", "free")),
    (("run", "run"), ("base", "new")),  # equal: nothing told apart
    (("NVIDIA__Fuser__report1", "NVIDIA__Fuser__report2"), ("base", "new")),  # long
])  # fmt: skip
def test_diff_columns_name_the_traces_once(labels, columns):
    base = engine_trace(12, mode="baseline")
    d = diff_traces(base, engine_trace(12, mode="lockless"), labels=labels)
    doc = document(d)
    by_name = next(t for t in doc.tables if t.title == "Time by span name")
    assert by_name.headers[1:3] == [f"{columns[0]} n", f"{columns[0]} total"]
    assert by_name.headers[4] == f"{columns[1]} n"
    named = [b for b in doc.blocks[0].items if b.startswith("base: ")]
    assert named == ([] if columns == labels else [f"base: {labels[0]}; new: {labels[1]}"])


def test_diff_labels_take_parent_directories_to_tell_traces_apart(tmp_path):
    from fdprof.cli.diff import labels

    assert labels(tmp_path / "a" / "run", tmp_path / "b" / "run") == ("a/run", "b/run")
    assert labels(tmp_path / "x.json.gz", tmp_path / "y.sqlite") == ("x", "y")
