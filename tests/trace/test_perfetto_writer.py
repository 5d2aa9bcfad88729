import json

from roundtrip import assert_same

from fdprof.trace import load
from fdprof.trace.perfetto import us, write


def test_native_to_perfetto_round_trip(engine_run, tmp_path):
    native = load(engine_run)
    out = tmp_path / "run.json.gz"
    write(native, out)
    back = load(out)
    assert back.meta["format"] == "chrome"
    assert_same(native, back, ("spans", "accesses", "syncs", "attrs", "processes"))
    assert sorted(back.processes["role"]) == sorted(native.processes["role"])


def test_tracks_keep_every_slice_nested(engine_run, tmp_path):
    out = tmp_path / "run.json"
    write(load(engine_run), out)
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    slices = {}
    for ev in events:
        if ev["ph"] == "X":
            slices.setdefault((ev["pid"], ev["tid"]), []).append((ev["ts"], ev["ts"] + ev["dur"]))
    for track in slices.values():
        stack = []
        for start, end in sorted(track, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or stack[-1] >= end
            stack.append(end)
    names = {ev["args"]["name"] for ev in events if ev.get("name") == "thread_name"}
    assert any(name.endswith(" swap") for name in names)
    flows = [ev for ev in events if ev["ph"] in "sf"]
    assert len(flows) == 2 * 9  # queue:swap, signal:swap_done, queue:batch for 3 steps


def test_microseconds_are_exact():
    assert us(1733150000123456789) == "1733150000123456.789"
    assert us(5000) == "5"
    assert us(-1500) == "-1.500"
