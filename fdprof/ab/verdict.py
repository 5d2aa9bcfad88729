"""The A/B's verdict: safe or not, faster or not, in one line, and the exit code it gives.

Why one place: the terminal, Markdown, HTML and JSON reports and the exit code must never
disagree about whether a change is safe. Safe is what ``fdprof hazards`` calls safe
(:mod:`fdprof.analysis.verdicts`), in every run of either mode, plus no integrity mismatch; a
mode whose lock did not exclude is named in the line, as ``hazards`` names it. Faster means the
gain's 95% CI lies above 1. Exit codes follow the contract (docs/analysis.md, "Verdicts and exit
codes"): 1 unsafe, 3 ``--require-gain`` not met, 0 otherwise (2, a crashed run, is raised
before there is a verdict); 1 wins over 3.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from fdprof.analysis import verdicts
from fdprof.analysis.hazards import KIND_KEYS
from fdprof.analysis.stats import RatioCI

SAFE, UNSAFE = "SAFE", "UNSAFE"
FASTER, NOT_SHOWN_FASTER, SLOWER = "FASTER", "NOT SHOWN FASTER", "SLOWER"
EXIT_OK, EXIT_UNSAFE, EXIT_GAIN_NOT_MET = 0, 1, 3
_ACCESS = {"r": "read", "w": "write"}


@dataclass(frozen=True)
class RunSafety:
    """What made one run unsafe (all zero: safe)."""

    run: str
    #: the mode's label (one of ``Verdict.labels``)
    mode: str
    races: int
    latent: int
    mismatches: int
    #: accesses outside their block's lifetime (use after free, freed while in use)
    lifetime: int = 0
    #: locks whose holds overlapped on two lanes in this run (named, not unsafe by themselves)
    untrusted_locks: tuple[str, ...] = ()
    #: ownership findings (blocks handed out or freed while held, stale reads, counts)
    ownership: int = 0

    @property
    def safe(self) -> bool:
        counts = {"races": self.races, "lifetime": self.lifetime, "ownership": self.ownership}
        return verdicts.safe(counts, self.mismatches)


@dataclass(frozen=True)
class Verdict:
    gain: RatioCI
    labels: tuple[str, str]
    runs: list[RunSafety]
    #: races of every run grouped by kind (``race_kinds`` columns) plus ``runs``: how many
    #: runs showed the kind
    kinds: pd.DataFrame = field(default_factory=pd.DataFrame)
    require_gain: float | None = None

    @property
    def safe(self) -> bool:
        return all(r.safe for r in self.runs)

    @property
    def safety(self) -> str:
        return SAFE if self.safe else UNSAFE

    @property
    def speed(self) -> str:
        if self.gain.lo > 1.0:
            return FASTER
        return SLOWER if self.gain.hi < 1.0 else NOT_SHOWN_FASTER

    @property
    def gain_met(self) -> bool | None:
        """Whether the gain's CI lower bound reaches ``require_gain`` (None: not asked)."""
        return None if self.require_gain is None else self.gain.lo >= self.require_gain

    @property
    def unsafe_runs(self) -> list[str]:
        return [r.run for r in self.runs if not r.safe]

    def broken_locks(self, label: str) -> dict[str, Any]:
        """The locks that did not exclude in the runs of mode ``label``, and in how many."""
        runs = [r for r in self.runs if r.mode == label]
        broken = [r for r in runs if r.untrusted_locks]
        locks = sorted({lock for r in broken for lock in r.untrusted_locks})
        return {"runs": len(broken), "of": len(runs), "locks": locks}

    @property
    def exit_code(self) -> int:
        if not self.safe:
            return EXIT_UNSAFE
        return EXIT_GAIN_NOT_MET if self.gain_met is False else EXIT_OK

    def _total(self, attr: str, label: str | None = None) -> int:
        return sum(getattr(r, attr) for r in self.runs if label in (None, r.mode))

    @property
    def line(self) -> str:
        """The verdict and the numbers behind it, one line."""
        g = self.gain
        races = ", ".join(
            f"{label} {self._total('races', label)} ({self._total('latent', label)} latent)"
            for label in self.labels
        )
        where = f"; unsafe runs: {', '.join(self.unsafe_runs)}" if self.unsafe_runs else ""
        lifetime = self._total("lifetime")
        if lifetime:
            where = f"; accesses outside their block's lifetime {lifetime}{where}"
        ownership = self._total("ownership")
        if ownership:
            where = f"; ownership findings {ownership}{where}"
        required = ""
        if self.require_gain is not None:
            met = "met" if self.gain_met else "NOT MET"
            required = f"; required gain {self.require_gain:g}x {met}"
        return (
            f"{self.safety}, {self.speed}: gain {g.ratio:.3f}x (95% CI {g.lo:.3f}-{g.hi:.3f}, "
            f"{self.labels[1]} / {self.labels[0]}); races {races}; integrity mismatches "
            f"{self._total('mismatches')}{where}{self._locks_clause()}; {len(self.runs)} runs"
            f"{required}"
        )

    def _locks_clause(self) -> str:
        """``; BROKEN LOCK ...`` for each mode whose lock did not exclude in some run."""
        out = ""
        for label in self.labels:
            b = self.broken_locks(label)
            if b["runs"]:
                where = f" in {b['runs']} of {b['of']} {label} runs"
                out += "; " + verdicts.broken_lock_clause(b["locks"], where)
        return out

    def kind_lines(self) -> list[str]:
        """One line per kind of race: what raced with what, in how many pairs and runs."""
        return [
            f"{k.name_a} ({k.role_a or '-'}) {_ACCESS.get(k.modes[0], k.modes[0])} / "
            f"{k.name_b} ({k.role_b or '-'}) {_ACCESS.get(k.modes[-1], k.modes[-1])}: "
            f"{k.pairs} pair(s), {k.overlapped} overlapped, in {k.runs} run(s)"
            for k in self.kinds.itertuples()
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "safety": self.safety,
            "speed": self.speed,
            "safe": self.safe,
            "gain": {"ratio": self.gain.ratio, "ci95": [self.gain.lo, self.gain.hi]},
            "require_gain": self.require_gain,
            "gain_met": self.gain_met,
            "runs": len(self.runs),
            "unsafe_runs": self.unsafe_runs,
            "races": {label: self._total("races", label) for label in self.labels},
            "latent": {label: self._total("latent", label) for label in self.labels},
            "integrity_mismatches": self._total("mismatches"),
            "lifetime_violations": self._total("lifetime"),
            "ownership_findings": self._total("ownership"),
            "broken_locks": {label: self.broken_locks(label) for label in self.labels},
            "race_kinds": self.kind_lines(),
            "exit_code": self.exit_code,
        }


def merge_kinds(per_run: list[pd.DataFrame]) -> pd.DataFrame:
    """The race kinds of several runs as one table: pairs and overlaps summed, ``runs`` the
    number of runs that showed each kind; most pairs first."""
    frames = [k.assign(runs=1) for k in per_run if not k.empty]
    if not frames:
        return pd.DataFrame(columns=[*KIND_KEYS, "pairs", "overlapped", "runs"])
    merged = pd.concat(frames).fillna({"role_a": "", "role_b": ""})
    out = merged.groupby(KIND_KEYS, as_index=False)[["pairs", "overlapped", "runs"]].sum()
    return out.sort_values("pairs", ascending=False, kind="stable").reset_index(drop=True)
