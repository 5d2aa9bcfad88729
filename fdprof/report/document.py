"""The report model: what every command's report says, apart from how a format lays it out.

Why: ``diff``, ``hazards`` and ``ab`` each build one :class:`Document` (a verdict, headings,
paragraphs, tables, charts, links, code); one renderer per format (:mod:`fdprof.report.render`)
draws any document, so the terminal, Markdown, HTML and JSON reports show the same numbers and
a new format or a new command touches one place. Blocks hold display strings and plain numbers,
never DataFrames or plotting-library objects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fdprof.analysis.breakdown import Part

#: one colour per part of a step's time, in every chart and timeline alike
PART_COLORS = {
    Part.COMPUTE: "#2a9d8f",
    Part.LOCK_WAIT: "#d62828",
    Part.SWAP_BLOCKING: "#7b2cbf",
    Part.IDLE: "#adb5bd",
}
#: the two modes of an A/B (baseline, candidate), distinct from the parts' colours
MODE_COLORS = ("#1d4ed8", "#f59e0b")


@dataclass(frozen=True)
class Verdict:
    """The one line a reader (or a CI gate) needs first; ``ok`` False draws it as an alarm,
    ``details`` (e.g. the kinds of race found) right under it."""

    line: str
    ok: bool
    details: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Heading:
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: list[str]


@dataclass(frozen=True)
class Table:
    title: str
    headers: Sequence[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Series:
    """One trace of a chart. ``style``: ``lines``, ``markers``, ``lines+markers``, ``bar``
    (vertical, stacked when the chart says so) or ``hbar`` (a timeline's boxes: ``y`` the lane,
    ``x`` the length, ``base`` the start). ``error``: (minus, plus) of each ``y``."""

    name: str
    x: Sequence[Any]
    y: Sequence[Any]
    style: str = "lines"
    color: str | None = None
    error: tuple[Sequence[float], Sequence[float]] | None = None
    base: Sequence[float] | None = None
    hover: Sequence[str] | None = None


@dataclass(frozen=True)
class Chart:
    """A chart as data: axes carry their unit in the title; ``log_x`` for long-tailed
    durations, ``log_y`` for ratios, ``integer_x`` for run numbers; ``reference_y`` draws a
    line (e.g. 1.0x)."""

    title: str
    x_title: str
    y_title: str
    series: list[Series]
    log_x: bool = False
    log_y: bool = False
    integer_x: bool = False
    stacked: bool = False
    reference_y: float | None = None
    #: what a format without charts says instead (text, Markdown)
    summary: str = ""


@dataclass(frozen=True)
class Links:
    """Files beside the report, as (text, relative href)."""

    title: str
    items: list[tuple[str, str]]


@dataclass(frozen=True)
class Code:
    title: str
    text: str


Block = Heading | Paragraph | Bullets | Table | Chart | Links | Code


@dataclass(frozen=True)
class Document:
    title: str
    blocks: list[Block]
    verdict: Verdict | None = None
    #: the result as JSON (what ``--format json`` prints); None: no JSON form
    data: dict[str, Any] | None = None

    @property
    def tables(self) -> list[Table]:
        return [b for b in self.blocks if isinstance(b, Table)]

    @property
    def charts(self) -> list[Chart]:
        return [b for b in self.blocks if isinstance(b, Chart)]

    def with_data(self, extra: dict[str, Any]) -> Document:
        """This document with ``extra`` keys added to its JSON form (which it must have)."""
        if self.data is None:
            raise TypeError(f"{self.title} has no JSON form")
        return replace(self, data={**self.data, **extra})

    def then(self, other: Document, data: dict[str, Any] | None = None) -> Document:
        """This document followed by ``other`` under its own heading (e.g. a what-if after the
        hazards it changes); this one's verdict leads."""
        blocks = [*self.blocks, Heading(other.title)]
        if other.verdict is not None:
            blocks.append(Bullets([other.verdict.line]))
        return Document(self.title, [*blocks, *other.blocks], self.verdict, data or self.data)


def draw(block: Block, drawers: dict[type, Callable[[Any], Any]], fmt: str) -> Any:
    """``block`` through the drawer a renderer has for its type (each renderer: one table)."""
    drawer = drawers.get(type(block))
    if drawer is None:
        raise TypeError(f"no {fmt} rendering for {type(block).__name__}")
    return drawer(block)
