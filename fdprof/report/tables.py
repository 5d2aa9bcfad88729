"""The documents of the hazards, what-if and diff results: titled tables of display strings.

Why: every renderer must show the same numbers the same way; they differ only in layout.
Analyses return DataFrames and dataclasses; this module decides which columns a reader sees
and how values read, as a :class:`~fdprof.report.document.Document`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from fdprof.analysis import verdicts
from fdprof.analysis.diff import DiffResult
from fdprof.analysis.hazards import HazardReport
from fdprof.analysis.serving import SERVING
from fdprof.analysis.stats import RatioCI, spread
from fdprof.analysis.whatif import WhatIf
from fdprof.contracts import stamped
from fdprof.report import ownership, python_time
from fdprof.report.document import Bullets, Document, Table, Verdict
from fdprof.report.units import duration, signed_duration

#: rows shown per table before "... N more"
MAX_ROWS = 25
#: what the diff's throughput counts: not ``fdprof run``'s generated tokens per wall second
THROUGHPUT_BASIS = {
    "tokens/s": "prefill + decode tokens per second inside steps",
    "steps/s": "per second inside steps; no token counts in the trace",
}
#: what the diff says of the steps it leaves out of step latency and the per-step breakdown
EMPTY_STEPS = (
    "Empty steps scheduled no tokens (batch.tokens 0, or no count and batch.size 0): vLLM "
    "polling pending transfers, an expert-parallel engine keeping its collectives matched. "
    "Their number follows timing, not work: they count in throughput (time inside steps), not "
    "in step latency, per-token time or where the time moved."
)
#: characters of a span name shown; C++ kernel and autograd names in third-party traces run
#: to thousands. The JSON output keeps them whole.
MAX_NAME = 80


def as_document(result: Any) -> Document:
    """``result`` itself when it is a document, else :func:`document` of it."""
    return result if isinstance(result, Document) else document(result)


def document(result: Any, origin: int = 0) -> Document:
    """The document of any result an analysis returns. ``origin``: the trace's first time
    (ns, :attr:`fdprof.trace.model.Trace.origin`), which times in tables count from."""
    if isinstance(result, HazardReport):
        return hazards_document(result, origin)
    if isinstance(result, WhatIf):
        return what_if_document(result)
    if isinstance(result, DiffResult):
        return diff_document(result)
    raise TypeError(f"no tables for {type(result).__name__}")


def hazards_document(report: HazardReport, origin: int = 0) -> Document:
    c = report.counts
    if not report.accesses:
        verdict = "NOTHING CHECKED: no KV-block accesses (kv.* span attributes) in this trace"
    elif report.clean:
        verdict = "clean: no unordered conflicting accesses"
    else:
        verdict = f"HAZARDS FOUND: {c['races']} race(s), {c['latent']} of them latent"
        if c["lifetime"]:
            verdict += f"; {c['lifetime']} access(es) outside their block's lifetime"
        if c["ownership"]:
            verdict += f"; {c['ownership']} ownership finding(s)"
    if report.accesses and report.untrusted_locks:
        verdict += "; " + verdicts.broken_lock_clause(
            report.untrusted_locks, f" ({c['broken_locks']} pair(s) of holds at once)"
        )
    summary = [
        f"{report.accesses:,} KV-block access(es) on {len(report.lanes)} lane(s) checked",
        f"{c['races']} race(s): {c['overlaps']} overlapped in time this run, {c['latent']} latent"
        f" (unordered, not overlapping this time); {c['clock_alarms']} clock alarm(s); "
        f"{c['gaps']} instrumentation gap(s)",
    ]
    if c["lifetime"]:
        summary.append(
            f"{c['lifetime']} access(es) outside their block's lifetime (the allocator's frees "
            "checked against every access): used after the free, or freed while in use"
        )
    if not report.ownership_checked:
        summary.append("block ownership not checked (the Dask path does not run it yet)")
    if c["ownership"]:
        summary.append(
            f"{c['ownership']} ownership finding(s): blocks handed out, freed or written while "
            "another request held them, used without a hold or after their content was "
            "reused, freed under a transfer, or reference counts below zero or leaked"
        )
    if report.predicted is not None:
        summary.append(
            f"{len(report.predicted)} predicted race(s) (weak causal precedence): conflicting "
            "accesses that only the lock's order in this run ordered; another schedule of the "
            "same critical sections could run them unordered (not counted in the exit status)"
        )
    if report.dropped_objects:
        summary.append("edges of " + ", ".join(report.dropped_objects) + " dropped")
    if report.untrusted_locks:
        summary.append(
            f"BROKEN LOCK: {c['broken_locks']} pair(s) of holds of "
            f"{', '.join(report.untrusted_locks)} overlapped on different lanes; the lock does "
            "not exclude, so its edges were not taken as order and the races above were counted "
            'without them (by itself not unsafe: docs/analysis.md, "Verdicts and exit codes")'
        )
    ok = report.clean and report.accesses > 0
    return Document("fdprof hazards", [
        Bullets(summary),
        _broken_locks_table(report.broken_locks, origin),
        _kinds_table(report.kinds),
        _frame_table("Accesses outside their block's lifetime", report.lifetime,
                     ["kind", "pool", "block", "blocks", "name_a", "lane_a", "name_b", "lane_b"]),
        *(ownership.tables(report.ownership) if c["ownership"] else []),
        _pairs_table("Races (unordered conflicting accesses)", report.races, with_overlap=True),
        *([] if report.predicted is None else [_pairs_table(
            "Predicted races (WCP: ordered this run only by the lock's chance order)",
            report.predicted)]),
        _pairs_table("Clock alarms (ordered, yet overlapping in time)", report.alarms),
        _frame_table("Instrumentation gaps (not races)", report.gaps,
                     ["kind", "lane", "obj", "seq", "detail"]),
    ], Verdict(verdict, ok, _kind_lines(report.kinds) + ownership.kind_lines(report.ownership)),
        stamped("hazards", report.to_json()
                | {"verdict": {"line": verdict, "safe": ok}}))  # fmt: skip


def _broken_locks_table(broken: pd.DataFrame, origin: int) -> Table:
    """Each pair of overlapping holds, its times into the run (as a timeline reads them), and
    how long the two held the lock at once."""
    headers = ["lock", "lane a", "a held (s into the run)", "lane b", "b held (s into the run)",
               "held together"]  # fmt: skip
    rows = [
        [_cell(r.obj), _cell(r.lane_a), _held(r.start_a, r.end_a, origin), _cell(r.lane_b),
         _held(r.start_b, r.end_b, origin), duration(min(r.end_a, r.end_b) - r.start_b)]
        for r in broken.head(MAX_ROWS).itertuples()
    ]  # fmt: skip
    notes = ["times count from the trace's first event; the JSON keeps epoch nanoseconds"]
    return Table("Broken locks (two holds at once, on different lanes)", headers, rows,
                 _more(len(broken)) + (notes if len(broken) else []))  # fmt: skip


def _held(start: int, end: int, origin: int) -> str:
    return f"{(start - origin) / 1e9:.3f} - {(end - origin) / 1e9:.3f}"


def what_if_document(w: WhatIf) -> Document:
    n = len(w.newly_unordered)
    verdict = (
        f"dropping the edges of {', '.join(w.dropped)}: "
        + ("no access becomes unordered; the protocol orders them by itself" if w.safe else
           f"{n} pair(s) of spans become unordered; the lockless protocol must order them")
    )  # fmt: skip
    summary = [f"with the lock: {w.with_lock.counts['races']} race(s); "
               f"without: {w.without_lock.counts['races']}"]  # fmt: skip
    return Document("fdprof hazards --what-if drop-lock", [
        Bullets(summary),
        _pairs_table("Unordered once the lock is gone", w.newly_unordered, with_overlap=True),
    ], Verdict(verdict, w.safe), w.to_json())  # fmt: skip


#: the longest trace label a diff table repeats in its column headers; longer ones (and two
#: equal ones) are "base" and "new" there, named once above the tables
MAX_COLUMN_LABEL = 16


def column_labels(base: str, new: str) -> tuple[str, str]:
    """How a diff's columns name the two traces: by their labels when short and different,
    else ``base`` and ``new`` (a long name repeated in every column header hides the numbers,
    and two equal ones tell nothing apart)."""
    if base != new and max(len(base), len(new)) <= MAX_COLUMN_LABEL:
        return base, new
    return "base", "new"


def diff_document(d: DiffResult) -> Document:
    b, n = d.base, d.new
    bl, nl = column_labels(b.label, n.label)
    unit = d.throughput_unit
    rate_b = b.tokens_per_s if unit == "tokens/s" else b.steps_per_s
    rate_n = n.tokens_per_s if unit == "tokens/s" else n.steps_per_s
    eb, en = b.empty_steps, n.empty_steps
    summary = [
        f"throughput: {_num(rate_b)} -> {_num(rate_n)} {unit} ({THROUGHPUT_BASIS[unit]}), "
        f"{ratio_text(d.throughput)}",
        f"step latency p50 (steps that scheduled tokens): {ms(b.step_latency['p50'])} -> "
        f"{ms(n.step_latency['p50'])}, {ratio_text(d.step_latency)}",
        *(
            []
            if d.per_token is None
            else [
                f"per-token time p50 (step time per scheduled token): "
                f"{ms(b.per_token_ns['p50'])} -> {ms(n.per_token_ns['p50'])}, "
                f"{ratio_text(d.per_token)}"
            ]
        ),
        f"empty steps (scheduled no tokens; not in step latency): {_empty(eb)} -> {_empty(en)}",
        f"swap time overlapped with execute_model: {_share_ci(b.swap_overlap)} -> "
        f"{_share_ci(n.swap_overlap)}",
        *(
            [
                f"on the device (stream work): copies overlapped with compute "
                f"{_share_ci(b.device_swap_overlap)} -> {_share_ci(n.device_swap_overlap)}"
            ]
            if b.device_swap_overlap is not None or n.device_swap_overlap is not None
            else []
        ),
        *(f"caution: {c}" for c in d.cautions),
    ]
    if (bl, nl) != (b.label, n.label):
        summary.insert(0, f"base: {_name(b.label)}; new: {_name(n.label)}")
    lat = Table("Step latency (steps that scheduled tokens)",
                ["run", "steps", "p50", "p90", "p99", "mean", "empty steps", "empty time"], [
        [label, str(len(s.working)),
         *(ms(s.step_latency[k]) for k in ("p50", "p90", "p99", "mean")),
         str(s.empty_steps["count"]), ms(s.empty_steps["total_ns"])]
        for s, label in ((b, bl), (n, nl))
    ], [EMPTY_STEPS])  # fmt: skip
    moved = _moved_table("Where the time moved (per step that scheduled tokens: mean, "
                         "p50/p90/p99)", d.moved, bl, nl)  # fmt: skip
    gpu = [] if d.device_moved.empty else [_moved_table(
        "GPU time per step (compute kernels, NCCL, memcpy, memset, idle: mean, p50/p90/p99)",
        d.device_moved, bl, nl)]  # fmt: skip
    return Document("fdprof diff", [
        Bullets(summary), lat, _serving_table(d, bl, nl), moved, *gpu,
        _side_table("Time by span name", d.by_name, "name", bl, nl),
        _side_table("Time by role", d.by_role, "role", bl, nl),
        _frame_table(f"Locks in {bl}", _ms_cols(b.locks),
                     ["name", "role", "count", "total", "p50", "p90", "p99"]),
        _frame_table(f"Locks in {nl}", _ms_cols(n.locks),
                     ["name", "role", "count", "total", "p50", "p90", "p99"]),
        *python_time.blocks([(bl, b.python_time), (nl, n.python_time)]),
    ], data=stamped("diff", d.to_json()))  # fmt: skip


def _empty(e: dict[str, Any]) -> str:
    return f"{e['count']} ({ms(e['total_ns'])}, {pct(e['share'])} of step time)"


def _serving_table(d: DiffResult, bl: str, nl: str) -> Table:
    """Per request: p50/p90/p99 of each serving metric in both runs, and the median's ratio."""
    rows, missing = [], []
    for metric, name in SERVING.items():
        if metric not in d.serving:
            missing.append(name)
            continue
        b, n = (spread(s.requests[metric].dropna()) for s in (d.base, d.new))
        rows.append([name, *(f"{b[q]:.2f}" for q in ("p50", "p90", "p99")),
                     *(f"{n[q]:.2f}" for q in ("p50", "p90", "p99")),
                     ratio_text(d.serving[metric])])  # fmt: skip
    notes = [f"ms per request; ratio: {nl} / {bl} median, requests resampled (95% CI)."]
    if missing:
        notes.append(
            f"Not measured ({', '.join(missing)}): the request spans of a run carry no "
            "fd.first_token_ns / request.output_tokens, or there are no request spans."
        )
    headers = ["metric", f"{bl} p50", "p90", "p99", f"{nl} p50", "p90", "p99", "median ratio"]
    return Table("Serving latency per request (ms)", headers, rows, notes)


