"""Terminal rendering of analysis results: aligned columns, no colour, nothing else."""

from __future__ import annotations

from typing import Any

from fdprof.report.tables import Document, Table, document


def render(result: Any) -> str:
    """Any analysis result (hazards, what-if, diff) as terminal text."""
    return render_document(document(result))


def render_document(doc: Document) -> str:
    lines = [doc.title, *(f"  {s}" for s in doc.summary)]
    for table in doc.tables:
        lines += ["", *_table(table)]
    return "\n".join(lines) + "\n"


def _table(t: Table) -> list[str]:
    out = [t.title]
    if t.rows:
        widths = [max(len(h), *(len(r[i]) for r in t.rows)) for i, h in enumerate(t.headers)]
        out.append(
            "  " + "  ".join(h.ljust(w) for h, w in zip(t.headers, widths, strict=True)).rstrip()
        )
        out += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                for r in t.rows]  # fmt: skip
    out += [f"  {n}" for n in t.notes]
    return out
