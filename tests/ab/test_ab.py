"""The main job end to end: real engine runs in both modes, analysed and reported."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest


@pytest.fixture(scope="module")
def ab_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ab")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "fdprof",
            "ab",
            "--runs",
            "2",
            "--requests",
            "12",
            "--out",
            str(out),
            "--json",
            "--require-gain",
            "1000",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 3, result.stderr  # safe, but a 1000x gain was not shown
    return out, json.loads(result.stdout)


def test_json_has_the_contract_keys(ab_run):
    _, data = ab_run
    for key in ("runs", "baseline", "lockless", "gain", "ideal_ratio", "hazards",
                "what_if_drop_lock", "integrity_mismatches", "report"):  # fmt: skip
        assert key in data
    assert len(data["runs"]) == 4
    assert [r["mode"] for r in data["runs"]] == ["ipc", "none", "none", "ipc"]  # ABBA
    assert len(data["baseline"]["tokens_per_s"]) == 2
    lo, hi = data["gain"]["ci95"]
    assert lo <= data["gain"]["ratio"] <= hi
    assert data["gain"]["includes_one"] == (lo <= 1.0 <= hi)
    assert data["gain"]["method"] == "Student t on log ratios, 2 units"  # pairs, not runs
    assert data["ideal_ci95"][0] <= data["ideal_ratio"] <= data["ideal_ci95"][1]
    change = data["breakdown_change_ms"]
    assert set(change) == {"compute", "lock_wait", "swap_blocking", "idle"}
    for part, c in change.items():
        base, new = data["baseline"]["breakdown_ms"][part], data["lockless"]["breakdown_ms"][part]
        assert c["ci95"][0] <= c["delta"] <= c["ci95"][1]
        assert c["delta"] == pytest.approx(new - base)  # every run weighs the same in both
    assert data["lockless"]["breakdown_ms"]["lock_wait"] == 0  # no lock, no wait
    assert change["lock_wait"]["delta"] < 0


def test_correct_protocol_is_clean_in_both_modes(ab_run):
    _, data = ab_run
    assert data["verdict"]["safety"] == "SAFE" and data["verdict"]["gain_met"] is False
    assert data["hazards"]["baseline"]["races"] == 0
    assert data["hazards"]["lockless"]["races"] == 0
    assert data["what_if_drop_lock"]["newly_unordered"] == 0
    assert data["integrity_mismatches"] == 0


def test_reports_are_written_and_self_contained(ab_run):
    out, data = ab_run
    html = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    assert data["report"] == {"html": str(out / "report.html"), "md": str(out / "report.md")}
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org", "")
    assert html.count("<svg") == 5  # throughput, CDF, breakdown, two timelines
    for chunk in html.split("<svg")[1:]:
        ET.fromstring("<svg" + chunk.split("</svg>")[0] + "</svg>")
    assert "Throughput gain" in md and "| lockless |" in md and "| change [95% CI] |" in md
    assert "Where it came from, lockless - baseline ms per step [95% CI]: compute" in md


def test_too_few_runs_is_a_usage_error(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "fdprof", "ab", "--runs", "1", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
