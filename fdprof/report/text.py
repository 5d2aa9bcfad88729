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
    if isinstance(block, D.Heading):
        return [block.text, "=" * len(block.text)]
    if isinstance(block, D.Paragraph):
        return [block.text]
    if isinstance(block, D.Bullets):
        return [f"  - {item}" for item in block.items]
    if isinstance(block, D.Table):
        return _table(block)
    if isinstance(block, D.Chart):
        return [f"{block.title}: {block.summary}"] if block.summary else []
    if isinstance(block, D.Links):
        return [block.title, *(f"  {text}: {href}" for text, href in block.items)]
    if isinstance(block, D.Code):
        return [block.title, *(f"  {line}" for line in block.text.splitlines())]
    raise TypeError(f"no text rendering for {type(block).__name__}")


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