def _moved_table(title: str, moved: pd.DataFrame, bl: str, nl: str) -> Table:
    return Table(
        title,
        ["part", bl, f"{bl} p50/p90/p99", nl, f"{nl} p50/p90/p99", "change [95% CI]", "share"],
        [[r.part, ms(r.base_mean), _pcts(r, "base"), ms(r.new_mean), _pcts(r, "new"),
          f"{_signed(r.delta_mean)} [{_signed(r.delta_lo)}, {_signed(r.delta_hi)}]",
          f"{pct(r.base_share)} -> {pct(r.new_share)}"]
         for r in moved.itertuples()],
    )  # fmt: skip


def ratio_text(r: RatioCI) -> str:
    text = f"ratio {r.ratio:.3f} [95% CI {r.lo:.3f}, {r.hi:.3f}]"
    return text + (" (the CI includes 1.0: no detectable change)" if r.includes_one else "")


def ms(ns: float | None) -> str:
    """A duration in the unit that fits (:mod:`fdprof.report.units`)."""
    return "-" if ns is None or pd.isna(ns) else duration(float(ns))


def pct(x: float | None) -> str:
    return "-" if x is None or pd.isna(x) else f"{100 * x:.1f}%"


def _share_ci(r: RatioCI | None) -> str:
    return "-" if r is None else f"{pct(r.ratio)} [95% CI {pct(r.lo)}, {pct(r.hi)}]"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def _signed(ns: float) -> str:
    return "-" if ns is None or pd.isna(ns) else signed_duration(float(ns))


