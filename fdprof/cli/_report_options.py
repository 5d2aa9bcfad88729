"""``--format`` and ``--out`` of every command that reports: defined once, rendered once."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fdprof.report.document import Document
from fdprof.report.render import FORMATS, format_of, render, write


def add_report_arguments(p: argparse.ArgumentParser, out_file: bool = True) -> None:
    """``--format`` (and ``--json``, its old spelling); with ``out_file``, ``--out FILE``."""
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="what is printed on stdout: text (default), md, html or json",
    )
    p.add_argument(
        "--json",
        dest="format",
        action="store_const",
        const="json",
        help="print one JSON object (same as --format json); errors too, on exit 2",
    )
    if out_file:
        p.add_argument(
            "--out",
            type=Path,
            default=None,
            help="also write the report to this file, in the format its suffix names "
            "(.md, .html, .json; else --format)",
        )


def emit(args: argparse.Namespace, doc: Document, warnings: list | None = None) -> None:
    """Print ``doc`` in ``--format``; write it to ``--out`` when given (a file). ``warnings``
    (:func:`fdprof.contracts.warnings_json`): the readers' warnings, in its JSON form."""
    if warnings is not None:
        doc = doc.with_data({"warnings": warnings})
    out = getattr(args, "out", None)
    if isinstance(out, Path) and not out.is_dir():
        write(doc, out, format_of(out, args.format))
    sys.stdout.write(render(doc, args.format))
