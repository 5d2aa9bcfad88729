"""The py-spy tables of a report: per span name, the innermost Python frames of the samples that
fell inside its spans, with their share of the sampled time, its 95% interval and the samples
behind it (:mod:`fdprof.analysis.python_time`). ``diff`` shows one set per trace, ``ab`` one
per mode."""

from __future__ import annotations

from typing import Any

from fdprof.report import document as D
from fdprof.report.units import duration

HEADING = "Python inside spans (py-spy)"
#: a span name with fewer expected samples gets a line, not a table: its shares say nothing
MIN_SAMPLES = 5
METHOD = (
    "py-spy's samples of each process, on the run's timebase, cut by the spans of the thread "
    "they were taken on: per span name, the innermost Python frame (and its caller) of the "
    "sampled time inside its spans. Share [95% Wilson interval] of the sampled time; samples: "
    "the expected count of py-spy's samples in it (rate x time), which the interval is "
    "computed from. A boundary is placed within about one sampling interval (10 ms at 100 "
    "Hz), so spans shorter than that carry few samples each. On stack: for a span named as a "
    "Python function, the share of its sampled time with that function on the stack (the "
    "clock mapping's check). docs/probe.md 'py-spy'."
)


def blocks(sides: list[tuple[str, list[dict[str, Any]]]]) -> list[D.Block]:
    """The heading, the method and a table per span name of each (label, summary) that has
    samples; nothing when none has (no ``--py-spy``)."""
    if not any(summary for _, summary in sides):
        return []
    out: list[D.Block] = [D.Heading(HEADING), D.Paragraph(METHOD)]
    for label, summary in sides:
        if not summary:
            out.append(D.Paragraph(f"{label}: no py-spy samples."))
        enough = [e for e in summary if e["samples"] >= MIN_SAMPLES]
        out += [table(label, entry) for entry in enough]
        few = [e for e in summary if e["samples"] < MIN_SAMPLES]
        if few:
            out.append(D.Paragraph(
                f"{label}, too few samples to say (under {MIN_SAMPLES}; spans shorter than "
                "py-spy's sampling interval): " + "; ".join(
                    f"{e['span']} ({e['role']}) {e['spans']} span(s), "
                    f"{duration(e['sampled_ns'])}, ~{e['samples']:.1f} samples" for e in few)
                + "."
            ))  # fmt: skip
    return out


def table(label: str, entry: dict[str, Any]) -> D.Table:
    check = (
        "" if entry["on_stack"] is None else f"; {entry['span']} on stack {_pct(entry['on_stack'])}"
    )
    title = (
        f"{label}: Python inside {entry['span']} ({entry['role']}), {entry['spans']} span(s), "
        f"{duration(entry['sampled_ns'])} sampled, ~{entry['samples']:.0f} samples{check}"
    )
    rows = [
        [f["frame"], f["caller"], f"{_pct(f['share'])} [{_pct(lo)}, {_pct(hi)}]",
         f"{f['samples']:.1f}", duration(f["ns"])]
        for f in entry["frames"]
        for lo, hi in [f["ci95"]]
    ]  # fmt: skip
    other = entry["other"]
    if other["frames"]:
        rows.append([f"other ({other['frames']} frames)", "", _pct(other["share"]), "", ""])
    return D.Table(title, ["innermost frame", "called from", "share [95% CI]", "samples",
                           "time"], rows)  # fmt: skip


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"
