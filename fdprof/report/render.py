"""One entry to the renderers: a document in a named format, and the format a path asks for."""

from __future__ import annotations

from pathlib import Path

from fdprof.contracts import dumps
from fdprof.errors import FdprofError
from fdprof.report import html, markdown, text
from fdprof.report.document import Document

FORMATS = ("text", "md", "html", "json")
_SUFFIXES = {".md": "md", ".markdown": "md", ".html": "html", ".htm": "html", ".json": "json"}


def render(doc: Document, fmt: str) -> str:
    if fmt == "json":
        if doc.data is None:
            raise FdprofError(f"{doc.title} has no JSON form")
        return dumps(doc.data) + "\n"
    return {"text": text.render, "md": markdown.render, "html": html.render}[fmt](doc)


def format_of(path: Path, default: str = "text") -> str:
    """The format a file name asks for by its suffix (.md, .html, .json), else ``default``."""
    return _SUFFIXES.get(path.suffix.lower(), default)


def write(doc: Document, path: Path, fmt: str | None = None) -> None:
    """``doc`` into ``path``, in ``fmt`` or the format its suffix names (else text)."""
    body = render(doc, fmt or format_of(path))
    try:
        path.write_text(body)
    except OSError as exc:
        raise FdprofError(f"cannot write {path}: {exc.strerror}") from None
