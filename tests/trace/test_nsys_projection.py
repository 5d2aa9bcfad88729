"""NVTX ranges projected onto the device work launched inside them, and host waits as edges:
on the real Nsight exports (against a brute-force projection straight from the SQLite
tables) and on exports built here to the documented schema."""

from __future__ import annotations

import sqlite3

import pandas as pd
import pytest
from nsys_export import EPOCH, PUSHPOP, STARTEND, add_cuda, build_export, gtid
from shared_data import DATA

from fdprof import semconv as S
from fdprof.trace import load

FUSER = DATA / "nsys" / "NVIDIA__Fuser__report1.sqlite"


def with_cuda(path, *, calls=(), kernels=(), memcpys=(), syncs=()):
    """``add_cuda`` from tuples: ``calls`` ``(start, end, globalTid, correlationId, name)``,
    ``kernels``/``memcpys`` ``(start, end, device, stream, correlationId, globalPid)``,
    ``syncs`` the same and a ``syncType``."""
    names = {name: 10_000 + i for i, name in enumerate(sorted({c[4] for c in calls} | {"k"}))}
    device = ("start", "end", "deviceId", "streamId", "correlationId", "globalPid")
    tables = {
        "CUPTI_ACTIVITY_KIND_RUNTIME": [
            {"start": a, "end": b, "eventClass": 1, "globalTid": t, "correlationId": c,
             "nameId": names[n], "returnValue": 0} for a, b, t, c, n in calls],
        "CUPTI_ACTIVITY_KIND_KERNEL": [
            dict(zip(device, k, strict=True)) | {"contextId": 1, "demangledName": names["k"],
                                                 "shortName": names["k"]} for k in kernels],
        "CUPTI_ACTIVITY_KIND_MEMCPY": [
            dict(zip(device, m, strict=True)) | {"contextId": 1, "bytes": 4096, "copyKind": 1}
            for m in memcpys],
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": [
            dict(zip((*device, "syncType"), w, strict=True)) | {"contextId": 1} for w in syncs],
    }  # fmt: skip
    return add_cuda(path, tables, {i: n for n, i in names.items()})


def projections(trace) -> pd.DataFrame:
    """The projection spans with their range's name and start."""
    spans = trace.spans.set_index("span_id")
    ops = trace.attr(S.NVTX_GPU_OPS)
    proj = spans.loc[ops.index]
    return pd.DataFrame({
        "range_start": spans.loc[proj["parent_id"], "start"].to_numpy(),
        "name": proj["name"].to_numpy(), "lane": proj["lane"].to_numpy(),
        "start": proj["start"].to_numpy(), "end": proj["end"].to_numpy(),
        "ops": ops.to_numpy(), "range_name": spans.loc[proj["parent_id"], "name"].to_numpy(),
    }).sort_values(["range_start", "lane"]).reset_index(drop=True)  # fmt: skip


def session_start(path) -> int:
    db = sqlite3.connect(path)
    return db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]


def brute_force(path) -> pd.DataFrame:
    """Every NVTX range x every launching call on its thread starting inside it, in SQL."""
    db = sqlite3.connect(path)
    offset = session_start(path)
    ops = " UNION ALL ".join(
        f"SELECT correlationId, start, end, streamId, deviceId FROM {t}"
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                  "CUPTI_ACTIVITY_KIND_MEMSET")
    )  # fmt: skip
    rows = db.execute(
        f"SELECT e.start, o.deviceId, o.streamId, MIN(o.start), MAX(o.end), COUNT(*) "
        f"FROM NVTX_EVENTS e JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = e.globalTid "
        f"AND r.start >= e.start AND r.start <= e.end JOIN ({ops}) o USING (correlationId) "
        f"WHERE e.eventType IN (59, 60) GROUP BY e.rowid, o.deviceId, o.streamId"
    ).fetchall()
    return (
        pd.DataFrame(
            [(s + offset, d, st, a + offset, b + offset, n) for s, d, st, a, b, n in rows],
            columns=["range_start", "device", "stream", "start", "end", "ops"],
        )
        .sort_values(["range_start", "device", "stream"])
        .reset_index(drop=True)
    )


def test_the_real_export_projects_as_a_brute_force_does():
    trace = load(FUSER)
    got = projections(trace)
    want = brute_force(FUSER)
    assert len(got) == len(want) == 37
    assert (got[["range_start", "start", "end", "ops"]].to_numpy()
            == want[["range_start", "start", "end", "ops"]].to_numpy()).all()  # fmt: skip
    assert len(set(got["lane"])) == 1 and got["lane"][0].endswith("/cuda:0/stream:7")
    assert (got["name"] == got["range_name"]).all()
    # one by hand: the range around the driver launch of correlation id 1754
    launch = got[got["name"] == "ExecutorRunFusion::cuLaunchKernel"].iloc[0]
    epoch = session_start(FUSER)
    assert (launch["start"], launch["end"]) == (epoch + 8737368306, epoch + 8737749038)


