"""Markdown rendering of analysis results: a heading, the summary, one pipe table each."""

from __future__ import annotations

from typing import Any

from fdprof.report.tables import Document, Table, document


def render(result: Any) -> str:
    """Any analysis result (hazards, what-if, diff) as Markdown."""
    return render_document(document(result))


def render_document(doc: Document, level: int = 1) -> str:
    h = "#" * level
    parts = [f"{h} {doc.title}", "", *(f"- {s}" for s in doc.summary)]
    for table in doc.tables:
        parts += ["", *_table(table, h + "#")]
    return "\n".join(parts) + "\n"


def _table(t: Table, h: str) -> list[str]:
    out = [f"{h} {t.title}", ""]
    if t.rows:
        out.append("| " + " | ".join(map(_escape, t.headers)) + " |")
        out.append("|" + "|".join("---" for _ in t.headers) + "|")
        out += ["| " + " | ".join(map(_escape, r)) + " |" for r in t.rows]
    out += [f"_{n}_" for n in t.notes]
    return out


def _escape(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")
