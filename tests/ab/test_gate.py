"""``fdprof ab`` as a gate: its exit code and the verdict at the top of every report."""

import json

import pandas as pd
import pytest

from fdprof.ab.verdict import RunSafety, Verdict, merge_kinds
from fdprof.analysis.stats import RatioCI
from tests.cli import fdprof

LABELS = ("base", "new")


def _verdict(lo, hi, races=0, mismatches=0, require=None):
    gain = RatioCI((lo + hi) / 2, lo, hi, 0.95, "gain", "t")
    runs = [RunSafety("base #0", "base", 0, 0, 0), RunSafety("new #0", "new", races, 0,
                                                             mismatches)]  # fmt: skip
    return Verdict(gain, LABELS, runs, require_gain=require)


@pytest.mark.parametrize(
    ("args", "safety", "speed", "code"),
    [
        ((1.1, 1.3), "SAFE", "FASTER", 0),
        ((0.9, 1.3), "SAFE", "NOT SHOWN FASTER", 0),
        ((0.7, 0.9), "SAFE", "SLOWER", 0),
        ((1.1, 1.3, 2), "UNSAFE", "FASTER", 1),
        ((1.1, 1.3, 0, 5), "UNSAFE", "FASTER", 1),
        ((1.1, 1.3, 0, 0, 1.2), "SAFE", "FASTER", 3),  # lower bound 1.1 < 1.2
        ((1.1, 1.3, 0, 0, 1.1), "SAFE", "FASTER", 0),  # met exactly
        ((1.1, 1.3, 3, 0, 1.2), "UNSAFE", "FASTER", 1),  # 1 wins over 3
    ],
)
def test_verdict_and_exit_code(args, safety, speed, code):
    v = _verdict(*args)
    assert (v.safety, v.speed, v.exit_code) == (safety, speed, code)
    assert v.line.startswith(f"{safety}, {speed}: gain ")
    assert v.to_json()["exit_code"] == code


def test_unsafe_verdict_names_the_runs_and_numbers():
    v = _verdict(0.9, 1.2, races=4, mismatches=2)
    assert "new 4 (0 latent)" in v.line and "; unsafe runs: new #0;" in v.line
    assert "integrity mismatches 2" in v.line and "2 runs" in v.line
    assert "95% CI 0.900-1.200" in v.line


def test_ownership_findings_make_a_run_unsafe():
    gain = RatioCI(1.2, 1.1, 1.3, 0.95, "gain", "t")
    runs = [RunSafety("base #0", "base", 0, 0, 0), RunSafety("new #0", "new", 0, 0, 0,
                                                             ownership=3)]  # fmt: skip
    v = Verdict(gain, LABELS, runs)
    assert (v.safety, v.exit_code) == ("UNSAFE", 1)
    assert "ownership findings 3" in v.line and v.to_json()["ownership_findings"] == 3


def test_a_baseline_lock_that_did_not_exclude_is_named_and_safe():
    """As fdprof hazards judges the run: the lock's edges were already left out, no race
    remained, so SAFE and exit 0, with the lock named in the line and the JSON."""
    gain = RatioCI(1.2, 1.1, 1.3, 0.95, "gain", "t")
    runs = [RunSafety("base #0", "base", 0, 0, 0, 0, ("lock:kv/dp0",)),
            RunSafety("new #0", "new", 0, 0, 0),
            RunSafety("base #1", "base", 0, 0, 0)]  # fmt: skip
    v = Verdict(gain, LABELS, runs)
    assert (v.safety, v.exit_code) == ("SAFE", 0)
    assert v.line.startswith("SAFE, FASTER: gain ")
    assert ("; BROKEN LOCK lock:kv/dp0 in 1 of 2 base runs: it did not exclude its threads, so "
            "the accesses were judged without it; 3 runs") in v.line  # fmt: skip
    assert v.to_json()["broken_locks"] == {
        "base": {"runs": 1, "of": 2, "locks": ["lock:kv/dp0"]},
        "new": {"runs": 0, "of": 1, "locks": []}}  # fmt: skip
    racy = Verdict(gain, LABELS, [RunSafety("base #0", "base", 2, 2, 0, 0, ("lock:kv/dp0",))])
    assert racy.exit_code == 1 and racy.line.startswith("UNSAFE, ")
    assert "BROKEN LOCK lock:kv/dp0 in 1 of 1 base runs" in racy.line


def test_race_kinds_merge_over_runs():
    kind = {"name_a": "execute_model", "role_a": "worker", "name_b": "swap",
            "role_b": "transfer", "modes": "rw", "pairs": 3, "overlapped": 1}  # fmt: skip
    merged = merge_kinds([pd.DataFrame([kind]), pd.DataFrame([kind | {"pairs": 5}])])
    assert merged[["pairs", "overlapped", "runs"]].values.tolist() == [[8, 2, 2]]
    v = Verdict(_verdict(1, 2).gain, LABELS, [], merged)
    assert v.kind_lines() == [
        "execute_model (worker) read / swap (transfer) write: 8 pair(s), 2 overlapped, in 2 run(s)"
    ]


@pytest.fixture(scope="module")
def fault_ab(tmp_path_factory):
    """The seeded bug: a swap-in the worker does not wait for. 18 requests are the fewest
    whose runs swap blocks back in on both seeds (fewer never swap in: nothing to race)."""
    out = tmp_path_factory.mktemp("fault-ab")
    result = fdprof("ab", "--runs", "2", "--requests", "18", "--fault", "no-wait-swap-in",
                    "--out", out)  # fmt: skip
    return out, result


KIND = "execute_model (worker) read / swap (transfer) write: "


@pytest.mark.slow
def test_fault_ab_exits_1_with_unsafe_on_top_of_every_report(fault_ab):
    """UNSAFE is the first line everywhere, the race kinds right under it (before the title),
    and the HTML verdict is red: a reader sees why before any table."""
    out, result = fault_ab
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("UNSAFE, ")
    head = result.stdout.split("\nfdprof A/B: ", 1)[0].splitlines()
    assert any(line.startswith("  - " + KIND) for line in head[1:]), head
    md = (out / "report.md").read_text()
    assert md.startswith("**UNSAFE, ")
    assert f"\n- {KIND}" in md.split("\n# ", 1)[0]
    html = (out / "report.html").read_text()
    alarm = html.split(".verdict.alarm{", 1)[1].split("}", 1)[0]
    assert "color:#b00020" in alarm and "border:2px solid #b00020" in alarm  # red
    body = html.split("<body>", 1)[1]
    assert body.startswith("<div class='verdict alarm' id='verdict'><b>UNSAFE, ")
    assert f"<li>{KIND}" in body.split("</div>")[0]
    data = json.loads((out / "ab.json").read_text())
    verdict = data["verdict"]
    assert verdict["safety"] == "UNSAFE" and verdict["exit_code"] == 1
    assert verdict["unsafe_runs"] and all("#" in run for run in verdict["unsafe_runs"])
    assert sum(verdict["races"].values()) > 0
    # the lock orders none of those pairs: WCP has nothing to add to the observed races
    assert data["baseline"]["hazards"]["predicted"] == 0


def test_require_gain_must_be_a_positive_number(tmp_path):
    result = fdprof("ab", "--require-gain", "nan", "--out", tmp_path)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
