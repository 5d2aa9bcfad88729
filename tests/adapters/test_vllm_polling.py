"""``fdprof diff`` on real vLLM runs that differ in polling: while requests wait for their
prefix to load back from the host pool, vLLM runs steps that schedule nothing (0.2 ms each),
as many as the copy thread's timing makes. Those are counted apart and never move the step
latency; before, every step counted, and a run that polled more read a step latency p50 many
times shorter (on pairs like these: 10.9 ms -> 208 µs, 4.7 ms -> 229 µs)."""

from __future__ import annotations

import json

import pytest

from fdprof.analysis.breakdown import steps
from fdprof.analysis.diff import diff_traces
from fdprof.trace import load, save
from tests.cli import fdprof

pytestmark = pytest.mark.slow


def test_a_run_and_the_same_run_without_its_polls_have_one_step_latency(vllm_runs, tmp_path):
    """Exactly "differ only in polling": a real asynchronous-offloading run, and the same run
    with its empty steps taken out of its trace (its Perfetto export, those steps' events
    removed): the same steps that did work, so no change may be claimed."""
    run = vllm_runs["offload"].check()
    st = steps(load(run.run_dir))
    polls = set(st.loc[st["no_tokens"], "step"].tolist())
    assert polls, "no request waited for a load: nothing polled"
    polled, quiet = tmp_path / "polled.json", tmp_path / "quiet.json"
    save(load(run.run_dir), polled, "perfetto")
    doc = json.loads(polled.read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if (e.get("args") or {}).get("fd.step") not in polls]  # fmt: skip
    quiet.write_text(json.dumps(doc))
    d = diff_traces(load(polled), load(quiet))
    assert (d.base.empty_steps["count"], d.new.empty_steps["count"]) == (len(polls), 0)
    assert d.step_latency.ratio == 1.0 and d.step_latency.includes_one
    assert d.per_token.ratio == 1.0 and d.per_token.includes_one
    assert (d.moved["delta_mean"] == 0).all()


def test_two_real_runs_that_polled_differently_compare_the_steps_that_did_work(polling_pair):
    """Two runs of one configuration, taking turns: the same tokens, the same work, and the
    polls (their number follows timing) reported apart. Whether the steps that did work took
    as long in both is the machine's to say, not asserted: on this shared 2-core machine two
    such runs once read 5.79 ms against 19.7 ms, and fdprof rightly called that a change."""
    base, new = polling_pair["first"].check(), polling_pair["second"].check()
    assert [r["tokens"] for r in base.outputs] == [r["tokens"] for r in new.outputs]
    st = {run.name: steps(load(run.run_dir)) for run in (base, new)}
    worked = {name: s[~s["no_tokens"]] for name, s in st.items()}
    # the same work (how it is cut into steps may differ where a load finished later)
    assert worked["first"]["tokens"].sum() == worked["second"]["tokens"].sum()
    polls = {name: int(s["no_tokens"].sum()) for name, s in st.items()}
    done = fdprof("diff", str(base.run_dir), str(new.run_dir), "--json")
    assert done.returncode == 0, done.stderr
    d = json.loads(done.stdout)
    assert (d["base"]["empty_steps"]["count"], d["new"]["empty_steps"]["count"]) == (
        polls["first"], polls["second"])  # fmt: skip
    assert d["base"]["working_steps"] == d["base"]["step_latency_ns"]["n"] == len(worked["first"])
    assert d["new"]["working_steps"] == d["new"]["step_latency_ns"]["n"] == len(worked["second"])
    assert d["step_latency"]["steps"] == "that scheduled tokens"
    text = fdprof("diff", str(base.run_dir), str(new.run_dir)).stdout
    assert "step latency p50 (steps that scheduled tokens): " in text
    assert f"empty steps (scheduled no tokens; not in step latency): {polls['first']} (" in text
