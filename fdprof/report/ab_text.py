"""Terminal summary of an A/B session, and the headline sentences every format shares."""

from __future__ import annotations

from fdprof.ab.session import LABELS, ABResult
from fdprof.analysis.stats import spread


def _ci(lo: float, hi: float) -> str:
    return f"[{lo:.3f}, {hi:.3f}]"


def headline(result: ABResult) -> list[str]:
    """The findings, one sentence each, in the order a reviewer needs them."""
    g, ideal = result.gain, result.ideal
    k = len(result.of("ipc"))
    verdict = (
        "the interval includes 1.0: this A/B cannot tell the modes apart"
        if g.includes_one
        else ("lockless is faster" if g.ratio > 1 else "lockless is slower")
    )
    base_h, new_h = result.hazards("ipc"), result.hazards("none")
    lines = [
        f"Throughput gain (lockless / baseline): {g.ratio:.3f}x, 95% CI {_ci(g.lo, g.hi)} "
        f"(geometric mean over {k} seed pairs, Student t); {verdict}.",
        f"Ideal gain if the baseline's swaps and lock waits overlapped compute perfectly: "
        f"{ideal.ratio:.3f}x, 95% CI {_ci(ideal.lo, ideal.hi)} (from the baseline's own spans, "
        f"over its {k} runs).",
        "Where it came from, lockless - baseline ms per step [95% CI]: "
        + ", ".join(
            f"{part} {c.delta:+.2f} [{c.lo:+.2f}, {c.hi:+.2f}]"
            for part, c in result.breakdown_change().items()
        )
        + ".",
        f"Races: baseline {base_h['races']} ({base_h['latent']} latent), "
        f"lockless {new_h['races']} ({new_h['latent']} latent); "
        f"clock alarms {base_h['clock_alarms'] + new_h['clock_alarms']}, "
        f"instrumentation gaps {base_h['gaps'] + new_h['gaps']}.",
        "Lock what-if on the baseline: "
        + (
            "dropping the lock's edges leaves every KV access ordered by the protocol itself."
            if result.what_if_newly_unordered == 0
            else f"dropping the lock's edges leaves {result.what_if_newly_unordered} pairs of "
            "KV accesses unordered: the lockless protocol must order them itself."
        ),
        f"KV integrity: {result.integrity_mismatches} mismatching blocks over all runs.",
    ]
    return lines


def render(result: ABResult) -> str:
    rows = []
    for mode in ("ipc", "none"):
        tps, steps = spread(result.tokens_per_s(mode)), spread(result.step_ms(mode))
        rows.append(
            f"  {LABELS[mode]:<16} tok/s median {tps['p50']:8.1f} "
            f"(min {tps['min']:.1f}, max {tps['max']:.1f})   step p50 "
            f"{steps['p50']:6.1f} ms  p99 {steps['p99']:6.1f} ms"
        )
    files = "  ".join(f"{k}: {v}" for k, v in result.report_files.items())
    v = result.verdict
    kinds = [f"  race kind: {line}" for line in v.kind_lines()]
    lines = [v.line, *kinds, "", *headline(result), "", *rows, "", files]
    return "\n".join(lines).rstrip() + "\n"
