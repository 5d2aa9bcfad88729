"""hazards and hazards --predict on Dask give the in-process answer: the same JSON, findings
compared by their order-independent identity, on the reference runs and on random traces that
have every finding (races, alarms, gaps, broken locks, lifetime violations, predicted races),
cut into several block buckets so the reduction across buckets is what is tested."""

import json
from pathlib import Path

import pytest
from synthetic import engine_trace

from fdprof.analysis import distributed
from fdprof.analysis.diff import diff_summaries, diff_traces
from fdprof.analysis.distributed_diff import summarize_store
from fdprof.analysis.hazards import find_hazards
from fdprof.analysis.predict import predict_races
from fdprof.trace import load, store
from tests.cli import fdprof
from tests.reference_runs import REFERENCE_RUNS as REFERENCE

from .randomtrace import random_trace, random_wcp_trace

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / ".." / "shared" / "data"  # as tests/trace/shared_data.py finds it
RANDOM = [("mixed", s) for s in range(12)] + [("lifetime", s) for s in range(8)] + [
    ("locks", s) for s in range(6)] + [("skewed", s) for s in range(6)] + [
    ("wcp", s) for s in range(10)]  # fmt: skip


def canonical(report_json: dict) -> dict:
    """The JSON with every list of findings in a fixed order: pieces come back in bucket order,
    the in-process path in span order; what was found must be the same."""
    out = _plain(json.loads(json.dumps(report_json, default=str)))
    for key, value in out.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            out[key] = sorted(value, key=lambda x: json.dumps(x, sort_keys=True))
    return out


def _plain(value):
    """NaN as text, so that two NaNs compare equal."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return "NaN" if isinstance(value, float) and value != value else value


def random(family: str, seed: int):
    return random_wcp_trace(seed) if family == "wcp" else random_trace(seed, family)


@pytest.fixture(scope="module")
def client():
    with distributed.client_for("local:2") as c:
        yield c


def _both(trace, tmp_path, client, predict: bool):
    store.write(trace, tmp_path / "s", buckets=4, part_rows=500)
    direct = (predict_races(trace) if predict else find_hazards(trace)).to_json()
    on_dask = distributed.find_hazards(tmp_path / "s", client, predict=predict).to_json()
    assert on_dask["checked"]["ownership"] is False  # said, not silently clean
    return canonical(_without_ownership(direct)), canonical(_without_ownership(on_dask))


def _without_ownership(doc: dict) -> dict:
    """The report less the block ownership analysis, which the Dask path does not run yet."""
    out = {k: v for k, v in doc.items() if k not in ("ownership", "ownership_kinds", "verdict")}
    out["counts"] = {k: v for k, v in doc["counts"].items() if k != "ownership"}
    out["checked"] = {k: v for k, v in doc["checked"].items() if k != "ownership"}
    return out


@pytest.mark.parametrize("run", REFERENCE, ids=lambda p: p.name)
@pytest.mark.parametrize("predict", [False, True], ids=["hb", "predict"])
def test_reference_runs(run, predict, tmp_path, client):
    direct, on_dask = _both(load(run), tmp_path, client, predict)
    assert direct == on_dask


@pytest.mark.parametrize(("family", "seed"), RANDOM)
def test_random_traces(family, seed, tmp_path, client):
    direct, on_dask = _both(random(family, seed), tmp_path, client, predict=True)
    assert direct == on_dask


def test_the_random_traces_have_every_finding():
    """The comparison above is not vacuous: together the random traces race, raise clock
    alarms, have gaps, broken locks, lifetime violations and predicted races."""
    totals: dict[str, int] = {}
    for family, seed in RANDOM:
        for k, v in predict_races(random(family, seed)).counts.items():
            totals[k] = totals.get(k, 0) + v
    assert all(totals[k] > 0 for k in ("races", "clock_alarms", "gaps", "broken_locks",
                                        "lifetime", "predicted")), totals  # fmt: skip


def test_cli_on_a_local_cluster_and_on_dask_scheduler_address(client):
    """``--dask local:2`` starts its own cluster; a bare ``--dask`` connects to the scheduler
    DASK_SCHEDULER_ADDRESS names (here the fixture's), as nsys recipes do."""
    run = str(ROOT / "traces" / "fault-no-wait-swap-in")
    direct = fdprof("hazards", run, "--predict", "--json")
    local = fdprof("hazards", run, "--predict", "--json", "--dask", "local:2")
    address = client.scheduler.address
    remote = fdprof("hazards", run, "--predict", "--json", "--dask",
                  env={"DASK_SCHEDULER_ADDRESS": address})  # fmt: skip
    assert direct.returncode == local.returncode == remote.returncode == 1, local.stderr
    want = canonical(_without_ownership(json.loads(direct.stdout)))
    got = [json.loads(r.stdout) for r in (local, remote)]
    assert [canonical(_without_ownership(g)) for g in got] == [want, want]


def test_cli_dask_bad_input():
    r = fdprof("hazards", str(REFERENCE[0]), "--dask", "local:x")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    r = fdprof("hazards", str(REFERENCE[0]), "--dask", env={"DASK_SCHEDULER_ADDRESS": ""})
    assert r.returncode == 2 and "DASK_SCHEDULER_ADDRESS" in r.stderr


DIFFS = {
    "reference": (REFERENCE[0], ROOT / "traces" / "fault-no-wait-swap-in"),
    "synthetic": ("baseline", "lockless"),
    "hta": (DATA / "hta" / "control.json.gz", DATA / "hta" / "test.json.gz"),
}


def _trace(x):
    return engine_trace(300, mode=x, fault_every=7) if isinstance(x, str) else load(x)


@pytest.mark.parametrize("pair", list(DIFFS))
def test_diff(pair, tmp_path, client):
    """diff's per-step breakdown, ratios and CIs, and the per-name/role statistics (count,
    total, exact percentiles reduced from every part's histograms), on stores cut into many
    span parts: engine runs, engine-shaped synthetic runs (fd.step extents over parts), and
    PyTorch traces (ProfilerStep, no compute spans: the busy fallback)."""
    base, new = (_trace(x) for x in DIFFS[pair])
    want = diff_traces(base, new).to_json()
    summaries = []
    for trace, name, label in ((base, "b", "base"), (new, "n", "new")):
        store.write(trace, tmp_path / name, part_rows=max(len(trace.spans) // 7, 50))
        assert len(store.part_files(tmp_path / name, "spans")) >= 7
        summaries.append(summarize_store(tmp_path / name, client, label, None))
    assert canonical(diff_summaries(*summaries).to_json()) == canonical(want)