def test_the_real_exports_host_waits_are_edges():
    trace = load(FUSER)
    epoch = session_start(FUSER)
    syncs = trace.syncs[trace.syncs["obj"].str.startswith(S.CUDA_SYNC_PREFIX)]
    rel = syncs[syncs["op"] == S.SyncOp.RELEASE].set_index("seq")
    acq = syncs[syncs["op"] == S.SyncOp.ACQUIRE].set_index("seq")
    # two cudaStreamSynchronize (214, 1886) after a memcpy each, one cudaDeviceSynchronize
    assert sorted(rel.index) == sorted(acq.index) == [214, 1886, 2213]
    assert rel.loc[214, "time"] == epoch + 7498288041  # memcpy 213 ended
    assert acq.loc[214, "time"] == epoch + 7498292180  # the call returned
    assert rel.loc[2213, "time"] == epoch + 9034955316  # kernel 2200, the last one
    (lane,) = set(rel["lane"])
    assert lane.endswith("/cuda:0/stream:7") and lane not in set(acq["lane"])


def test_an_export_without_cuda_tables_has_no_projection():
    trace = load(DATA / "nsys" / "YoonKyonghwan__EfficientCenterFormer__baseline.sqlite")
    assert trace.attr(S.NVTX_GPU_OPS).empty


@pytest.fixture
def built(tmp_path):
    a, b = gtid(10, 11), gtid(10, 12)
    gpid = gtid(10, 0)
    events = [
        {"start": 100, "end": 1000, "eventType": PUSHPOP, "text": "outer", "globalTid": a},
        {"start": 200, "end": 400, "eventType": PUSHPOP, "text": "inner", "globalTid": a},
        {"start": 1200, "end": None, "eventType": STARTEND, "text": "open", "globalTid": a},
        {"start": 100, "end": 1000, "eventType": PUSHPOP, "text": "other", "globalTid": b},
    ]
    path = build_export(tmp_path / "p.sqlite", events)
    return with_cuda(
        path,
        calls=[
            (250, 260, a, 1, "cudaLaunchKernel_v7000"),
            (450, 470, a, 2, "cudaMemcpyAsync_v3020"),
            (1500, 1510, a, 3, "cuLaunchKernel"),
            (1800, 1900, a, 4, "cudaStreamSynchronize_v3020"),
            (1950, 1960, a, 5, "cudaEventSynchronize_v3020"),
            (2000, 2100, a, 6, "cudaDeviceSynchronize_v3020"),
            (2150, 2350, b, 7, "cudaMemcpy_v3020"),
        ],
        kernels=[(500, 600, 0, 7, 1, gpid), (1600, 1700, 0, 7, 3, gpid)],
        memcpys=[(700, 900, 0, 8, 2, gpid), (2200, 2300, 0, 8, 7, gpid)],
        syncs=[
            (1800, 1890, 0, 7, 4, gpid, 3),
            (1950, 1955, 0, 7, 5, gpid, 1),
            (2000, 2090, 0, -1, 6, gpid, 4),
        ],  # fmt: skip
    )


def test_built_export_nested_open_and_foreign_thread_ranges(built):
    got = projections(load(built))
    rows = {(r.name, r.lane): (r.start - EPOCH, r.end - EPOCH, r.ops) for r in got.itertuples()}
    s7, s8 = (S.device_lane(10, S.DEVICE_CUDA, 0, s) for s in (7, 8))
    assert rows == {
        ("outer", s7): (500, 600, 1),
        ("outer", s8): (700, 900, 1),
        ("inner", s7): (500, 600, 1),
        ("open", s7): (1600, 1700, 1),  # never closed: open to the end
    }  # "other" on thread 12 launched nothing, whatever ran on thread 11 meanwhile


def test_built_export_host_waits(built):
    trace = load(built)
    syncs = trace.syncs[trace.syncs["obj"].str.startswith(S.CUDA_SYNC_PREFIX)]
    edges = sorted(
        (op, obj.removeprefix(S.CUDA_SYNC_PREFIX), seq, time - EPOCH)
        for op, obj, seq, time in syncs[["op", "obj", "seq", "time"]].itertuples(index=False)
    )
    s7, s8 = (S.device_lane(10, S.DEVICE_CUDA, 0, s) for s in (7, 8))
    assert edges == sorted([
        ("release", s7, 4, 1700), ("acquire", s7, 4, 1900),  # stream sync: stream 7 only
        ("release", s7, 6, 1700), ("acquire", s7, 6, 2100),  # device sync: every stream
        ("release", s8, 6, 900), ("acquire", s8, 6, 2100),
        ("release", s8, 7, 2300), ("acquire", s8, 7, 2350),  # a synchronous cudaMemcpy
    ])  # fmt: skip
    assert any("1 CUDA event synchronisation" in w for w in trace.meta["warnings"])


LOCK = S.LOCK_KV_PREFIX + "0"


