"""``report.md`` of an A/B session: the findings, the numbers behind them, the configuration."""

from __future__ import annotations

import json

from fdprof.ab.session import LABELS, MODES, ABResult
from fdprof.analysis.breakdown import PARTS
from fdprof.analysis.stats import spread
from fdprof.report.ab_text import headline


def table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def mode_rows(result: ABResult) -> list[list[object]]:
    rows = []
    for mode in MODES:
        tps, st = spread(result.tokens_per_s(mode)), spread(result.step_ms(mode))
        rows.append(
            [
                LABELS[mode],
                f"{tps['p50']:.1f}",
                f"{tps['min']:.1f} – {tps['max']:.1f}",
                f"{st['p50']:.1f}",
                f"{st['p90']:.1f}",
                f"{st['p99']:.1f}",
                st["n"],
            ]  # fmt: skip
        )
    return rows


MODE_HEADER = ["mode", "tok/s median", "tok/s range", "step p50 ms", "p90", "p99", "steps"]


def breakdown_rows(result: ABResult) -> list[list[object]]:
    """Mean ms per step of each part in each mode, then the change with its 95% CI."""
    change = result.breakdown_change()
    rows: list[list[object]] = [
        [LABELS[mode], *(f"{result.breakdown_ms(mode)[p]:.2f}" for p in PARTS)] for mode in MODES
    ]
    rows.append(
        [
            "change [95% CI]",
            *(f"{change[p].delta:+.2f} [{change[p].lo:+.2f}, {change[p].hi:+.2f}]" for p in PARTS),
        ]
    )
    return rows  # fmt: skip


RUN_HEADER = ["run", "mode", "seed", "tok/s", "steps", "swaps out/in", "races", "latent",
              "alarms", "gaps", "integrity mismatches", "what-if unordered"]  # fmt: skip


def run_rows(result: ABResult) -> list[list[object]]:
    rows = []
    for r in result.runs:
        h, sw = r.hazard_counts, r.results["swaps"]
        rows.append(
            [
                r.index,
                LABELS[r.mode],
                r.seed,
                f"{r.tokens_per_s:.1f}",
                r.results["steps"],
                f"{sw['to_cpu']}/{sw['to_gpu']}",
                h["races"],
                h["latent"],
                h["clock_alarms"],
                h["gaps"],
                r.results["integrity"]["mismatches"],
                "" if r.what_if_newly_unordered is None else r.what_if_newly_unordered,
            ]  # fmt: skip
        )
    return rows


def render(result: ABResult) -> str:
    parts = [
        f"**{result.verdict.line}**",
        "",
        *(f"- race kind: {line}" for line in result.verdict.kind_lines()),
        "",
        "# fdprof A/B: KV-cache lock (baseline) vs lockless",
        "",
        *(f"- {line}" for line in headline(result)),
        "",
        "## Throughput and step latency",
        "",
        table(MODE_HEADER, mode_rows(result)),
        "",
        "## Where the time went (mean ms per step)",
        "",
        "Each step's wall time painted in priority order: compute (`execute_model`), lock wait, "
        "swap blocking (`issue_swap_task` not hidden by compute), idle.",
        "",
        table(["mode", *PARTS], breakdown_rows(result)),
        "",
        "## Every run",
        "",
        table(RUN_HEADER, run_rows(result)),
        "",
        "## Configuration",
        "",
        "```json",
        json.dumps(result.config, indent=2, sort_keys=True),
        "```",
        "",
    ]
    return "\n".join(parts)
