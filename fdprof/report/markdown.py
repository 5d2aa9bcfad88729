"""Markdown rendering of a report document: pipe tables; charts are named, drawn in HTML."""

from __future__ import annotations

from typing import Any

from fdprof.report import document as D
from fdprof.report.tables import as_document


def render(result: Any) -> str:
    """A document, or any analysis result (hazards, what-if, diff), as Markdown."""
    doc = as_document(result)
    parts: list[str] = []
    if doc.verdict is not None:
        parts += [f"**{_escape(doc.verdict.line)}**", ""]
        if doc.verdict.details:
            parts += [*(f"- {_escape(d)}" for d in doc.verdict.details), ""]
    parts.append(f"# {doc.title}")
    for block in doc.blocks:
        parts += ["", *_block(block)]
    return "\n".join(parts) + "\n"


def _block(block: D.Block) -> list[str]:
    return D.draw(block, _DRAWERS, "Markdown")


def _table(t: D.Table) -> list[str]:
    out = [f"### {t.title}", ""]
    if t.rows:
        out.append("| " + " | ".join(map(_escape, t.headers)) + " |")
        out.append("|" + "|".join("---" for _ in t.headers) + "|")
        out += ["| " + " | ".join(map(_escape, r)) + " |" for r in t.rows]
    out += [f"_{n}_" for n in t.notes]
    return out


def _escape(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


_DRAWERS = {
    D.Heading: lambda b: [f"## {b.text}"],
    D.Paragraph: lambda b: [b.text],
    D.Bullets: lambda b: [f"- {item}" for item in b.items],
    D.Table: _table,
    D.Chart: lambda b: [f"_Chart (in the HTML report): {b.title}. {b.summary}_".rstrip()],
    D.Links: lambda b: [f"### {b.title}", "", *(f"- [{t}]({href})" for t, href in b.items)],
    D.Code: lambda b: [f"### {b.title}", "", "```", b.text, "```"],
}
