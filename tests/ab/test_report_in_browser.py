"""The A/B report in a real browser (headless Chromium from Debian's packages): every chart
drawn, no script error, a screenshot. Skipped where no Chromium is installed.

Set ``FDPROF_SCREENSHOT_DIR`` to keep the screenshot for a look by eye.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed")
#: put first in the page copy the browser opens: every uncaught error lands in an attribute
CATCH_ERRORS = (
    "<script>window.addEventListener('error', e => {const d = document.documentElement;"
    " d.dataset.scriptErrors = (d.dataset.scriptErrors || '') + e.message + ';';});</script>"
)


def chromium(*args: str) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--virtual-time-budget=15000", *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def page(toy_ab, tmp_path_factory):
    """The report as the browser left it after running its scripts."""
    out, result = toy_ab
    assert result.returncode == 0, result.stderr
    html = (out / "report.html").read_text()
    checked = out / "report-checked.html"
    checked.write_text(html.replace("<head>", "<head>" + CATCH_ERRORS, 1))
    dom = chromium("--dump-dom", checked.as_uri())
    assert dom.returncode == 0, dom.stderr
    return html, dom.stdout


def test_no_script_errors(page):
    _, dom = page
    assert "<html" in dom
    assert "data-script-errors" not in dom, re.search(r'data-script-errors="[^"]*"', dom)


def test_every_chart_is_drawn(page):
    html, dom = page
    expected = html.count("Plotly.newPlot(")
    assert expected == 6  # gain beside ideal gain, throughput, CDF, parts, two timelines
    drawn = re.findall(r"<div class=\"chart[^\"]*\" id=\"chart-\d+\"[^>]*>(.*?)</div>\s*<script",
                       dom, flags=re.S)  # fmt: skip
    assert len(drawn) == expected
    assert all("main-svg" in chart for chart in drawn)  # plotly.js drew an SVG into each
    first = dom.index('id="chart-0"')
    assert "Gain (fast / slow requests/s) beside the ideal gain" in dom[first : first + 20000]


def test_screenshot(toy_ab, tmp_path):
    out, _ = toy_ab
    shot = Path(os.environ.get("FDPROF_SCREENSHOT_DIR", tmp_path)) / "ab-report.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    r = chromium("--window-size=1200,6000", f"--screenshot={shot}", (out / "report.html").as_uri())
    assert r.returncode == 0, r.stderr
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
