"""hazards and hazards --predict on Dask give the in-process answer: the same JSON, findings
compared by their order-independent identity, on the reference runs and on random traces that
have every finding (races, alarms, gaps, broken locks, lifetime violations, predicted races),
cut into several block buckets so the reduction across buckets is what is tested."""

import json
from pathlib import Path

import pytest

from fdprof.analysis import distributed
from fdprof.analysis.hazards import find_hazards
from fdprof.analysis.predict import predict_races
from fdprof.trace import load, store

from .randomtrace import random_trace, random_wcp_trace

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = sorted(p for p in (ROOT / "traces").iterdir() if p.is_dir())
RANDOM = [("mixed", s) for s in range(12)] + [("lifetime", s) for s in range(8)] + [
    ("locks", s) for s in range(6)] + [("skewed", s) for s in range(6)] + [
    ("wcp", s) for s in range(10)]  # fmt: skip


def canonical(report_json: dict) -> dict:
    """The JSON with every list of findings in a fixed order: pieces come back in bucket order,
    the in-process path in span order; what was found must be the same."""
    out = json.loads(json.dumps(report_json, default=str))
    for key, value in out.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            out[key] = sorted(value, key=lambda x: json.dumps(x, sort_keys=True))
    return out


def random(family: str, seed: int):
    return random_wcp_trace(seed) if family == "wcp" else random_trace(seed, family)


@pytest.fixture(scope="module")
def client():
    with distributed.client_for("local:2") as c:
        yield c


def _both(trace, tmp_path, client, predict: bool):
    store.write(trace, tmp_path / "s", buckets=4)
    direct = (predict_races(trace) if predict else find_hazards(trace)).to_json()
    on_dask = distributed.find_hazards(tmp_path / "s", client, predict=predict).to_json()
    return canonical(direct), canonical(on_dask)


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


def _cli(*args: str, env=None):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "fdprof", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})  # fmt: skip


def test_cli_on_a_local_cluster_and_on_dask_scheduler_address(client):
    """``--dask local:2`` starts its own cluster; a bare ``--dask`` connects to the scheduler
    DASK_SCHEDULER_ADDRESS names (here the fixture's), as nsys recipes do."""
    run = str(ROOT / "traces" / "fault-no-wait-swap-in")
    direct = _cli("hazards", run, "--predict", "--json")
    local = _cli("hazards", run, "--predict", "--json", "--dask", "local:2")
    address = client.scheduler.address
    remote = _cli("hazards", run, "--predict", "--json", "--dask",
                  env={"DASK_SCHEDULER_ADDRESS": address})  # fmt: skip
    assert direct.returncode == local.returncode == remote.returncode == 1, local.stderr
    want = canonical(json.loads(direct.stdout))
    assert canonical(json.loads(local.stdout)) == want == canonical(json.loads(remote.stdout))


def test_cli_dask_bad_input():
    r = _cli("hazards", str(REFERENCE[0]), "--dask", "local:x")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    r = _cli("hazards", str(REFERENCE[0]), "--dask", env={"DASK_SCHEDULER_ADDRESS": ""})
    assert r.returncode == 2 and "DASK_SCHEDULER_ADDRESS" in r.stderr