def _locked_run(run_dir) -> dict[str, int]:
    """A native run: the worker's host span writes block 5 under the lock and launches a device
    span (the probe's own, on the CPU twin); the transfer thread then reads block 5 under the
    lock. Host-only, the lock orders them."""
    import threading

    from fdprof import probe
    from fdprof.engine.device import CpuDevice
    from fdprof.probe import handles as H

    run_dir.mkdir()
    p = probe.configure(probe.ProbeConfig(run_dir=str(run_dir)), S.ROLE_WORKER)
    lock_obj = probe.obj(LOCK)
    dev = CpuDevice()
    stream = dev.stream()
    ids: dict[str, int] = {}
    lock = threading.Lock()

    def worker():
        with lock:
            p.acquire(lock_obj)
            with p.span(H.EXECUTE_MODEL) as sid:
                p.set_ints(sid, H.KV_GPU_WRITE, [5])
                ids["host"] = sid
                ids["device"] = stream.launch(probe.name("copy", "device"), lambda: None)
                p.set_ints(ids["device"], H.KV_CPU_WRITE, [9])
            p.release(lock_obj)

    def transfer():
        with lock:
            p.acquire(lock_obj)
            with p.span(H.SWAP) as sid:
                p.set_ints(sid, H.KV_GPU_READ, [5])
                ids["reader"] = sid
            p.release(lock_obj)

    for target in (worker, transfer):
        t = threading.Thread(target=target)
        t.start()
        t.join()
    dev.close()
    probe.shutdown()
    return ids


@pytest.mark.parametrize("nested", [False, True], ids=["one lane", "two lanes"])
def test_joined_accesses_move_to_the_device_work_the_lock_did_not_cover(tmp_path, nested):
    """The lock covered the host call; the kernel it launched ran after the lock was released,
    during the reader's span. Host-only the run is clean; joined to an export that shows the
    kernel, the write is the kernel's, unordered with the read: a race. Where the host range
    also holds the copy's launch (two lanes), its accesses stay on the host span, warned."""
    from fdprof.analysis.hazards import find_hazards

    ids = _locked_run(tmp_path / "run")
    native = load(tmp_path / "run")
    assert find_hazards(native).clean
    spans = native.spans.set_index("span_id")
    host, reader, device = (spans.loc[ids[k]] for k in ("host", "reader", "device"))
    shift = 5_000  # the export's clock runs 5 us ahead of the run's
    at = lambda t: int(t) - EPOCH + shift  # noqa: E731
    copy_at = at(host["start"]) if nested else at(host["end"])
    thread = gtid(int(host["pid"]), int(host["tid"]))
    gpid = gtid(int(host["pid"]), 0)
    events = [
        {"start": at(host["start"]), "end": at(host["end"]), "eventType": PUSHPOP,
         "text": "execute_model", "globalTid": thread, "int64Value": ids["host"]},
        {"start": copy_at + 2, "end": copy_at + 4, "eventType": PUSHPOP,
         "text": "copy", "globalTid": thread, "int64Value": ids["device"]},
    ]  # fmt: skip
    path = build_export(tmp_path / "p.sqlite", events)
    kernel = (at(reader["start"]), at(reader["end"]))  # ran while the reader read
    copy = (at(device["start"]) + 700, at(device["end"]) + 700)  # the GPU's own account
    with_cuda(
        path,
        calls=[(at(host["start"]) + 1, at(host["start"]) + 2, thread, 1, "cudaLaunchKernel"),
               (copy_at + 3, copy_at + 4, thread, 2, "cudaMemcpyAsync")],
        kernels=[(*kernel, 0, 7, 1, gpid)],
        memcpys=[(*copy, 0, 8, 2, gpid)],
    )  # fmt: skip
    joined = load(path, join=tmp_path / "run")
    assert joined.meta["clock_offset_ns"] == shift  # from the host spans alone
    js = joined.spans.set_index("span_id")
    # the device span kept its own interval and lane; the GPU's differs by the 700 ns put in
    assert (js.loc[ids["device"], "start"], js.loc[ids["device"], "lane"]) == (
        device["start"] + shift, device["lane"])  # fmt: skip
    assert joined.meta["device_vs_nsys_ns"] == {"spans": 1, "median": -700, "max_abs": 700}
    if nested:
        assert any("several streams" in w for w in joined.meta["warnings"])
        assert ids["host"] in set(joined.accesses["span_id"]) and find_hazards(joined).clean
        return
    # the host span's write is now the kernel's, on the GPU's lane, when it ran
    writers = joined.accesses[joined.accesses["mode"] == "write"]
    (moved,) = writers[writers["pool"] == "gpu"]["span_id"]
    assert js.loc[moved, "lane"] == S.device_lane(int(host["pid"]), S.DEVICE_CUDA, 0, 7)
    assert js.loc[moved, "parent_id"] == ids["host"]
    assert (js.loc[moved, "start"], js.loc[moved, "end"]) == (kernel[0] + EPOCH, kernel[1] + EPOCH)
    assert ids["host"] not in set(joined.accesses["span_id"])
    races = find_hazards(joined).races
    pairs = {frozenset(p) for p in zip(races["span_a"], races["span_b"], strict=True)}
    assert pairs == {frozenset((moved, ids["reader"]))}
