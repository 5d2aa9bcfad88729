"""NVTX capture from a real engine run (``fdprof run --nvtx-capture``): swap and execute_model
ranges in the right processes, with payloads that join to the recorded spans."""

from __future__ import annotations

import json

import pytest

from fdprof.trace import load
from fdprof.trace.nvtx_capture import read_nvtx_capture
from tests.cli import fdprof

pytestmark = pytest.mark.slow


def test_engine_run_captures_nvtx_that_joins_to_records(tmp_path):
    run = tmp_path / "run"
    result = fdprof("run", "--requests", "24", "--kv-lock", "ipc", "--nvtx-capture", "--json",
                    "--out", run)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["swaps"]["to_cpu"] > 0
    nv = read_nvtx_capture(run)
    native = load(run)
    roles = dict(zip(native.processes.pid, native.processes.role, strict=True))
    cats = nv.attr("nvtx.category")
    for name, role in (("swap", "transfer"), ("execute_model", "worker")):
        ranges = nv.spans[nv.spans.name == name]
        assert len(ranges) > 0
        assert {roles[p] for p in ranges.pid} == {role}
        assert set(cats[ranges.span_id]) == {name}  # a category per kind
    joined = nv.spans.merge(native.spans, on="span_id", suffixes=("_nvtx", ""))
    assert len(joined) == len(nv.spans) == len(native.spans)
    assert (joined.name_nvtx == joined.name).all() and (joined.pid_nvtx == joined.pid).all()
    assert set(nv.syncs.obj) >= {"queue:swap", "signal:swap_done", "lock:kv/dp0"}
