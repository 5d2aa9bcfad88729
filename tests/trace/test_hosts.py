"""Many hosts: three DP groups of one engine run, each on a "host" whose CLOCK_MONOTONIC differs
(a Linux time namespace each), expert parallelism over gloo across them, each host rolling its
records on its own clock into one receiving endpoint (``host=<name>`` Parquet stores).
``fdprof merge`` recovers the offsets from the cross-host sync edges (the all-to-all
collectives) within the bounds it states, agreeing with the anchors; ``hazards`` on the merged
trace: 0 races on a correct run, and with a fault seeded on one host the races, all on that
host. Where time namespaces are not available, the hosts run on one clock and each host's store
is shifted by its offset afterwards (the merge sees the same thing; the engine's clocks do not
differ, which is said in the test's name)."""

import json
from pathlib import Path

import numpy as np
import pytest
from schemas import validate

from fdprof.engine import hosts as engine_hosts
from fdprof.engine.config import EngineConfig
from fdprof.engine.launcher import run_engine
from fdprof.probe import ProbeConfig
from fdprof.trace import load, save, store
from fdprof.trace.hosts import merge_hosts
from fdprof.trace.roll import RollObserver
from tests.cli import fdprof

pytestmark = pytest.mark.slow
#: each host's CLOCK_MONOTONIC offset (whole seconds: unshare's unit)
OFFSETS = (0, 7, -4)
FAULTY_HOST = 1


def _namespaces() -> bool:
    try:
        engine_hosts.check()
    except Exception:
        return False
    return True


NAMESPACES = _namespaces()


def _run(tmp_path: Path, fault: bool) -> Path:
    """One DP 3 + EP run, each DP group a host, rolled per host into ``endpoint``."""
    endpoint = tmp_path / "endpoint"
    observers = [
        RollObserver(endpoint / f"host=h{r}", roll_s=1.0, name=f"h{r}", clock="host",
                     select=lambda header, r=r: header.dp_rank == r)
        for r in range(3)
    ]  # fmt: skip
    cfg = EngineConfig(dp=3, ep=True, workload="swap-heavy", requests=36,
                       fault="no-wait-swap-in" if fault else None)  # fmt: skip
    offsets = OFFSETS if NAMESPACES else (0, 0, 0)
    hosts = engine_hosts.Hosts(offsets, frozenset({FAULTY_HOST}) if fault else None)
    run_engine(cfg, ProbeConfig(run_dir=str(tmp_path / "run")), observers, hosts=hosts)
    if not NAMESPACES:  # simulated: each host's times moved by its offset
        for r, off in enumerate(OFFSETS):
            _shift_store(endpoint / f"host=h{r}", off * 10**9, tmp_path / f"shifted{r}")
    return endpoint


def _shift_store(path: Path, by: int, tmp: Path) -> None:
    trace = load(path)
    trace.spans["start"] += by
    trace.spans["end"] = np.where(trace.spans["end"] == -1, -1, trace.spans["end"] + by)
    trace.syncs["time"] += by
    trace.meta["clock_anchors"] = {p: a - by for p, a in trace.meta["clock_anchors"].items()}
    save(trace, tmp, "parquet")
    for f in sorted(path.rglob("*"), reverse=True):
        f.unlink() if f.is_file() else f.rmdir()
    tmp.rename(path)


def _merge(endpoint: Path, out: Path) -> dict:
    r = fdprof("merge", str(endpoint), "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    merged = json.loads(r.stdout)
    validate("merge", merged)
    return merged


def _check_offsets(merged: dict) -> None:
    """Each host's estimate within its stated bound of the truth (the namespaces' offsets),
    found from the edges and agreeing with the anchors."""
    assert merged["reference"] == "h0" and merged["clock_alarms"] == []
    for h in merged["hosts"]:
        r = int(h["host"][1:])
        truth = -(OFFSETS[r] - OFFSETS[0]) * 10**9  # added to host r's clock to read host 0's
        assert h["lo_ns"] <= truth <= h["hi_ns"]
        assert abs(h["offset_ns"] - truth) <= h["bound_ns"] < 5_000_000, h
        if r:
            assert h["edges"] > 100 and h["basis"] == "edges+anchor"


def _hazards(path: Path) -> dict:
    r = fdprof("hazards", str(path), "--json")
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


@pytest.mark.skipif(not NAMESPACES, reason="simulated below")
def test_three_hosts_with_their_own_clocks(tmp_path):
    _three_hosts(tmp_path)


@pytest.mark.skipif(NAMESPACES, reason="time namespaces are available: the test above runs")
def test_three_hosts_on_one_clock_shifted_afterwards(tmp_path):
    _three_hosts(tmp_path)


def _three_hosts(tmp_path):
    clean = _run(tmp_path / "clean", fault=False)
    merged = _merge(clean, tmp_path / "clean.parquet")
    _check_offsets(merged)
    report = _hazards(tmp_path / "clean.parquet")
    assert report["counts"]["races"] == 0 and report["counts"]["clock_alarms"] == 0
    assert report["checked"]["accesses"] > 0

    faulty = _run(tmp_path / "faulty", fault=True)
    merged = _merge(faulty, tmp_path / "faulty.parquet")
    _check_offsets(merged)
    report = _hazards(tmp_path / "faulty.parquet")
    assert report["counts"]["races"] > 0
    host_pids = set(load(faulty / f"host=h{FAULTY_HOST}").processes["pid"].tolist())
    for race in report["races"]:
        for lane in (race["lane_a"], race["lane_b"]):
            assert int(lane.split("/")[0]) in host_pids, race
    _alarms(clean)


def _alarms(endpoint: Path) -> None:
    """A host whose anchor is 50 ms off is named by a clock alarm (the edges still place it);
    a clock that steps by 1 s half-way makes the edges contradict each other: an alarm too."""
    traces = {f"h{r}": load(endpoint / f"host=h{r}") for r in range(3)}
    off = {p: a + 50_000_000 for p, a in traces["h2"].meta["clock_anchors"].items()}
    traces["h2"].meta["clock_anchors"] = off
    m = merge_hosts(dict(traces))
    assert [(a["kind"], a["hosts"]) for a in m.alarms] == [("anchor_disagrees", ["h2"])]
    h2 = next(h for h in m.hosts if h.host == "h2")
    assert abs(h2.offset_ns + (OFFSETS[2] - OFFSETS[0]) * 10**9) <= h2.bound_ns
    traces = {f"h{r}": load(endpoint / f"host=h{r}") for r in range(3)}
    syncs = traces["h1"].syncs
    later = syncs["time"] > syncs["time"].median()
    syncs.loc[later, "time"] += 10**9
    m = merge_hosts(traces)
    assert "inconsistent_edges" in [a["kind"] for a in m.alarms]


def test_endpoint_is_a_store_per_host(tmp_path):
    """What the merge reads at an endpoint: one store per host, named host=<name>."""
    from fdprof.trace.hosts import host_inputs

    for name in ("a", "b"):
        save(load(Path(__file__).resolve().parents[2] / "traces" / "baseline"),
             tmp_path / "ep" / f"host={name}", "parquet")  # fmt: skip
    found = host_inputs([tmp_path / "ep"])
    assert sorted(found) == ["a", "b"] and all(store.is_store(p) for p in found.values())
