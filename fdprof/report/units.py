"""Durations in the unit that fits, for people: ``412 ns``, ``7.25 µs``, ``75.4 ms``, ``1.23 s``.

Why: traces span kernels of a few microseconds and runs of minutes; one fixed unit prints
either ``0.000 ms`` or seven digits. Three significant digits in the largest unit that keeps
the number at 1 or above. JSON output keeps integer nanoseconds.
"""

from __future__ import annotations

import math

#: (nanoseconds per unit, unit), smallest first
UNITS = ((1, "ns"), (1e3, "µs"), (1e6, "ms"), (1e9, "s"))


def duration(ns: float | None) -> str:
    """``ns`` nanoseconds as ``<3 significant digits> <unit>``; ``-`` for no value."""
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "-"
    scale, unit = next((u for u in reversed(UNITS) if abs(ns) >= u[0]), UNITS[0])
    value = ns / scale
    text = f"{value:.0f}" if unit == "ns" else f"{value:.3g}"
    if abs(float(text)) >= 1000 and unit != "s":  # rounds up into the next unit
        return duration(math.copysign(1000 * scale, ns))
    return f"{value:,.0f} s" if abs(value) >= 1000 else f"{text} {unit}"


def signed_duration(ns: float | None) -> str:
    """As :func:`duration`, with a sign: a change."""
    text = duration(ns)
    return text if text in ("-", "0 ns") or text.startswith("-") else f"+{text}"
