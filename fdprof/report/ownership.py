"""The ownership findings (:mod:`fdprof.analysis.ownership`) as report blocks: a table by kind,
one of the findings, and a line per kind for the verdict."""

from __future__ import annotations

import pandas as pd

from fdprof.analysis.ownership import ownership_kinds
from fdprof.report.document import Table

#: rows shown before "... N more" (as the other hazard tables)
MAX_ROWS = 25
#: what each kind means, in the reader's words
MEANING = {
    "handed_out_while_held": "handed out while another request held it",
    "freed_while_held": "freed by the pool while a request held it",
    "written_while_held": "written by a new owner while an older holder was live",
    "read_without_hold": "used by a request that did not hold it",
    "read_after_reuse": "read by a request after its content was reused",
    "transfer_after_reuse": "copied by a transfer after its content was reused",
    "freed_under_transfer": "freed while a transfer of it was in flight",
    "refcount_negative": "reference count below zero",
    "refcount_leak": "reference count left with no holder at the end",
}


def _side(name: str, role: str, request: str = "", step: int = -1) -> str:
    if not name:
        return "-"
    where = ", ".join(x for x in (role, f"request {request}" if request else "",
                                   f"step {step}" if step >= 0 else "") if x)  # fmt: skip
    return f"{name} ({where})" if where else name


def kind_lines(findings: pd.DataFrame) -> list[str]:
    """One line per kind of finding and what the two sides are."""
    return [
        f"ownership: {MEANING.get(r.kind, r.kind)} ({r.kind}): "
        f"{_side(r.name_a, r.role_a)} / {_side(r.name_b, r.role_b)}: {r.findings} finding(s), "
        f"{r.blocks} block(s), {r.requests} request(s), first in step {r.first_step}"
        for r in ownership_kinds(findings).head(MAX_ROWS).itertuples()
    ]


def tables(findings: pd.DataFrame) -> list[Table]:
    """The kinds, then the findings (blocks, both sides with request and step)."""
    kinds = ownership_kinds(findings)
    by_kind = Table(
        "Ownership findings by kind",
        ["kind", "side a (role)", "side b (role)", "findings", "blocks", "requests",
         "first step"],
        [[r.kind, _side(r.name_a, r.role_a), _side(r.name_b, r.role_b), str(r.findings),
          str(r.blocks), str(r.requests), "-" if r.first_step < 0 else str(r.first_step)]
         for r in kinds.head(MAX_ROWS).itertuples()],
        _more(len(kinds)),
    )  # fmt: skip
    detail = Table(
        "Ownership findings (who held the block, what broke it)",
        ["kind", "blocks", "side a (role, request, step)", "side b (role, request, step)"],
        [[r.kind, _blocks(r.blocks), _side(r.name_a, r.role_a, r.request_a, r.step_a),
          _side(r.name_b, r.role_b, r.request_b, r.step_b)]
         for r in findings.head(MAX_ROWS).itertuples()],
        _more(len(findings)),
    )  # fmt: skip
    return [by_kind, detail]


def _more(n: int) -> list[str]:
    return [f"... {n - MAX_ROWS} more"] if n > MAX_ROWS else ([] if n else ["none"])


def _blocks(blocks: list[str]) -> str:
    shown = ", ".join(blocks[:8])
    return shown + (f" (+{len(blocks) - 8})" if len(blocks) > 8 else "")
