"""Terminal rendering of a report document: aligned columns, no colour, no charts."""

from __future__ import annotations

from typing import Any

from fdprof.report import document as D
from fdprof.report.tables import as_document


def render(result: Any) -> str:
    """A document, or any analysis result (hazards, what-if, diff), as terminal text."""
    doc = as_document(result)
    lines: list[str] = []
    if doc.verdict is not None:
        lines += [doc.verdict.line, *(f"  - {d}" for d in doc.verdict.details)]
    lines.append(doc.title)
    for i, block in enumerate(doc.blocks):
        if isinstance(block, D.Bullets) and i == 0:
            lines += [f"  {item}" for item in block.items]
            continue
        out = _block(block)
        if out:
            lines += ["", *out]
    return "\n".join(lines) + "\n"


def _block(block: D.Block) -> list[str]:
    return D.draw(block, _DRAWERS, "text")


def _table(t: D.Table) -> list[str]:
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


_DRAWERS = {
    D.Heading: lambda b: [b.text, "=" * len(b.text)],
    D.Paragraph: lambda b: [b.text],
    D.Bullets: lambda b: [f"  - {item}" for item in b.items],
    D.Table: _table,
    D.Chart: lambda b: [f"{b.title}: {b.summary}"] if b.summary else [],
    D.Links: lambda b: [b.title, *(f"  {text}: {href}" for text, href in b.items)],
    D.Code: lambda b: [b.title, *(f"  {line}" for line in b.text.splitlines())],
}
