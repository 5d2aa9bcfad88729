"""The A/B report as a document: verdict, the gain against what was possible, throughput and
step latency, serving latency, where the time went, every run (with its Perfetto trace), and
what each mode ran with. Any renderer draws it (:mod:`fdprof.report.render`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from fdprof import semconv as S
from fdprof.ab.runs import TIMELINE_SPANS
from fdprof.ab.session import ABResult
from fdprof.analysis.breakdown import DEVICE_PARTS, PARTS, Part
from fdprof.analysis.serving import SERVING
from fdprof.analysis.stats import RatioCI, spread
from fdprof.contracts import stamped, warnings_json
from fdprof.report import document as D
from fdprof.report import python_time

#: what the per-mode table says of the steps it leaves out
EMPTY_STEPS_NOTE = (
    "Empty steps scheduled no tokens (vLLM polling pending transfers, an expert-parallel "
    "engine keeping its collectives matched): counted here, left out of step latency and of "
    'where the time went, kept in throughput (docs/analysis.md, "Steps that did work").'
)
#: the timeline's colour of the transfer's copy (``swap``): a lighter shade of the swap part's,
#: so it reads as swap work yet stands apart from ``issue_swap_task``, the blocking call that
#: paints the part (one colour for both made the two lanes one)
SWAP_COPY_COLOR = "#c8a2e8"
#: how the parts read on axes and in legends
PART_NAMES = {Part.COMPUTE: "compute", Part.LOCK_WAIT: "lock wait",
              Part.SWAP_BLOCKING: "swap (blocking)", Part.IDLE: "idle"}  # fmt: skip


def build(result: ABResult) -> D.Document:
    v = result.verdict
    bl, nl = result.labels
    blocks: list[D.Block] = [
        D.Bullets(findings(result)),
        gain_chart(result),
        D.Heading("Throughput and step latency"),
        D.Table(f"Per mode ({result.unit} from the traces; step latency ms, over the steps "
                "that scheduled tokens)",
                ["mode", f"{result.unit} median", "min - max", "step p50", "p90", "p99",
                 "steps", "empty steps (time, share)"],
                [_mode_row(result, m, lab) for m, lab in zip(result.modes, result.labels,
                                                             strict=True)],
                [EMPTY_STEPS_NOTE]),
        throughput_chart(result),
        latency_cdf(result),
        D.Heading("Serving latency per request"),
        *serving_blocks(result),
        D.Heading("Where the time went"),
        D.Paragraph("Each step's wall time painted in priority order: compute "
                    "(execute_model), lock wait, swap blocking (issue_swap_task not hidden by "
                    "compute), idle. Mean ms per step that scheduled tokens, every run weighing "
                    f"the same; the change is {nl} minus {bl} over the pairs, with its 95% CI."),
        breakdown_table(result),
        breakdown_chart(result),
        *device_blocks(result),
        *(timeline_chart(result, mode, label)
          for mode, label in zip(result.modes, result.labels, strict=True)),
        *python_time.blocks([(label, result.python_time(mode))
                             for mode, label in zip(result.modes, result.labels, strict=True)]),
        D.Heading("Every run"),
        runs_table(result),
        *perfetto_links(result),
        D.Heading("Configuration"),
        settings_table(result),
    ]  # fmt: skip
    verdict = D.Verdict(v.line, v.exit_code == 0, v.kind_lines())
    warnings = warnings_json((str(r.run_dir), r.warnings) for r in result.runs)
    data = stamped("ab", {**result.to_json(), "warnings": warnings})
    return D.Document(f"fdprof A/B: {bl} vs {nl}", blocks, verdict, data)


def _ci(c: RatioCI, digits: int = 3) -> str:
    return f"{c.ratio:.{digits}f}x (95% CI {c.lo:.{digits}f}-{c.hi:.{digits}f})"


def findings(result: ABResult) -> list[str]:
    """The findings, one sentence each, in the order a reviewer needs them."""
    g, ideal, k = result.gain, result.ideal, len(result.runs) // 2
    bl, nl = result.labels
    reading = (
        "the interval includes 1.0: this A/B cannot tell the modes apart"
        if g.includes_one
        else (f"{nl} is faster" if g.ratio > 1 else f"{nl} is slower")
    )
    hb, hn = result.hazards(result.modes[0]), result.hazards(result.modes[1])
    lines = [
        f"Throughput gain ({nl} / {bl}, {result.unit} from the traces): {_ci(g)}, geometric "
        f"mean over {k} pairs, Student t; {reading}.",
        f"Ideal gain if the {bl} runs' swaps and lock waits overlapped compute perfectly: "
        f"{_ci(ideal)} (from the {bl} runs' own spans, over {k} runs).",
        f"Where it came from, {nl} - {bl} ms per step [95% CI]: "
        + ", ".join(f"{PART_NAMES[p]} {c.delta:+.2f} [{c.lo:+.2f}, {c.hi:+.2f}]"
                    for p, c in result.breakdown_change().items()) + ".",
        f"Races: {bl} {hb['races']} ({hb['latent']} latent), {nl} {hn['races']} "
        f"({hn['latent']} latent); clock alarms {hb['clock_alarms'] + hn['clock_alarms']}, "
        f"instrumentation gaps {hb['gaps'] + hn['gaps']}.",
    ]  # fmt: skip
    for mode, label in zip(result.modes, result.labels, strict=True):
        h = result.hazards(mode)
        if h["lifetime"]:
            lines.append(f"Block lifetimes: {h['lifetime']} access(es) in the {label} runs "
                         "outside their block's lifetime (used after the allocator's free, or "
                         "freed while in use).")  # fmt: skip
        if h.get("ownership"):
            lines.append(
                f"Block ownership: {h['ownership']} finding(s) in the {label} runs (blocks "
                "handed out, freed or written while another request held them, used without a "
                "hold or after their content was reused, freed under a transfer, or reference "
                "counts below zero or leaked)."
            )
        if h["broken_locks"]:
            broken = sum(r.hazard_counts["broken_locks"] > 0 for r in result.of(mode))
            lines.append(
                f"Broken lock: in {broken} {label} run(s) two holds of one lock overlapped on "
                "different lanes (as FastDeploy's flock on one descriptor shared by threads "
                "allowed): its edges were not taken as order, so the races above are judged "
                "without it; the verdict names it and, as fdprof hazards, does not count it "
                "as unsafe by itself."
            )
    what_if = result.what_if_newly_unordered
    if what_if is not None:
        lines.append(
            f"Lock what-if on the {bl} runs: "
            + ("dropping the lock's edges leaves every KV access ordered by the protocol itself."
               if what_if == 0 else f"dropping the lock's edges leaves {what_if} pairs of KV "
               "accesses unordered: the lockless protocol must order them itself.")
        )  # fmt: skip
    if "predicted" in hb:
        lines.append(
            f"Predicted races (WCP) on the {bl} runs: {hb['predicted']}"
            + (": no other order of the lock's critical sections exposes a race."
               if hb["predicted"] == 0 else " pairs of conflicting accesses that only the "
               "lock's order in those runs ordered; another schedule could run them unordered.")
        )  # fmt: skip
    lines.append(f"KV integrity: {result.integrity_mismatches} mismatching blocks over all runs.")
    return lines


def gain_chart(result: ABResult) -> D.Chart:
    """How much faster, against what was possible: the gain and the ideal gain, with CIs."""
    g, ideal = result.gain, result.ideal
    bars = [
        ("measured gain", g, D.MODE_COLORS[1]),
        ("ideal gain", ideal, D.PART_COLORS[Part.COMPUTE]),
    ]
    series = [
        D.Series(name, [name], [c.ratio], style="markers", color=color,
                 error=([c.ratio - c.lo], [c.hi - c.ratio]),
                 hover=[f"{name}: {_ci(c)}"])
        for name, c, color in bars
    ]  # fmt: skip
    return D.Chart(
        f"Gain ({result.labels[1]} / {result.labels[0]} {result.unit}) beside the ideal gain, "
        "95% CIs; dashed: no change",
        "",
        "ratio (x, log scale)",
        series,
        log_y=True,
        reference_y=1.0,
        summary=f"gain {_ci(g)}, ideal {_ci(ideal)}",
    )


def _mode_row(result: ABResult, mode: str, label: str) -> list[str]:
    t, s = spread(result.throughput(mode)), spread(result.step_ms(mode))
    e = result.empty_steps(mode)
    share = "-" if e["share"] is None else f"{100 * e['share']:.1f}%"
    return [label, f"{t['p50']:.2f}", f"{t['min']:.2f} - {t['max']:.2f}", f"{s['p50']:.1f}",
            f"{s['p90']:.1f}", f"{s['p99']:.1f}", str(s["n"]),
            f"{e['count']} ({e['total_ms']:.1f} ms, {share})"]  # fmt: skip


def throughput_chart(result: ABResult) -> D.Chart:
    series = [
        D.Series(label, [r.index for r in result.of(mode)], result.throughput(mode),
                 style="lines+markers", color=D.MODE_COLORS[i])
        for i, (mode, label) in enumerate(zip(result.modes, result.labels, strict=True))
    ]  # fmt: skip
    return D.Chart("Throughput per run (pairs share an index)", "pair (run index)",
                   f"throughput ({result.unit})", series, integer_x=True)  # fmt: skip


def latency_cdf(result: ABResult) -> D.Chart:
    series = []
    for i, (mode, label) in enumerate(zip(result.modes, result.labels, strict=True)):
        ms = np.sort(result.step_ms(mode))
        ms = ms[ms > 0]
        frac = np.arange(1, len(ms) + 1) / max(len(ms), 1)
        series.append(D.Series(label, ms.tolist(), frac.tolist(), color=D.MODE_COLORS[i]))
    return D.Chart("Step latency CDF, steps that scheduled tokens (log time axis)",
                   "step duration (ms, log scale)",
                   "fraction of steps", series, log_x=True)  # fmt: skip


def serving_blocks(result: ABResult) -> list[D.Block]:
    """p50/p90/p99 of TTFT, TPOT and E2E per mode with CIs, and their change; a note where the
    traces do not carry what a metric needs."""
    bl, nl = result.labels
    rows, missing = [], []
    for metric, name in SERVING.items():
        per_mode = [result.serving(m, metric) for m in result.modes]
        change = result.serving_change(metric)
        if per_mode[0] is None or per_mode[1] is None or change is None:
            missing.append(name)
            continue
        for q in per_mode[0]:
            b, n, c = per_mode[0][q], per_mode[1][q], change[q]
            rows.append([f"{name} p{q}", f"{b.ratio:.2f} [{b.lo:.2f}, {b.hi:.2f}]",
                         f"{n.ratio:.2f} [{n.lo:.2f}, {n.hi:.2f}]", _ci(c)])  # fmt: skip
    notes = ["Per mode: percentiles over every request of the mode, 95% bootstrap CI over "
             f"requests. Change: {nl} / {bl}, the geometric mean over the pairs of each run's "
             "own percentile, Student t (as the gain)."]  # fmt: skip
    if missing:
        notes.append(
            f"Not measured ({', '.join(missing)}): the request spans carry no "
            "fd.first_token_ns / request.output_tokens, or there are no request spans."
        )
    return [D.Table("Serving latency (ms) [95% CI]", ["metric", bl, nl, "change"], rows, notes)]


def breakdown_table(result: ABResult) -> D.Table:
    change = result.breakdown_change()
    rows = [[label, *(f"{result.breakdown_ms(m)[p]:.2f}" for p in PARTS)]
            for m, label in zip(result.modes, result.labels, strict=True)]  # fmt: skip
    rows.append(["change [95% CI]", *(f"{change[p].delta:+.2f} [{change[p].lo:+.2f}, "
                                      f"{change[p].hi:+.2f}]" for p in PARTS)])  # fmt: skip
    return D.Table("Mean ms per step by part", ["mode", *(PART_NAMES[p] for p in PARTS)], rows)


def device_blocks(result: ABResult) -> list[D.Block]:
    """Swaps against compute on the host calls and on the device work, per mode: did the lock
    exclude device work? And the breakdown on device time, where the traces have it."""
    rows, device = [], []
    for mode, label in zip(result.modes, result.labels, strict=True):
        ov = result.swap_overlap(mode)
        rows.append([label, *("-" if ov[s] is None else f"{100 * ov[s]:.1f}%"
                              for s in ("host", "device"))])  # fmt: skip
        parts = result.device_breakdown_ms(mode)
        if parts is not None:
            device.append([label, *(f"{parts[p]:.2f}" for p in DEVICE_PARTS)])
    notes = ["host: swap calls under execute_model calls; device: copies under the compute "
             "stream's work. A lock around the host calls that shows 0% on the host and more "
             "on the device did not exclude device work."]  # fmt: skip
    blocks: list[D.Block] = [
        D.Table("Swap time overlapped with compute", ["mode", "host", "device"], rows, notes)
    ]
    if device:
        title = "Mean device ms per step by kind of work (all streams, painted in this order)"
        blocks.append(D.Table(title, ["mode", *DEVICE_PARTS], device))
    return blocks


def breakdown_chart(result: ABResult) -> D.Chart:
    series = [
        D.Series(PART_NAMES[p], list(result.labels),
                 [result.breakdown_ms(m)[p] for m in result.modes], style="bar",
                 color=D.PART_COLORS[p])
        for p in PARTS
    ]  # fmt: skip
    return D.Chart("Mean step time by part", "mode", "time per step (ms)", series, stacked=True)


def timeline_chart(result: ABResult, mode: str, label: str) -> D.Chart:
    """A window of the mode's first run: one lane per span name, coloured by the part it
    paints (execute_model compute, issue_swap_task swap blocking, lock_wait lock wait) and
    the transfer's copy (swap) in a lighter shade of the swap part's: one colour a lane."""
    run = result.of(mode)[0]
    t0, _ = run.timeline_window
    series = []
    for name, boxes in run.timeline.items():
        color = SWAP_COPY_COLOR if name == S.SWAP else D.PART_COLORS[TIMELINE_SPANS[name]]
        series.append(D.Series(
            name, [e - s for s, e in boxes], [name] * len(boxes),
            style="hbar", color=color, base=[s - t0 for s, _ in boxes],
            hover=[f"{name}: {s - t0:.1f}-{e - t0:.1f} ms ({e - s:.2f} ms)" for s, e in boxes],
        ))  # fmt: skip
    return D.Chart(f"Timeline excerpt of {run.name}", "time in window (ms)", "span", series)


def runs_table(result: ABResult) -> D.Table:
    headers = ["run", "mode", result.unit, "steps", "requests", "races", "latent", "lifetime",
               "ownership", "broken lock", "alarms", "gaps", "integrity mismatches",
               "what-if unordered"]  # fmt: skip
    rows = []
    for r in result.runs:
        h = r.hazard_counts
        rows.append([str(r.index), r.label, f"{r.throughput[result.unit]:.2f}",
                     str(len(r.breakdown)), str(len(r.requests)), str(h["races"]),
                     str(h["latent"]), str(h["lifetime"]), str(h.get("ownership", 0)),
                     str(h["broken_locks"]),
                     str(h["clock_alarms"]), str(h["gaps"]), str(r.mismatches),
                     "-" if r.what_if_newly_unordered is None
                     else str(r.what_if_newly_unordered)])  # fmt: skip
    return D.Table("Every run, in the order it ran", headers, rows)


def perfetto_links(result: ABResult) -> list[D.Block]:
    items = [(f"{r.name}: {r.perfetto.name}", _relative(r.perfetto, result.out_dir))
             for r in result.runs if r.perfetto is not None]  # fmt: skip
    if not items:
        return []
    return [D.Links("Each run's trace, for ui.perfetto.dev (Open trace file)", items)]


def _relative(path: Path, base: Path) -> str:
    return Path(os.path.relpath(path, base)).as_posix()


def settings_table(result: ABResult) -> D.Table:
    """One row per setting, one column per mode: what each mode really ran with."""
    settings = result.settings()
    keys = list(dict.fromkeys(k for s in settings.values() for k in s))
    rows = []
    for key in keys:
        values = [_setting(settings[m].get(key, "-")) for m in result.modes]
        rows.append([key, *values, "" if values[0] == values[1] else "differs"])
    return D.Table("What each mode ran with", ["setting", *result.labels, ""], rows)


def _setting(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)