def _pcts(row: Any, side: str) -> str:
    return "/".join(ms(getattr(row, f"{side}_{p}")) for p in ("p50", "p90", "p99"))


def _ms_cols(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    for col in ("total", "p50", "p90", "p99"):
        if col in out.columns:
            out[col] = out[col].map(ms)
    return out


def _pairs_table(title: str, df: pd.DataFrame, with_overlap: bool = False) -> Table:
    headers = ["span a (lane, role, step)", "span b (lane, role, step)", "blocks", "modes",
               "layers a / b"] + (["overlapped"] if with_overlap else [])  # fmt: skip
    rows = [
        [f"{_name(r.name_a)} ({r.lane_a}, {r.role_a or '-'}, {_step(r.step_a)})",
         f"{_name(r.name_b)} ({r.lane_b}, {r.role_b or '-'}, {_step(r.step_b)})",
         _blocks(r.blocks), r.modes, f"{r.layers_a} / {r.layers_b}"]
        + (["yes" if r.overlapped else "no (latent)"] if with_overlap else [])
        for r in df.head(MAX_ROWS).itertuples()
    ]  # fmt: skip
    return Table(title, headers, rows, _more(len(df)))


_ACCESS = {"r": "read", "w": "write"}


def _kinds_table(kinds: pd.DataFrame) -> Table:
    headers = ["span a (role)", "span b (role)", "a / b access", "pairs", "overlapped",
               "spans a", "spans b", "blocks"]  # fmt: skip
    rows = [
        [f"{_name(r.name_a)} ({r.role_a or '-'})", f"{_name(r.name_b)} ({r.role_b or '-'})",
         " / ".join(_ACCESS.get(m, m) for m in r.modes), _cell(r.pairs), _cell(r.overlapped),
         _cell(r.spans_a), _cell(r.spans_b), _cell(r.blocks)]
        for r in kinds.head(MAX_ROWS).itertuples()
    ]  # fmt: skip
    return Table("Races by kind (what raced with what)", headers, rows, _more(len(kinds)))


def _kind_lines(kinds: pd.DataFrame) -> list[str]:
    """The race kinds in a line each, for the verdict: what raced with what, how often."""
    return [
        f"{_name(r.name_a)} ({r.role_a or '-'}) / {_name(r.name_b)} ({r.role_b or '-'}), "
        f"{' / '.join(_ACCESS.get(m, m) for m in r.modes)}: {_cell(r.pairs)} pair(s)"
        for r in kinds.head(MAX_ROWS).itertuples()
    ]


def _frame_table(title: str, df: pd.DataFrame, cols: list[str]) -> Table:
    rows = [[_cell(v) for v in row] for row in df[cols].head(MAX_ROWS).itertuples(index=False)]
    return Table(title, cols, rows, _more(len(df)))


def _side_table(title: str, df: pd.DataFrame, key: str, bl: str, nl: str) -> Table:
    headers = [key, f"{bl} n", f"{bl} total", f"{bl} p50/p90/p99", f"{nl} n", f"{nl} total",
               f"{nl} p50/p90/p99", "change"]  # fmt: skip
    rows = []
    for r in df.head(MAX_ROWS).to_dict("records"):
        rows.append([
            _name(str(r[key])) or "-", _cell(r["count_base"]), ms(r["total_base"]),
            "/".join(ms(r[f"{p}_base"]) for p in ("p50", "p90", "p99")),
            _cell(r["count_new"]), ms(r["total_new"]),
            "/".join(ms(r[f"{p}_new"]) for p in ("p50", "p90", "p99")),
            _signed(r["delta_total"]),
        ])  # fmt: skip
    return Table(title, headers, rows, _more(len(df)))


def _more(n: int) -> list[str]:
    return [f"... {n - MAX_ROWS} more"] if n > MAX_ROWS else ([] if n else ["none"])


def _blocks(blocks: list[str]) -> str:
    shown = ", ".join(blocks[:8])
    return shown + (f" (+{len(blocks) - 8})" if len(blocks) > 8 else "")


def _name(name: str) -> str:
    """At most ``MAX_NAME`` characters: the head (namespace, function) and the tail (what tells
    overloads and template instances apart), an ellipsis between."""
    if len(name) <= MAX_NAME:
        return name
    tail = MAX_NAME // 3
    return f"{name[: MAX_NAME - tail - 1]}…{name[-tail:]}"


def _step(step: int) -> str:
    return "-" if step < 0 else str(step)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else f"{v:.3f}"
    return "-" if v is None or v is pd.NA else _name(str(v))
