"""Rolling a live engine run into the Parquet store: the store reads back as the run directory
does, window by window, whether the supervisor rolls it (``fdprof run --parquet``) or a
separate ``fdprof roll --follow`` does while the engine writes."""

import json
import subprocess
import sys
import time

import pytest
from roundtrip import assert_same
from schemas import validate

from fdprof.trace import load, store
from tests.cli import fdprof

EVERY_TABLE = ("spans", "accesses", "syncs", "attrs", "processes")


def canonical_hazards(path) -> dict:
    """``hazards --json`` with races in a fixed order (row order is the store's own)."""
    r = fdprof("hazards", str(path), "--json")
    assert r.returncode in (0, 1), r.stderr
    out = json.loads(r.stdout)
    for key in ("races", "clock_alarms"):
        out[key] = sorted(out[key], key=lambda x: (x["span_a"], x["span_b"]))
    out["race_kinds"] = sorted(out["race_kinds"], key=lambda k: json.dumps(k, sort_keys=True))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("fault", [None, "no-wait-swap-in"])
def test_run_rolls_into_a_store(fault, tmp_path):
    run, out = tmp_path / "run", tmp_path / "run.parquet"
    args = ["run", "--out", str(run), "--parquet", str(out), "--roll-s", "0.2", "--requests", "24"]
    r = fdprof(*args, *(["--fault", fault] if fault else []))
    assert r.returncode == 0, r.stderr
    windows = {p.name for p in store.part_files(out, "spans")}
    assert len(windows) >= 3  # rolled as it went, not once at the end
    direct, rolled = load(run), load(out)
    assert_same(direct, rolled, EVERY_TABLE)
    assert rolled.meta["results"] == direct.meta["results"]
    assert rolled.meta["status"] == "ok"
    a, b = canonical_hazards(run), canonical_hazards(out)
    assert a == b
    assert (a["counts"]["races"] > 0) == (fault is not None)


@pytest.mark.slow
def test_roll_follows_a_live_run(tmp_path):
    run, out = tmp_path / "run", tmp_path / "rolled"
    engine = subprocess.Popen([sys.executable, "-m", "fdprof", "run", "--out", str(run),
                               "--requests", "32", "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 300
    while not (run / "run.json").exists():
        assert time.monotonic() < deadline and engine.poll() is None
        time.sleep(0.05)
    r = fdprof("roll", str(run), str(out), "--follow", "--roll-s", "0.2", "--json")
    assert engine.wait(timeout=600) == 0
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    validate("roll", summary)
    assert summary["windows"] >= 2
    assert_same(load(run), load(out), EVERY_TABLE)
    assert canonical_hazards(run) == canonical_hazards(out)


@pytest.mark.parametrize("run", ["baseline", "fault-no-wait-swap-in"])
def test_a_rolled_store_reads_before_the_roll_ends(run, tmp_path):
    """Every window rewrites store.json: what is rolled so far is a store every command reads
    (here after one window, before close), and the closed store equals the run directory."""
    from pathlib import Path

    from fdprof.trace.roll import Roller

    source = Path(__file__).resolve().parents[2] / "traces" / run
    roller = Roller(source, tmp_path / "s", buckets=4)
    roller.poll()
    roller.roll()
    so_far = load(tmp_path / "s")
    assert len(so_far.spans) > 0 and len(so_far.spans) <= len(load(source).spans)
    roller.close()
    assert_same(load(source), load(tmp_path / "s"), EVERY_TABLE)
