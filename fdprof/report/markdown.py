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
    if isinstance(block, D.Heading):
        return [f"## {block.text}"]
    if isinstance(block, D.Paragraph):
        return [block.text]
    if isinstance(block, D.Bullets):
        return [f"- {item}" for item in block.items]
    if isinstance(block, D.Table):
        return _table(block)
    if isinstance(block, D.Chart):
        return [f"_Chart (in the HTML report): {block.title}. {block.summary}_".rstrip()]
    if isinstance(block, D.Links):
        return [f"### {block.title}", "", *(f"- [{text}]({href})" for text, href in block.items)]
    if isinstance(block, D.Code):
        return [f"### {block.title}", "", "```", block.text, "```"]
    raise TypeError(f"no Markdown rendering for {type(block).__name__}")


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
