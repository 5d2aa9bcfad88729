"""The JSON outputs as contracts: each carries a ``schema`` name with its version.

Why: scripts and CI gates read fdprof's JSON as much as people read its reports, and a layout
that changes under them (``ab``'s ``ideal_ratio`` became ``ideal.ratio`` with nothing to say
so) breaks them silently. Each output names its schema (``"fdprof.hazards/1"``); the JSON
Schema of each is ``docs/schemas/<name>.schema.json``, checked against real outputs by the
tests. The rule (docs/schemas/README.md, CHANGELOG.md): within a version keys are only
added; removing, renaming or retyping one, or changing what it means, bumps the version here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

#: output -> the version of its layout (bumped by a breaking change, said in CHANGELOG.md)
VERSIONS = {
    "hazards": 1,
    "diff": 1,
    "ab": 1,
    "run": 1,
    "convert": 1,
    "export-otlp": 1,
    "roll": 1,
    "merge": 1,
    "error": 1,
}


def schema(output: str) -> str:
    """The schema name of ``output``, e.g. ``fdprof.hazards/1``."""
    return f"fdprof.{output}/{VERSIONS[output]}"


def stamped(output: str, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its ``schema`` first."""
    return {"schema": schema(output), **data}


def warnings_json(sources: Iterable[tuple[str | None, Iterable[Any]]]) -> list[dict[str, Any]]:
    """The ``warnings`` list of an output: each trace's warnings (:class:`TraceWarning`) as
    ``{code, count, message}``, with ``source`` (which trace) where an output reads several."""
    return [w.to_json(source) for source, warnings in sources for w in warnings]


def dumps(data: dict[str, Any]) -> str:
    """An output as JSON text, strictly JSON: a number that is not finite (a ratio of
    nothing, an empty spread's percentile) is ``null``, never the ``NaN`` a strict parser
    (jq, JavaScript's, Go's) refuses."""
    return json.dumps(_finite(data), allow_nan=False)


def _finite(value: Any) -> Any:
    if type(value) is float:
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
