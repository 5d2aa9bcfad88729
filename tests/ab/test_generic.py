"""``fdprof ab --baseline CMD --candidate CMD``: any engine, judged from its traces."""

import json
import math

import pytest
from schemas import validate

from tests.cli import fdprof

from .conftest import fdprof_ab, toy


def test_two_commands_run_interleaved_each_in_its_own_directory(toy_ab):
    out, result = toy_ab
    assert result.returncode == 0, result.stderr
    data = json.loads((out / "ab.json").read_text())
    validate("ab", data)
    runs = data["runs"]
    assert [(r["mode"], r["index"]) for r in runs] == [
        ("baseline", 0), ("candidate", 0), ("candidate", 1), ("baseline", 1),
        ("baseline", 2), ("candidate", 2),
    ]  # ABBA  # fmt: skip
    for r in runs:
        run_dir = out / "runs" / f"{r['mode']}-{r['index']}"
        assert r["trace"] == str(run_dir) and list(run_dir.glob("engine-0-*.rec"))
        assert json.loads((run_dir / "run.json").read_text())["status"] == "ok"
        assert r["steps"] == 4 and r["requests"] == 3  # counted in the trace


def test_statistics_come_from_the_traces(toy_ab):
    out, _ = toy_ab
    data = json.loads((out / "ab.json").read_text())
    assert data["throughput_unit"] == "requests/s"
    by = {(r["mode"], r["index"]): r["throughput"] for r in data["runs"]}
    ratios = [by["candidate", i] / by["baseline", i] for i in range(3)]
    geo = math.exp(sum(map(math.log, ratios)) / 3)
    assert data["gain"]["ratio"] == pytest.approx(geo)
    lo, hi = data["gain"]["ci95"]
    assert lo <= geo <= hi and data["gain"]["method"] == "Student t on log ratios, 3 units"
    assert data["baseline"]["label"] == "slow" and data["candidate"]["label"] == "fast"
    for mode in ("baseline", "candidate"):
        serving = data[mode]["serving_ms"]
        for metric in ("ttft", "tpot", "e2e"):  # first-token times and token counts recorded
            p50 = serving[metric]["p50"]
            assert p50["ci95"][0] <= p50["ms"] <= p50["ci95"][1] and p50["ms"] > 0
        assert serving["ttft"]["p50"]["ms"] < serving["e2e"]["p50"]["ms"]
    assert set(data["serving_change"]["e2e"]) == {"p50", "p90", "p99"}
    assert data["what_if_drop_lock"] is None  # no lock A/B: not run
    assert data["verdict"]["safety"] == "SAFE" and data["verdict"]["exit_code"] == 0
    settings = data["settings"]
    assert settings["baseline"]["command"].endswith("--step-ms 4")
    assert settings["candidate"]["command"].endswith("--step-ms 2")


def test_each_run_is_converted_for_perfetto_and_linked(toy_ab):
    out, _ = toy_ab
    html = (out / "report.html").read_text()
    for mode, i in (("baseline", 0), ("candidate", 2)):
        trace = out / "perfetto" / f"{mode}-{i}.json"
        assert any(e.get("name") == "execute_model"
                   for e in json.loads(trace.read_text())["traceEvents"])  # fmt: skip
        assert f"href='perfetto/{mode}-{i}.json'" in html


def test_a_race_in_one_command_fails_the_gate(tmp_path):
    r = fdprof_ab("--baseline", toy(), "--candidate", toy("--race"), "--runs", 2,
                  "--out", tmp_path, "--format", "json")  # fmt: skip
    assert r.returncode == 1, r.stderr
    verdict = json.loads(r.stdout)["verdict"]
    assert verdict["safety"] == "UNSAFE"
    assert verdict["unsafe_runs"] == ["candidate #0", "candidate #1"]
    assert verdict["races"] == {"baseline": 0, "candidate": 8}
    (kind,) = verdict["race_kinds"]
    assert kind.startswith("execute_model (engine) write / execute_model (engine) write: 8 pair")
    assert kind.endswith(", in 2 run(s)")


@pytest.mark.parametrize(
    ("candidate", "why"),
    [
        (toy("--exit", "3"), "the command exited with code 3"),
        (toy("--no-probe"), "the command left no trace in"),
    ],
)
def test_a_failed_run_is_exit_2_naming_it(tmp_path, candidate, why):
    r = fdprof_ab("--baseline", toy(), "--candidate", candidate, "--runs", 2, "--out", tmp_path)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"fdprof ab: run candidate #0 ({tmp_path / 'runs' / 'candidate-0'}): ")
    assert why in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--baseline", "true"], "--baseline and --candidate go together"),
        (["--baseline", "a", "--candidate", "b", "--names", "x", "x"], "need different names"),
        (["--names", "a", "b"], "--names names the commands"),
        (["--baseline", "a", "--candidate", "b", "--runs", "1"], "--runs must be at least 2"),
    ],
)
def test_bad_options_are_one_line_exit_2(tmp_path, args, message):
    r = fdprof_ab(*args, "--out", tmp_path)
    assert r.returncode == 2 and message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def lock_and_polling_ab(tmp_path_factory):
    """The baseline holds the engine's own baseline lock (FastDeploy's flock on one shared
    descriptor) from two threads at once; the candidate polls 30 empty steps after its first.
    Neither races: (out dir, result)."""
    out = tmp_path_factory.mktemp("lock-ab")
    result = fdprof_ab("--baseline", toy("--shared-lock"), "--candidate",
                       toy("--empty-steps", "30"), "--names", "flock", "polling", "--runs", 2,
                       "--out", out)  # fmt: skip
    return out, result


