import json
import os
import shutil

import pytest

from fdprof import probe
from fdprof.errors import FdprofError
from fdprof.formats import records as R
from fdprof.formats.rundir import RUN_FORMAT
from fdprof.probe.sdk.recorder import open_recorder
from fdprof.trace import load


def test_reads_every_process_of_a_run(engine_run):
    trace = load(engine_run)
    spans = trace.spans
    assert sorted(trace.processes["role"]) == ["engine", "transfer", "worker"]
    counts = spans["name"].value_counts().to_dict()
    assert counts == {"step": 3, "issue_swap_task": 3, "swap": 3, "execute_model": 3}
    assert (spans["end"] >= spans["start"]).all()
    assert spans["span_id"].is_unique
    steps = spans[spans["name"] == "step"].sort_values("start")
    assert steps["step"].tolist() == [0, 1, 2]
    assert set(spans.loc[spans["name"] == "swap", "step"]) == {-1}
    assert set(spans.loc[spans["name"] == "swap", "role"]) == {"transfer"}
    issue = spans[spans["name"] == "issue_swap_task"]
    assert set(issue["parent_id"]).issubset(set(steps["span_id"]))
    lanes = spans["pid"].astype(str) + "/" + spans["tid"].astype(str)
    assert (spans["lane"] == lanes).all()
    assert trace.meta["config"] == {"kv_lock": "none", "seed": 0}
    assert "warnings" not in trace.meta
    assert "scheduler" in trace.meta["thread_names"].values()


def test_times_share_the_epoch_timebase_and_respect_causality(engine_run):
    trace = load(engine_run)
    syncs = trace.syncs
    now = 2_000_000_000 * 10**9
    assert syncs["time"].between(1_600_000_000 * 10**9, now).all()
    for obj in ("queue:swap", "signal:swap_done", "queue:batch"):
        rel = syncs[(syncs["obj"] == obj) & (syncs["op"] == "release")].set_index("seq")["time"]
        acq = syncs[(syncs["obj"] == obj) & (syncs["op"] == "acquire")].set_index("seq")["time"]
        assert list(rel.index) == [0, 1, 2] and list(acq.index) == [0, 1, 2]
        assert (acq > rel).all(), obj


def test_attributes_and_derived_accesses(engine_run):
    trace = load(engine_run)
    execute = trace.spans[trace.spans["name"] == "execute_model"]
    sid = int(execute.sort_values("start")["span_id"].iloc[0])
    ratio, read, size = (trace.attr(k) for k in ("batch.ratio", "kv.gpu_read", "batch.size"))
    assert ratio.dtype == "float64" and ratio[sid] == 0.5
    assert size.dtype == "int64" and size[sid] == 4
    assert read[sid] == [1, 2, 3]
    acc = trace.accesses
    rows = acc[acc["span_id"] == sid].sort_values(["mode", "block"])
    assert rows[["pool", "block", "mode"]].values.tolist() == [
        ["gpu", 1, "read"],
        ["gpu", 2, "read"],
        ["gpu", 3, "read"],
        ["gpu", 3, "write"],
    ]
    assert set(rows["layer_lo"]) == {0} and set(rows["layer_hi"]) == {2}
    swap = trace.spans[trace.spans["name"] == "swap"]["span_id"]
    swap_acc = acc[acc["span_id"].isin(swap)]
    assert len(swap_acc) == 12
    assert set(swap_acc["layer_lo"]) == {-1}
    assert set(zip(swap_acc["pool"], swap_acc["mode"], strict=True)) == {
        ("gpu", "read"),
        ("cpu", "write"),
    }


def _reference(path):
    """Spans, attrs and syncs decoded one record at a time by the probe's own decoder."""
    data = path.read_bytes()
    strings, spans, attrs, syncs = {}, {}, 0, 0
    for kind, _flags, _tid, fields, _end in R.iter_records(data):
        if kind == R.Kind.STRING:
            strings[fields[0]] = fields[1]
        elif kind == R.Kind.SPAN_BEGIN:
            spans[fields[0]] = strings[fields[2]]
        elif kind in (R.Kind.ATTR_INT, R.Kind.ATTR_FLOAT, R.Kind.ATTR_STR, R.Kind.ATTR_INTS):
            attrs += 1
        elif kind == R.Kind.SYNC:
            syncs += 1
    return spans, attrs, syncs


