"""``fdprof ab`` on the asynchronous engine: the baseline's lock around the host call, with and
without ``--sync-before-unlock``, against the lockless engine whose events order the device
work. Every mode is safe here: the events and the host's waits order each conflicting pair,
so the lock never is what keeps the baseline safe (the what-if drops its edges: nothing
becomes unordered); whether the lock excluded device work is the device-side overlap."""

import json

import pytest

from tests.ab.conftest import fdprof_ab

pytestmark = pytest.mark.slow  # each module fixture runs an A/B of engine runs


@pytest.fixture(scope="module", params=[False, True], ids=["unlock-after-launch", "sync"])
def async_ab(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("ab-async")
    extra = ["--sync-before-unlock"] if request.param else []
    result = fdprof_ab("--device-async", *extra, "--workload", "swap-heavy", "--runs", 2,
                       "--requests", 16, "--out", out, "--json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    return request.param, json.loads(result.stdout)


def test_both_modes_run_asynchronously_and_say_so(async_ab):
    sync, data = async_ab
    base, new = data["settings"]["baseline"], data["settings"]["candidate"]
    assert base["device_async"] and new["device_async"]
    assert base["sync_before_unlock"] is sync and base["kv_lock"] == "ipc"
    assert new["kv_lock"] == "none"


def test_the_asynchronous_engine_is_safe_in_both_modes(async_ab):
    _, data = async_ab
    assert data["verdict"]["safety"] == "SAFE"
    for mode in ("baseline", "candidate"):
        assert data[mode]["hazards"]["races"] == 0 and data[mode]["hazards"]["latent"] == 0
        # the device side is measured in both modes: the stream work's copies vs compute
        assert data[mode]["swap_overlap"]["device"] is not None
    assert data["what_if_drop_lock"]["newly_unordered"] == 0
    assert data["integrity_mismatches"] == 0
