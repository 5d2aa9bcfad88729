"""The plugin's hook targets: one table, checked in the running vLLM (0.32.0, real), against a
newer release's wheel by its source (0.33.0: facts extracted with ast and kept in
``data/``), and against fdprof's own overrides in ``offload.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fdprof.adapters.vllm import targets as T
from fdprof.adapters.vllm.source import Source

DATA = Path(__file__).with_name("data")
OFFLOAD = Path(T.__file__).with_name("offload.py")
#: what `python -m fdprof.adapters.vllm.source vllm-0.33.0-*.whl` extracted (docs/vllm.md)
FACTS_033 = DATA / "vllm-0.33.0-targets.json"


def test_the_vllm_0_33_wheel_has_every_target():
    kept = json.loads(FACTS_033.read_text())
    assert kept["vllm"] == "0.33.0"
    # the facts answer the table as it is: re-extract when it changes (docs/vllm.md)
    assert kept["asked"] == {t.key: T.asked(t) for t in T.TARGETS}
    assert T.problems(kept["facts"]) == []
    # what 0.33 changed in the targets: a synchronous load is submitted ``expedited``
    submit_load = "vllm.v1.kv_offload.base:OffloadingWorker.submit_load"
    assert kept["facts"][submit_load] == ["self", "job_id", "src_spec", "dst_spec", "expedited"]


def test_fdprofs_overrides_take_what_vllm_passes():
    """Each method offload.py overrides takes exactly the table's ``accepts`` (and so every
    parameter of vLLM's, by the check above), and implements the abstract ones."""
    ours = Source(lambda name: OFFLOAD.read_text() if name == "offload.py" else None, "offload")
    for t in T.TARGETS:
        if isinstance(t, T.Method) and t.accepts is not None:
            mine = T.Method("offload", T.OVERRIDES[t.owner], t.name)
            assert ours.fact(mine) == list(t.accepts), t.key
        if isinstance(t, T.Abstract):
            for name in t.names:
                assert ours.fact(T.Method("offload", T.OVERRIDES[t.owner], name)), name


def _facts(**changes: T.Fact) -> dict[str, T.Fact]:
    kept = json.loads(FACTS_033.read_text())["facts"]
    return kept | {key: value for key, value in changes.items()}


@pytest.mark.parametrize(
    ("key", "fact", "problem"),
    [
        ("vllm.v1.core.block_pool:BlockPool.evict_blocks", None,
         "BlockPool.evict_blocks not found in vllm.v1.core.block_pool"),
        ("vllm.v1.core.block_pool:BlockPool.get_new_blocks", ["self", "n"],
         "BlockPool.get_new_blocks(self, n): fdprof relies on (self, num_blocks)"),
        ("vllm.v1.kv_offload.base:OffloadingWorker.submit_store",
         ["self", "job_id", "src_spec", "dst_spec", "priority"],
         "OffloadingWorker.submit_store(self, job_id, src_spec, dst_spec, priority): fdprof's "
         "override does not take priority"),
        ("vllm.v1.core.sched.output:SchedulerOutput fields", ["scheduled_new_reqs"],
         "SchedulerOutput has no scheduled_cached_reqs, num_scheduled_tokens, "
         "total_num_scheduled_tokens, finished_req_ids, preempted_req_ids, "
         "new_block_ids_to_zero"),
        ("vllm.v1.kv_offload.base:TransferResult fields",
         ["job_id", "transfer_size", "success", "transfer_time"],
         "TransferResult's fields start (job_id, transfer_size, success, transfer_time), "
         "fdprof passes (job_id, success, transfer_size, transfer_time)"),
        ("vllm.v1.kv_offload.base:OffloadingWorker abstract methods",
         ["get_finished", "submit_load", "submit_store", "wait", "wait_all"],
         "OffloadingWorker has abstract wait_all, which fdprof's HostCopyWorker does not "
         "implement"),
        ("vllm.v1.core.sched.scheduler:Scheduler attributes", None,
         "class Scheduler not found in vllm.v1.core.sched.scheduler"),
    ],
)  # fmt: skip
def test_each_kind_of_change_is_named(key, fact, problem):
    assert T.problems(_facts(**{key: fact})) == [problem]


@pytest.mark.slow
def test_vllm_0_32_resolves_every_target_alike_at_run_time_and_from_its_source(in_vllm):
    """In the real vLLM 0.32.0: the plugin's own lookup (import, getattr, inspect) finds every
    target, and the source reader finds the same facts in its installed files."""
    done = in_vllm(
        """
        import json, sys, vllm
        from pathlib import Path
        from fdprof.adapters.vllm import targets
        from fdprof.adapters.vllm.source import Source
        runtime = targets.narrow(targets.runtime_facts())
        source = targets.narrow(Source.open(Path(vllm.__file__).parents[1]).facts())
        print(json.dumps({"version": vllm.__version__, "runtime": runtime, "source": source}))
        """,
        None,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["version"] == "0.32.0"
    assert T.problems(result["runtime"]) == []
    assert result["runtime"] == result["source"]