def test_agrees_with_the_record_by_record_decoder(engine_run):
    trace = load(engine_run)
    spans, attrs, syncs = {}, 0, 0
    for path in engine_run.glob("*.rec"):
        s, a, y = _reference(path)
        spans.update(s)
        attrs += a
        syncs += y
    assert dict(zip(trace.spans["span_id"], trace.spans["name"], strict=True)) == spans
    assert len(trace.attrs) == attrs
    assert len(trace.syncs) == syncs


def test_killed_process_reads_up_to_its_last_record(killed_run):
    trace = load(killed_run)
    spans = trace.spans.sort_values("start")
    assert spans["step"].tolist() == [0, 1]
    assert spans["end"].tolist()[1] == -1 and spans["end"].tolist()[0] > 0
    assert any("never ended" in w for w in trace.meta["warnings"])
    assert any("status is 'running'" in w for w in trace.meta["warnings"])
    assert trace.accesses["block"].tolist() == [7]


def test_cut_record_file_reads_complete_records(engine_run, tmp_path):
    src = next(engine_run.glob("worker-*.rec"))
    data = src.read_bytes()
    full = load(engine_run)
    pid = int(src.name.split("-")[2].split(".")[0])
    for cut in (R.FILE_HEADER.size + 3, len(data) // 2, len(data) - 5):
        run = tmp_path / f"cut{cut}"
        run.mkdir()
        (run / src.name).write_bytes(data[:cut])
        trace = load(run)
        assert len(trace.spans) <= (full.spans["pid"] == pid).sum()
        assert any("no run.json" in w for w in trace.meta["warnings"])


def test_directory_without_manifest_reads_records_with_a_warning(engine_run, tmp_path):
    for path in engine_run.glob("*.rec"):
        shutil.copy(path, tmp_path / path.name)
    trace = load(tmp_path)
    assert len(trace.spans) == 12
    assert any("no run.json" in w for w in trace.meta["warnings"])


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda d: None, "neither run.json nor .rec"),
        (lambda d: (d / "run.json").write_text("{"), "not valid JSON"),
        (lambda d: (d / "run.json").write_text('{"format": "x"}'), RUN_FORMAT),
        (lambda d: (d / "a.rec").write_bytes(b"NOTFDPROF" * 10), "bad magic"),
        (
            lambda d: (d / "run.json").write_text(json.dumps({"format": RUN_FORMAT})),
            "no .rec record files",
        ),
    ],
)
def test_bad_run_directories_raise_one_line(tmp_path, setup, message):
    setup(tmp_path)
    with pytest.raises(FdprofError, match=message) as info:
        load(tmp_path)
    assert "\n" not in str(info.value)


def test_unknown_record_kind_is_an_error(engine_run, tmp_path):
    src = next(engine_run.glob("worker-*.rec"))
    data = bytearray(src.read_bytes())
    data[R.FILE_HEADER.size] = 99
    (tmp_path / src.name).write_bytes(bytes(data))
    with pytest.raises(FdprofError, match="unknown record kind 99"):
        load(tmp_path)


def test_missing_path_is_an_error(tmp_path):
    with pytest.raises(FdprofError, match="no such file"):
        load(tmp_path / "nope")


def test_int_list_attributes_read_typed(tmp_path):
    """Lists of every length and sign, unaligned in the file, read back as int64 lists (not
    under a kv.* key: a block id is never negative)."""
    lists = [[], [0], [-5, 2**31 - 1, -(2**31)], list(range(300)), [7] * 3]
    rec = open_recorder(tmp_path / f"worker-0-{os.getpid()}.rec", "worker")
    name, key = probe.name("execute_model", "execute_model"), probe.key("grid")
    for i, values in enumerate(lists):
        sid = rec.begin(name)
        rec.set_str(sid, probe.key("pad"), "x" * i)  # shifts the next record's alignment
        rec.set_ints(sid, key, values)
        rec.end(sid)
    rec.close()
    trace = load(tmp_path)
    got = trace.attr("grid")
    order = trace.spans.set_index("span_id")["start"].reindex(got.index).argsort()
    assert got.iloc[order].tolist() == lists
