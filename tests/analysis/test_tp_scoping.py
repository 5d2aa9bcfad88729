"""KV pools scoped by (DP group, TP rank) end to end: the TP rank from the native record
header (the probe's ``configure(..., tp_rank=)``), a Chrome process arg or an OTLP resource
attribute reaches ``processes.tp_rank``, and two TP ranks' equal block ids are not compared."""

from __future__ import annotations

import contextlib
import io
import multiprocessing as mp

import pytest

from fdprof import probe
from fdprof.cli import main
from fdprof.trace import load, save

from .builder import TraceBuilder


def _swap_writing_block_12(run_dir: str, tp_rank: int, start_ns: int) -> None:
    """A transfer process of DP group 0 writing block 12 of its pool (a real process)."""
    p = probe.configure(probe.ProbeConfig(run_dir=run_dir), "transfer", 0, tp_rank)
    with p.span(probe.name("swap", "swap")) as sid:
        p.set_ints(sid, probe.key("kv.gpu_write"), [12])
    probe.shutdown()


def _hazards(path) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(["hazards", str(path)])


@pytest.mark.parametrize(("ranks", "rc"), [((0, 1), 0), ((1, 1), 1)])
def test_native_tp_ranks_from_the_record_header_scope_the_pools(tmp_path, ranks, rc):
    ctx = mp.get_context("spawn")
    for i, tp in enumerate(ranks):
        proc = ctx.Process(target=_swap_writing_block_12, args=(str(tmp_path), tp, i))
        proc.start()
        proc.join(60)
        assert proc.exitcode == 0
    trace = load(tmp_path)
    assert sorted(trace.processes["tp_rank"].tolist()) == sorted(ranks)
    assert _hazards(tmp_path) == rc  # two processes' writes: unordered, a race in one pool


@pytest.mark.parametrize("name", ["t.perfetto.json", "t.otlp.json", "native"])
def test_tp_ranks_survive_every_format(tmp_path, name):
    b = TraceBuilder()
    b.process(10, 0, 0, "transfer")
    b.process(20, 0, 1, "transfer")
    b.span("10/1", "swap", 0, 10, attrs={"kv.gpu_write": [12]})  # what the writers write
    b.span("20/1", "swap", 2, 12, attrs={"kv.gpu_write": [12]})
    save(b.build(), tmp_path / name)
    back = load(tmp_path / name)
    assert dict(zip(back.processes["pid"], back.processes["tp_rank"], strict=True)) == {
        10: 0, 20: 1}  # fmt: skip
    assert _hazards(tmp_path / name) == 0
