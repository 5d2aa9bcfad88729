"""The plugin's edges, without a model: off by default, one line naming the missing target on
a vLLM it cannot hook (any version whose targets resolve is recorded), a failing hook counted
while vLLM's own result stands; configure_from_env and run.json."""

from __future__ import annotations

import json
import sys

import pytest

from fdprof import probe, settings
from fdprof import semconv as S
from fdprof.adapters.vllm import process_role, register
from fdprof.formats.rundir import write_run_manifest
from fdprof.trace import load


def test_register_does_nothing_without_a_run_dir(monkeypatch):
    monkeypatch.delenv(settings.RUN_DIR, raising=False)
    register()  # vLLM is not even installed in this environment: nothing is imported
    assert "vllm" not in sys.modules and not probe.get().enabled


def test_register_never_raises_into_vllm(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(settings.RUN_DIR, str(tmp_path))
    register()  # no vLLM here: the adapter says so in one line and returns
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fdprof: vLLM adapter not started")


@pytest.mark.parametrize(
    ("name", "single", "expected"),
    [
        ("MainProcess", True, (S.ROLE_ENGINE, 0, 0)),
        ("MainProcess", False, (S.ROLE_FRONTEND, 0, 0)),
        ("EngineCore", False, (S.ROLE_ENGINE, 0, 0)),
        ("EngineCore_DP3", False, (S.ROLE_ENGINE, 3, 0)),
        ("VllmWorker-2", False, (S.ROLE_WORKER, 0, 2)),
    ],
)
def test_process_role_from_vllm_process_names(name, single, expected):
    assert process_role(name, single) == expected


def test_configure_from_env_records_into_the_run_dir(monkeypatch, tmp_path):
    monkeypatch.delenv(settings.RUN_DIR, raising=False)
    assert not probe.configure_from_env(S.ROLE_WORKER).enabled
    run_dir = tmp_path / "made"
    monkeypatch.setenv(settings.RUN_DIR, str(run_dir))
    p = probe.configure_from_env(S.ROLE_WORKER, dp_rank=1, tp_rank=2)
    try:
        with p.span(probe.name(S.EXECUTE_MODEL, S.CATEGORY_EXECUTE_MODEL)):
            pass
    finally:
        probe.shutdown()
    (record,) = run_dir.glob("*.rec")
    assert record.name.startswith(f"{S.ROLE_WORKER}-1-")
    write_run_manifest(run_dir, status="ok", config={"engine": "test"})
    manifest = json.loads((run_dir / "run.json").read_text())
    (proc,) = manifest["processes"]
    assert (proc["role"], proc["dp_rank"], proc["record"]) == (S.ROLE_WORKER, 1, record.name)
    trace = load(run_dir)
    assert list(trace.spans["name"]) == [S.EXECUTE_MODEL]
    assert trace.meta["config"] == {"engine": "test"}


@pytest.mark.slow
def test_a_vllm_missing_a_hook_target_is_one_line_naming_it_and_an_unrecorded_run(
    in_vllm, tmp_path
):
    done = in_vllm(
        """
        from vllm.v1.core.block_pool import BlockPool
        del BlockPool.evict_blocks  # as a release that renamed it would
        from fdprof.adapters.vllm import register
        register()
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("fdprof:")]
    assert lines == [
        "fdprof: vLLM 0.32.0 is not supported by fdprof's vLLM adapter: BlockPool.evict_blocks "
        "not found in vllm.v1.core.block_pool; this run is not recorded"
    ]
    manifest = json.loads((tmp_path / "run.json").read_text())
    assert manifest["status"] == "failed" and "BlockPool.evict_blocks" in manifest["error"]
    assert not list(tmp_path.glob("*.rec"))


@pytest.mark.slow
def test_a_version_never_seen_whose_targets_resolve_is_recorded(in_vllm, tmp_path):
    """No allow-list: what decides is whether the hooks' targets are there."""
    done = in_vllm(
        """
        import vllm
        vllm.__version__ = "0.99.0"
        from fdprof.adapters.vllm import register
        register()
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert not [line for line in done.stderr.splitlines() if line.startswith("fdprof:")]
    manifest = json.loads((tmp_path / "run.json").read_text())
    assert manifest["status"] == "ok" and manifest["config"]["vllm_version"] == "0.99.0"
    assert [p.name.split("-")[0] for p in tmp_path.glob("*.rec")] == [S.ROLE_FRONTEND]


@pytest.mark.slow
def test_a_side_interpreter_of_a_vllm_run_is_not_another_main(in_vllm, tmp_path):
    """vLLM inspects a model class in a fresh interpreter on a cold cache, plugins loaded: it
    records nothing and writes no run.json; the run's own main process does both."""
    done = in_vllm(
        """
        import os, subprocess, sys
        from fdprof.adapters.vllm import register
        register()
        side = "from fdprof.adapters.vllm import register; register(); print('side ran')"
        print(subprocess.run([sys.executable, "-c", side], capture_output=True, text=True).stdout)
        print("main", os.getpid())
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "side ran" in done.stdout
    main_pid = int(done.stdout.split("main")[-1])
    assert [p.name for p in tmp_path.glob("*.rec")] == [f"{S.ROLE_FRONTEND}-0-{main_pid}.rec"]
    manifest = json.loads((tmp_path / "run.json").read_text())
    assert [p["pid"] for p in manifest["processes"]] == [main_pid]


@pytest.mark.slow
def test_a_failing_hook_is_counted_and_vllm_goes_on(in_vllm, tmp_path):
    done = in_vllm(
        """
        import json
        from vllm.v1.core.block_pool import BlockPool
        from fdprof import probe
        from fdprof.adapters.vllm import hooks
        from fdprof.probe import api

        hooks.EngineCoreRecorder().install()

        class BrokenProbe:
            def __getattr__(self, name):
                raise RuntimeError("recorder broke")

        api.set_probe(BrokenProbe())
        pool = BlockPool(num_gpu_blocks=8, enable_caching=True, hash_block_size=32)
        blocks = pool.get_new_blocks(3)
        pool.free_blocks(b for b in blocks)  # a generator, as vLLM passes one
        print(json.dumps({"ids": [b.block_id for b in blocks],
                          "free": pool.get_num_free_blocks(),
                          "errors": hooks.ERRORS.counts}))
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(result["ids"]) == 3 and result["free"] == 7  # block 0 is vLLM's null block
    # the recording after each original failed, once per call
    assert result["errors"] == {"BlockPool.get_new_blocks": 1, "BlockPool.free_blocks": 1}
    assert sum("failed, vLLM goes on" in line for line in done.stderr.splitlines()) == 2


@pytest.mark.slow
def test_completion_edges_only_for_jobs_submitted_here(in_vllm, tmp_path):
    """The offloading worker's wait on a job this process submitted is an edge; on one it
    never submitted, nothing but ``swap.unsubmitted``, which hazards reports as its own gap."""
    done = in_vllm(
        """
        import torch
        from vllm.v1.kv_offload.base import (CanonicalKVCacheRef, CanonicalKVCaches,
                                             CanonicalKVCacheTensor, GPULoadStoreSpec)
        from vllm.v1.kv_offload.cpu.common import CPULoadStoreSpec
        from fdprof import probe
        from fdprof.adapters.vllm import hooks
        from fdprof.adapters.vllm.offload import HostCopyWorker

        probe.configure_from_env("worker")
        caches = CanonicalKVCaches([CanonicalKVCacheTensor(torch.ones(8, 64, dtype=torch.int8),
                                                           64)],
                                   [[CanonicalKVCacheRef(0, 64)]])
        worker = HostCopyWorker(caches, num_blocks=8, store_mode="async")
        recorder = hooks.WorkerRecorder()
        recorder.job_requests[1] = "r1"
        hooks.instrument_offloading_worker(worker, recorder)
        block = [3]
        worker.submit_store(1, GPULoadStoreSpec(block, [1], [0]), CPULoadStoreSpec(block))
        worker.wait({1, 7})  # 7 was never submitted
        worker.shutdown()
        probe.shutdown()
        from fdprof.formats.rundir import write_run_manifest
        import os
        write_run_manifest(os.environ["FDPROF_RUN_DIR"], status="ok")
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    trace = load(tmp_path)
    syncs = trace.syncs
    done_acquires = syncs[(syncs["obj"] == S.SIGNAL_SWAP_DONE) & (syncs["op"] == S.SyncOp.ACQUIRE)]
    assert done_acquires["seq"].tolist() == [1]
    issued = trace.spans[trace.spans["name"] == S.ISSUE_SWAP_TASK]["span_id"]
    assert trace.attr(S.REQUEST_ID).reindex(issued).tolist() == ["r1"]
    waits = trace.spans[trace.spans["name"] == S.SWAP_WAIT]["span_id"]
    assert trace.attr(S.SWAP_UNSUBMITTED).reindex(waits).tolist() == [[7]]
    from fdprof.analysis.hazards import find_hazards

    report = find_hazards(trace)
    assert report.clean and report.gaps["kind"].tolist() == ["wait_unsubmitted"]