CLAUSE = ("BROKEN LOCK lock:kv/dp0 in 2 of 2 flock runs: it did not exclude its threads, so the "
          "accesses were judged without it")  # fmt: skip


def test_a_broken_baseline_lock_is_safe_and_named_in_every_report(lock_and_polling_ab):
    out, result = lock_and_polling_ab
    assert result.returncode == 0, result.stderr
    line = result.stdout.splitlines()[0]
    assert line.startswith("SAFE, ") and CLAUSE in line
    assert (out / "report.md").read_text().startswith(f"**{line}")
    body = (out / "report.html").read_text().split("<body>", 1)[1]
    assert body.startswith("<div class='verdict ok' id='verdict'><b>SAFE, ") and CLAUSE in body
    verdict = json.loads((out / "ab.json").read_text())["verdict"]
    assert verdict["line"] == line and verdict["exit_code"] == 0
    assert verdict["broken_locks"] == {"flock": {"runs": 2, "of": 2, "locks": ["lock:kv/dp0"]},
                                       "polling": {"runs": 0, "of": 2, "locks": []}}  # fmt: skip


def test_ab_and_hazards_judge_every_run_alike(lock_and_polling_ab):
    """One rule: each run's exit code and named locks under fdprof hazards are what ab says."""
    out, _ = lock_and_polling_ab
    data = json.loads((out / "ab.json").read_text())
    unsafe = set(data["verdict"]["unsafe_runs"])
    for run in data["runs"]:
        done = fdprof("hazards", run["trace"], "--json")
        report = json.loads(done.stdout)
        name = f"{run['label']} #{run['index']}"
        assert done.returncode == (1 if name in unsafe else 0) == 0, done.stderr
        assert report["untrusted_locks"] == run["untrusted_locks"]
        assert report["verdict"]["safe"] is True
        assert ("BROKEN LOCK lock:kv/dp0" in report["verdict"]["line"]) == (run["mode"] ==
                                                                          "baseline")  # fmt: skip


def test_empty_steps_are_counted_apart(lock_and_polling_ab):
    """30 polls a run: counted, and left out of step latency and the per-step breakdown."""
    out, _ = lock_and_polling_ab
    data = json.loads((out / "ab.json").read_text())
    for run in data["runs"]:
        polls = 30 if run["mode"] == "candidate" else 0
        assert (run["steps"], run["empty_steps"]) == (4 + polls, polls)
    assert data["candidate"]["empty_steps"]["count"] == 60
    assert data["baseline"]["empty_steps"]["count"] == 0
    assert data["candidate"]["step_ms"]["n"] == data["baseline"]["step_ms"]["n"] == 8
    md = (out / "report.md").read_text()
    assert "| polling |" in md and "empty steps (time, share)" in md


def test_diff_of_two_engines_runs_counts_work_and_reads_serving_latency(lock_and_polling_ab):
    """fdprof diff on the same pair: 4 steps that did work on each side, 30 polls apart, and
    TTFT/TPOT from the request spans' fd.first_token_ns / request.output_tokens."""
    out, _ = lock_and_polling_ab
    done = fdprof("diff", out / "runs/baseline-0", out / "runs/candidate-0", "--json")
    assert done.returncode == 0, done.stderr
    d = json.loads(done.stdout)
    assert (d["base"]["working_steps"], d["new"]["working_steps"]) == (4, 4)
    assert (d["base"]["empty_steps"]["count"], d["new"]["empty_steps"]["count"]) == (0, 30)
    assert d["base"]["step_latency_ns"]["n"] == d["new"]["step_latency_ns"]["n"] == 4
    assert set(d["serving"]) == {"ttft", "tpot", "e2e"}
    assert d["per_token"]["statistic"] == "median"
    assert d["base"]["per_token_ns"]["n"] == d["new"]["per_token_ns"]["n"] == 4


def test_a_second_ab_into_the_same_out_refuses_unless_force(tmp_path):
    """An A/B of 3 pairs, then one of 2 into the same --out: refused (nothing touched); with
    --force it replaces the first, leaving one consistent report: no run 2 or its Perfetto
    file beside the new one (what an A/B over the 5-run demo used to leave)."""
    out = tmp_path / "ab"
    first = fdprof_ab("--baseline", toy(), "--candidate", toy(), "--runs", 3, "--out", out)
    assert first.returncode == 0, first.stderr
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    again = fdprof_ab("--baseline", toy(), "--candidate", toy(), "--runs", 2, "--out", out)
    assert again.returncode == 2 and "is not empty" in again.stderr
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    forced = fdprof_ab("--baseline", toy(), "--candidate", toy(), "--runs", 2, "--out", out,
                       "--force")  # fmt: skip
    assert forced.returncode == 0, forced.stderr
    assert sorted(p.name for p in (out / "runs").iterdir()) == [
        "baseline-0", "baseline-1", "candidate-0", "candidate-1"]  # fmt: skip
    assert sorted(p.name for p in (out / "perfetto").iterdir()) == [
        "baseline-0.json", "baseline-1.json", "candidate-0.json", "candidate-1.json"]  # fmt: skip
    data = json.loads((out / "ab.json").read_text())
    assert len(data["runs"]) == 4 and {r["index"] for r in data["runs"]} == {0, 1}
