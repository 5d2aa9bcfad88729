"""The built-in lock A/B end to end: real engine runs in both modes, analysed and reported."""

import json
import re

import pytest
from schemas import validate

from tests.cli import fdprof

pytestmark = pytest.mark.slow  # each module fixture runs an A/B of engine runs


@pytest.fixture(scope="module")
def ab_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ab")
    result = fdprof("ab", "--runs", "2", "--requests", "12", "--out", out, "--json",
                    "--require-gain", "1000")  # fmt: skip
    assert result.returncode == 3, result.stderr  # safe, but a 1000x gain was not shown
    return out, json.loads(result.stdout)


def test_json_has_the_contract_keys(ab_run):
    out, data = ab_run
    validate("ab", data)
    validate("ab", json.loads((out / "ab.json").read_text()))
    for key in ("verdict", "settings", "runs", "baseline", "candidate", "gain", "ideal",
                "what_if_drop_lock", "integrity_mismatches", "report"):  # fmt: skip
        assert key in data
    assert [r["mode"] for r in data["runs"]] == ["baseline", "candidate", "candidate", "baseline"]
    assert data["baseline"]["label"] == "baseline (lock)"
    assert data["candidate"]["label"] == "lockless"
    assert len(data["baseline"]["throughput"]) == 2
    lo, hi = data["gain"]["ci95"]
    assert lo <= data["gain"]["ratio"] <= hi
    assert data["gain"]["includes_one"] == (lo <= 1.0 <= hi)
    assert data["gain"]["method"] == "Student t on log ratios, 2 units"  # pairs, not runs
    assert data["ideal"]["ci95"][0] <= data["ideal"]["ratio"] <= data["ideal"]["ci95"][1]
    change = data["breakdown_change_ms"]
    assert set(change) == {"compute", "lock_wait", "swap_blocking", "idle"}
    for part, c in change.items():
        base, new = data["baseline"]["breakdown_ms"][part], data["candidate"]["breakdown_ms"][part]
        assert c["ci95"][0] <= c["delta"] <= c["ci95"][1]
        assert c["delta"] == pytest.approx(new - base)  # every run weighs the same in both
    assert data["candidate"]["breakdown_ms"]["lock_wait"] == 0  # no lock, no wait
    assert change["lock_wait"]["delta"] < 0


def test_each_mode_says_what_it_ran_with(ab_run):
    _, data = ab_run
    base, new = data["settings"]["baseline"], data["settings"]["candidate"]
    assert (base["kv_lock"], new["kv_lock"]) == ("ipc", "none")
    assert base["fault_delay_ms"] == new["fault_delay_ms"] == 0.0  # the delay in effect
    assert base["requests"] == 12 and base["seed"] == "0 + pair index"


def test_correct_protocol_is_clean_in_both_modes(ab_run):
    _, data = ab_run
    assert data["verdict"]["safety"] == "SAFE" and data["verdict"]["gain_met"] is False
    assert data["baseline"]["hazards"]["races"] == 0
    assert data["candidate"]["hazards"]["races"] == 0
    assert data["what_if_drop_lock"]["newly_unordered"] == 0
    # WCP beside the what-if, on the baseline runs only: no order of the lock's critical
    # sections exposes a race in the correct protocol
    assert data["baseline"]["hazards"]["predicted"] == 0
    assert "predicted" not in data["candidate"]["hazards"]
    assert data["integrity_mismatches"] == 0


def test_the_built_in_baseline_is_judged_as_fdprof_hazards_judges_it(ab_run):
    """The FastDeploy-faithful baseline (one flock descriptor shared by the cache manager's
    threads) may or may not be seen not to exclude in a run: whichever it was, hazards on each
    run gives the exit code and the named locks ab reports for it, and the verdict line names
    the baseline's lock exactly when some baseline run showed it."""
    _, data = ab_run
    unsafe = set(data["verdict"]["unsafe_runs"])
    for run in data["runs"]:
        done = fdprof("hazards", run["trace"], "--json")
        report = json.loads(done.stdout)
        assert done.returncode == (1 if f"{run['label']} #{run['index']}" in unsafe else 0)
        assert report["untrusted_locks"] == run["untrusted_locks"]
        assert ("BROKEN LOCK" in report["verdict"]["line"]) == bool(run["untrusted_locks"])
    broken = data["verdict"]["broken_locks"]["baseline (lock)"]
    assert broken["runs"] == sum(bool(r["untrusted_locks"]) for r in data["runs"]
                                 if r["mode"] == "baseline")  # fmt: skip
    assert ("BROKEN LOCK" in data["verdict"]["line"]) == (broken["runs"] > 0)
    assert data["verdict"]["broken_locks"]["lockless"]["runs"] == 0  # no lock, nothing broken


def test_reports_are_written_and_self_contained(ab_run):
    out, data = ab_run
    assert data["report"] == {"md": str(out / "report.md"), "html": str(out / "report.html"),
                              "json": str(out / "ab.json")}  # fmt: skip
    html = (out / "report.html").read_text()
    assert html.count("<script>") == 1 + html.count("Plotly.newPlot(")  # plotly.js inlined once
    assert html.count("Plotly.newPlot(") == 6  # gain, throughput, CDF, parts, two timelines
    assert not re.search(r"<(script|link|img)[^>]*\b(src|href)=", html)  # opens offline
    assert html.index("id='verdict'") < html.index("<h1>")
    md = (out / "report.md").read_text()
    assert md.startswith("**SAFE, ")
    assert "| lockless |" in md and "| change [95% CI] |" in md
    assert "Where it came from, lockless - baseline (lock) ms per step [95% CI]: compute" in md
    assert json.loads((out / "ab.json").read_text())["verdict"] == data["verdict"]


def test_too_few_runs_is_a_usage_error(tmp_path):
    result = fdprof("ab", "--runs", "1", "--out", tmp_path)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_timeline_gives_each_span_name_its_colour(ab_run):
    """swap (the transfer's copy) and issue_swap_task (the call that blocks) were one colour,
    so their lanes read as one; each lane of the timeline excerpt has a colour of its own."""
    out, _ = ab_run
    html = (out / "report.html").read_text()
    lanes = re.findall(r'"marker": \{"color": "(#[0-9a-f]{6})"\}, "name": "(\w+)", '
                       r'"orientation": "h"', html)  # fmt: skip
    colours: dict[str, set[str]] = {}
    for colour, name in lanes:
        colours.setdefault(name, set()).add(colour)
    assert set(colours) == {"execute_model", "issue_swap_task", "swap", "lock_wait"}
    assert all(len(c) == 1 for c in colours.values())
    assert len(set.union(*colours.values())) == 4
