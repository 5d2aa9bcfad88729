import sqlite3

import pytest
from nsys_export import CATEGORY, DOMAIN, EPOCH, MARK, PUSHPOP, STARTEND, build_export, gtid
from shared_data import DATA

from fdprof import semconv as S
from fdprof.errors import FdprofError
from fdprof.trace import load


def test_real_exports_of_two_schema_versions():
    new = load(DATA / "nsys" / "NVIDIA__Fuser__report1.sqlite")
    assert new.meta["nsys"]["EXPORT_SCHEMA_VERSION"] == "3.17.1"
    api = new.attr("nsys.api")
    assert (api == "CUDA API").sum() == 990  # every runtime call kept, on its thread
    host = new.spans[~new.spans["lane"].str.contains("/cuda:")]
    nvtx = host[~host["span_id"].isin(api.index)]
    assert len(nvtx) == 13513
    assert len(nvtx["tid"].unique()) == 9
    on_device = new.spans[new.spans["lane"].str.contains("/cuda:")]
    projected = on_device["span_id"].isin(new.attr(S.NVTX_GPU_OPS).index)
    device = on_device[~projected]
    assert len(device) == 18 + 3 + 3  # kernels, memcpys, memsets
    assert projected.sum() == 37  # ranges that launched some (test_nsys_projection.py)
    launches = new.syncs[new.syncs["obj"].str.startswith("cuda:launch/")]
    rel = launches[launches["op"] == "release"].set_index("seq")["time"]
    acq = launches[launches["op"] == "acquire"].set_index("seq")["time"]
    assert len(acq) == len(device) and set(acq.index) <= set(rel.index)
    assert (acq > rel.reindex(acq.index)).all()
    assert new.spans["start"].min() > 1_741_000_000 * 10**9  # on the epoch

    old = load(DATA / "nsys" / "YoonKyonghwan__EfficientCenterFormer__baseline.sqlite")
    assert len(old.spans) == 649
    assert old.spans["name"].str.len().gt(0).all()  # names only through textId
    assert "find_centers" in set(old.spans["name"])


@pytest.mark.parametrize("enum", [True, False])
def test_built_export_every_event_kind(tmp_path, enum):
    t = gtid(10, 11)
    events = [
        {"start": -5, "eventType": DOMAIN, "domainId": 3, "text": "fdprof", "globalTid": t},
        {"start": 0, "eventType": CATEGORY, "category": 4, "text": "swap", "globalTid": t},
        {
            "start": 100,
            "end": 200,
            "eventType": PUSHPOP,
            "text": "step",
            "globalTid": t,
            "domainId": 3,
            "int64Value": 77,
        },
        {
            "start": 120,
            "end": 150,
            "eventType": PUSHPOP,
            "textId": 5,
            "globalTid": t,
            "category": 4,
        },
        {
            "start": 130,
            "end": 400,
            "eventType": STARTEND,
            "text": "swap",
            "globalTid": gtid(12, 12),
            "endGlobalTid": gtid(12, 13),
        },
        {"start": 160, "end": None, "eventType": STARTEND, "text": "open", "globalTid": t},
        {"start": 170, "eventType": MARK, "text": "here", "globalTid": t},
    ]
    path = build_export(
        tmp_path / "r.sqlite",
        events,
        enum=enum,
        meta_table="META_DATA_EXPORT" if enum else "EXPORT_META_DATA",
        strings={5: "schedule"},
    )
    trace = load(path)
    spans = trace.spans.set_index("name")
    assert sorted(spans.index) == ["here", "open", "schedule", "step", "swap"]
    assert spans.loc["step", "start"] == EPOCH + 100 and spans.loc["step", "end"] == EPOCH + 200
    assert (spans.loc["step", "pid"], spans.loc["step", "tid"]) == (10, 11)
    assert spans.loc["swap", "pid"] == 12
    assert spans.loc["open", "end"] == -1
    assert spans.loc["here", "start"] == spans.loc["here", "end"]
    named = trace.spans.set_index("name")["span_id"]
    assert trace.attr("nvtx.domain")[named["step"]] == "fdprof"
    assert trace.attr("nvtx.payload")[named["step"]] == 77
    assert trace.attr("nvtx.category")[named["schedule"]] == "swap"
    assert trace.meta["thread_names"]["10/11"] == "sched"
    assert any("never ended" in w for w in trace.meta["warnings"])


def test_join_to_native_run(engine_run, tmp_path):
    native = load(engine_run)
    shift = 12_345
    events = []
    swaps = native.spans[native.spans["name"].isin(["swap", "execute_model"])]
    for sid, start, end, pid, tid in swaps[["span_id", "start", "end", "pid", "tid"]].itertuples(
        index=False
    ):
        events.append(
            {
                "start": start - EPOCH + shift,
                "end": end - EPOCH + shift,
                "eventType": PUSHPOP,
                "text": "range",
                "globalTid": gtid(pid, tid),
                "int64Value": sid,
            }
        )
    events.append(
        {"start": 1, "end": 2, "eventType": PUSHPOP, "text": "foreign", "globalTid": gtid(1, 1)}
    )
    path = build_export(tmp_path / "p.sqlite", events)
    joined = load(path, join=engine_run)
    assert joined.meta["format"] == "nsys+native"
    assert joined.meta["clock_offset_ns"] == shift
    spans = joined.spans.set_index("span_id")
    for sid, name in swaps[["span_id", "name"]].itertuples(index=False):
        assert spans.loc[sid, "name"] == name  # the native name, not the NVTX text
    assert set(joined.accesses["span_id"]) == set(native.accesses["span_id"])
    assert len(joined.spans) == len(native.spans) + 1
    assert len(joined.syncs) == len(native.syncs)
    assert (
        joined.syncs["time"].sort_values().to_numpy()
        == (native.syncs["time"] + shift).sort_values().to_numpy()
    ).all()
    assert any("joined 6 of 6 NVTX ranges" in w for w in joined.meta["warnings"])


def test_join_errors(engine_run, tmp_path):
    path = build_export(
        tmp_path / "p.sqlite",
        [
            {
                "start": 1,
                "end": 2,
                "eventType": PUSHPOP,
                "text": "x",
                "globalTid": 1,
                "int64Value": 5,
            }
        ],
    )
    with pytest.raises(FdprofError, match="no NVTX range carries a span id"):
        load(path, join=engine_run)
    with pytest.raises(FdprofError, match="--join applies"):
        load(engine_run, join=engine_run)


def test_sqlite_that_is_not_an_export(tmp_path):
    path = tmp_path / "other.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    with pytest.raises(FdprofError, match="not an Nsight Systems export"):
        load(path)
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    with pytest.raises(FdprofError, match="SQLite"):
        load(broken)
