"""Suspicious but readable input is read, and flagged once (one warning line, not one per
span): spans that end before they start (a diff never reports a negative rate), integers
beyond int64, times of 1970 from a trace without clock anchors."""

from __future__ import annotations

import json
import subprocess

import pytest
from corpus import BASELINE, _x

from fdprof.trace import load, perfetto
from tests.cli import fdprof


def warnings(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if ": warning: " in line]


@pytest.fixture(scope="module")
def backwards_steps(tmp_path_factory):
    """The baseline run as Chrome JSON with every step span's duration negated (what a clock
    that went backwards, or an edited trace, gives): complete events get a negative ``dur``,
    async begin/end pairs their timestamps swapped."""
    root = tmp_path_factory.mktemp("backwards")
    perfetto.write(load(BASELINE), root / "good.json")
    doc = json.loads((root / "good.json").read_text())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    async_pairs: dict[str, list[dict]] = {}
    for ev in events:
        if ev.get("name") != "step":
            continue
        if ev.get("ph") == "X":
            ev["dur"] = -ev["dur"]
        elif ev.get("ph") in ("b", "e"):  # a step that overlaps its neighbour goes out as async
            async_pairs.setdefault(ev["id"], []).append(ev)
    for begin, end in async_pairs.values():
        begin["ts"], end["ts"] = end["ts"], begin["ts"]
    (root / "bad.json").write_text(json.dumps(doc))
    return root / "bad.json"


def _steps() -> int:
    """How many step spans the reference baseline has (all negated in ``backwards_steps``)."""
    return int((load(BASELINE).spans["name"] == "step").sum())


def rates(doc) -> list[float]:
    """Every ``*_per_s`` number anywhere in a JSON document."""
    if isinstance(doc, dict):
        return [v for k, v in doc.items() if k.endswith("_per_s") and v is not None] + [
            r for v in doc.values() for r in rates(v)
        ]
    return [r for v in doc for r in rates(v)] if isinstance(doc, list) else []


def test_a_diff_never_reports_a_negative_rate(backwards_steps):
    """Before: ``-837.5 -> 837.5 tokens/s, ratio -1.000``."""
    result = fdprof("diff", str(backwards_steps), str(BASELINE), "--json")
    assert result.returncode == 0, result.stderr
    (warning,) = warnings(result)
    steps = _steps()
    assert f"{steps} span(s) end before they start" in warning and "'step'" in warning
    doc = json.loads(result.stdout)
    # counted in the JSON too, under its code, for a script to gate on
    (counted,) = doc["warnings"]
    assert counted["code"] == "negative_duration" and counted["count"] == steps
    assert counted["source"] == "base"
    assert rates(doc) and all(r > 0 for r in rates(doc))
    assert doc["base"]["seconds"] > 0


def test_spans_ending_before_they_start_have_no_end(backwards_steps):
    trace = load(backwards_steps)
    steps = trace.spans[trace.spans["name"] == "step"]
    assert len(steps) == _steps() and (steps["end"] == -1).all()
    assert ((trace.spans["end"] == -1) | (trace.spans["end"] >= trace.spans["start"])).all()


def test_integers_beyond_int64_are_kept_and_flagged_once(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps([_x(ts=i, args={"big": 2**70 + i, "ok": i}) for i in range(5000)]))
    result = fdprof("convert", str(path), str(tmp_path / "out.json"))
    assert result.returncode == 0, result.stderr
    (warning,) = [w for w in warnings(result) if "int64" in w]
    assert "5,000 attribute value(s) do not fit int64" in warning
    assert load(path).attr("big").tolist()[:2] == [2**70, 2**70 + 1]  # exact


def test_times_of_1970_without_a_clock_anchor_are_flagged_once(tmp_path):
    path = tmp_path / "relative.json"
    path.write_text(json.dumps([_x(ts=i * 10) for i in range(20_000)]))
    result = fdprof("convert", str(path), str(tmp_path / "out.json"))
    assert result.returncode == 0, result.stderr
    (warning,) = warnings(result)
    assert "no clock anchor" in warning and "1970" in warning


@pytest.mark.parametrize("trace", ["native", "epoch-chrome"])
def test_anchored_or_epoch_times_are_not_flagged(tmp_path, trace):
    path = BASELINE
    if trace == "epoch-chrome":
        path = tmp_path / "epoch.json"
        path.write_text(json.dumps([_x(ts=1_700_000_000_000_000 + i) for i in range(10)]))
    assert not any("clock anchor" in w for w in load(path).meta.get("warnings", []))
