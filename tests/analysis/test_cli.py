"""``fdprof hazards`` and ``fdprof diff`` as users call them, on trace files written to disk
(synthetic engine runs through the Perfetto writer, read back by the real loader). The
command runs in-process (:mod:`tests.cli`); one test runs the real executable for the exit path."""

import json
import subprocess
import sys

import pytest
from synthetic import engine_trace

from fdprof.trace import perfetto
from tests.cli import fdprof


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("traces")
    out = {}
    for name, kw in {
        "baseline": {"mode": "baseline"},
        "lockless": {"mode": "lockless", "seed": 1},
        "fault": {"mode": "lockless", "fault": "no-wait-swap-in"},
    }.items():
        out[name] = d / f"{name}.json"
        perfetto.write(engine_trace(40, **kw), out[name])
    return out


def test_hazards_clean_exits_0_with_what_if(files):
    r = fdprof("hazards", files["baseline"], "--what-if", "drop-lock", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["counts"] == {"races": 0, "latent": 0, "overlaps": 0, "clock_alarms": 0, "gaps": 0,
                             "broken_locks": 0, "lifetime": 0, "ownership": 0}  # fmt: skip
    assert doc["what_if_drop_lock"]["count"] == 0


def test_hazards_found_exits_1_and_names_both_spans(files):
    r = fdprof("hazards", files["fault"])
    assert r.returncode == 1, r.stderr
    assert "HAZARDS FOUND" in r.stdout and "execute_model (3/1, worker" in r.stdout
    doc = json.loads(fdprof("hazards", files["fault"], "--json").stdout)
    assert doc["counts"]["races"] == 4 and doc["races"][0]["name_a"] == "swap"


def test_diff_prints_ratios_and_writes_markdown(files, tmp_path):
    out = tmp_path / "diff.md"
    r = fdprof("diff", files["baseline"], files["lockless"], "--out", out)
    assert r.returncode == 0, r.stderr
    assert "throughput:" in r.stdout and "95% CI" in r.stdout and "swap_blocking" in r.stdout
    assert out.read_text().startswith("# fdprof diff")
    doc = json.loads(fdprof("diff", files["baseline"], files["lockless"], "--json").stdout)
    assert doc["throughput"]["ratio"] > 1.5 and doc["base"]["label"] == "baseline"
    lock_wait = next(r for r in doc["moved"] if r["part"] == "lock_wait")
    assert lock_wait["delta_lo"] <= lock_wait["delta_mean"] <= lock_wait["delta_hi"] < 0


def test_missing_trace_is_one_line_exit_2_from_the_executable():
    r = subprocess.run([sys.executable, "-m", "fdprof", "hazards", "/no/such/trace"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_bad_diff_input_is_exit_2():
    assert fdprof("diff", "/no/such/a", "/no/such/b").returncode == 2


def test_unknown_what_if_is_a_usage_error(files):
    r = fdprof("hazards", files["baseline"], "--what-if", "drop-everything")
    assert r.returncode == 2 and "invalid choice: 'drop-everything'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not r.stdout


def test_unknown_step_name_is_one_line_exit_2(files):
    r = fdprof("diff", files["baseline"], files["lockless"], "--step-name", "Nope")
    assert r.returncode == 2 and "no span is named 'Nope'" in r.stderr


def without_anchor_warning(stderr: str) -> str:
    """stderr less the warning every hand-built trace without clock anchors gets once."""
    return "".join(line for line in stderr.splitlines(keepends=True)
                   if "warning: no clock anchor" not in line)  # fmt: skip


def test_reader_warnings_reach_stderr_and_leave_json_alone(files, tmp_path):
    """A trace the reader had to patch up (here a range never ended) says so on every command."""
    doc = json.loads(files["baseline"].read_text())
    doc["traceEvents"].append({"ph": "B", "name": "cut", "pid": 1, "tid": 1, "ts": 1.0})
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps(doc))
    expected = "warning: 1 span(s) begun (B/b) but never ended: end = -1\n"
    r = fdprof("hazards", cut, "--json")
    assert without_anchor_warning(r.stderr) == "fdprof hazards: " + expected
    assert json.loads(r.stdout)["counts"]["races"] == 0
    r = fdprof("diff", files["baseline"], cut, "--json")
    assert without_anchor_warning(r.stderr) == "fdprof diff: " + expected
    assert json.loads(r.stdout)["throughput"]["ratio"] == pytest.approx(1.0)


def test_a_trace_without_kv_accesses_is_not_called_clean(tmp_path):
    """Nothing to check is exit 2 (a CI gate must not pass on it), and says why."""
    bare = tmp_path / "bare.json"
    bare.write_text(
        json.dumps([{"ph": "X", "name": "step", "pid": 1, "tid": 1, "ts": 0, "dur": 5}])
    )
    message = (f"{bare}: no KV-block accesses (kv.* span attributes) to check; an Nsight "
               "Systems export needs --join RUN_DIR, a foreign trace has none")  # fmt: skip
    for extra in ((), ("--what-if", "drop-lock"), ("--json",), ("--format", "json")):
        r = fdprof("hazards", bare, *extra)
        assert r.returncode == 2
        assert without_anchor_warning(r.stderr) == f"fdprof hazards: {message}\n"
        if "json" in str(extra):  # a script reading stdout gets one JSON object, an error too
            error = {"command": "hazards", "message": message, "exit_code": 2}
            assert json.loads(r.stdout) == {"schema": "fdprof.error/1", "error": error}
        else:
            assert r.stdout == ""


def test_the_report_says_how_much_it_checked(files):
    doc = json.loads(fdprof("hazards", files["baseline"], "--json").stdout)
    assert doc["checked"]["accesses"] > 100 and doc["checked"]["lanes"] >= 3
    assert (
        f"{doc['checked']['accesses']:,} KV-block access(es)"
        in fdprof("hazards", files["baseline"]).stdout
    )
