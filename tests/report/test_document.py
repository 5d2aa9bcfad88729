"""One document model, one renderer per format: every block in every format, the verdict first."""

import json
from pathlib import Path

import pytest

from fdprof.errors import FdprofError
from fdprof.report import document as D
from fdprof.report.charts import figure
from fdprof.report.html import render as html
from fdprof.report.render import FORMATS, format_of, render, write

CHART = D.Chart("Step latency CDF", "step duration (ms, log scale)", "fraction of steps",
                [D.Series("lock", [1.0, 10.0, 300.0], [0.3, 0.9, 1.0], color="#123456")],
                log_x=True, summary="p50 9 ms")  # fmt: skip


def doc(ok: bool = False) -> D.Document:
    return D.Document(
        "fdprof A/B: a vs b",
        [
            D.Bullets(["gain 1.2x"]),
            D.Heading("Where the time went"),
            D.Paragraph("Each step's time, painted."),
            D.Table("Per mode", ["mode", "ms | p50"], [["a", "1.0"], ["b", "2.0"]], ["a note"]),
            CHART,
            D.Links("Traces", [("a #0", "perfetto/a-0.json")]),
            D.Code("Settings", '{"kv_lock": "ipc"}'),
        ],
        D.Verdict("UNSAFE, FASTER: gain 1.2x", ok, ["swap / execute_model: 3 pair(s)"]),
        {"verdict": {"safety": "UNSAFE"}},
    )


@pytest.mark.parametrize("fmt", ["text", "md"])
def test_text_formats_lead_with_the_verdict_and_show_every_block(fmt):
    out = render(doc(), fmt)
    lines = out.splitlines()
    assert "UNSAFE, FASTER: gain 1.2x" in lines[0]
    assert "swap / execute_model: 3 pair(s)" in out
    for text in (
        "fdprof A/B: a vs b",
        "gain 1.2x",
        "Where the time went",
        "painted",
        "Per mode",
        "a note",
        "Step latency CDF",
        "p50 9 ms",
        "perfetto/a-0.json",
        '"kv_lock"',
    ):
        assert text in out, text  # fmt: skip


def test_markdown_escapes_cells_and_links_files():
    md = render(doc(), "md")
    assert "| mode | ms \\| p50 |" in md and "- [a #0](perfetto/a-0.json)" in md


def test_html_verdict_is_red_when_not_ok_and_lists_its_details():
    page = html(doc(ok=False))
    body = page.split("<body>", 1)[1]
    assert body.startswith("<div class='verdict alarm' id='verdict'><b>UNSAFE, FASTER")
    assert "<li>swap / execute_model: 3 pair(s)</li>" in body.split("</div>", 1)[0]
    assert "verdict ok" in html(doc(ok=True))
    assert "<h2 id='where-the-time-went'>" in page
    assert "<a href='perfetto/a-0.json'>a #0</a>" in page


def test_html_charts_share_one_inlined_plotly_and_label_log_ticks_in_full():
    page = html(D.Document("two charts", [CHART, CHART]))
    assert page.count("Plotly.newPlot(") == 2
    assert page.count("<script>") == 3  # plotly.js once, then one call per chart
    layout = figure(CHART)["layout"]
    assert layout["xaxis"]["type"] == "log"
    assert layout["xaxis"]["ticktext"] == ["1", "2", "5", "10", "20", "50", "100", "200"]
    assert layout["xaxis"]["title"]["text"] == "step duration (ms, log scale)"
    assert "<script" not in html(D.Document("no charts", [D.Paragraph("x")]))


def test_json_is_the_result_data():
    assert json.loads(render(doc(), "json")) == {"verdict": {"safety": "UNSAFE"}}
    with pytest.raises(FdprofError):
        render(D.Document("no data", []), "json")


def test_a_file_is_written_in_the_format_its_suffix_names(tmp_path: Path):
    assert [format_of(Path(f"r{s}")) for s in (".md", ".html", ".json", ".txt")] == [
        "md", "html", "json", "text"]  # fmt: skip
    assert set(FORMATS) == {"text", "md", "html", "json"}
    write(doc(), tmp_path / "r.md")
    assert (tmp_path / "r.md").read_text().startswith("**UNSAFE")
    with pytest.raises(FdprofError, match="cannot write"):
        write(doc(), tmp_path / "missing" / "r.md")


def test_a_narrow_log_axis_gets_even_ticks_and_room_around_its_markers():
    """A gain of 0.98 [0.91, 1.06] beside an ideal 1.33: decade ticks would label only "1"."""
    ratios = D.Chart("gain", "", "ratio (x, log scale)",
                     [D.Series("gain", ["measured", "ideal"], [0.98, 1.326],
                               error=([0.07, 0.011], [0.075, 0.012]))],
                     log_y=True, reference_y=1.0)  # fmt: skip
    axis = figure(ratios)["layout"]["yaxis"]
    assert axis["ticktext"] == ["0.9", "1", "1.1", "1.2", "1.3", "1.4"]
    low, high = (10**end for end in axis["range"])
    assert low < 0.98 - 0.07 and high > 1.326 + 0.012
