"""fdprof.probe: the instrumentation API (:mod:`fdprof.probe.api`), what instrumented code
imports; the sinks behind it are the SDK's (:mod:`fdprof.probe.sdk`), which this package never
imports.

``configure``, ``configure_from_env`` and ``shutdown`` are the SDK's, documented here too for
engines fdprof does not start (README, docs/probe.md): asked for by name, they are loaded from
the SDK then, so importing the API loads no sink.
"""

from __future__ import annotations

import importlib
from typing import Any

from fdprof.probe.api import (
    NOOP,
    Key,
    Name,
    Obj,
    Probe,
    StreamProbe,
    event_object,
    get,
    key,
    name,
    obj,
    set_probe,
)
from fdprof.probe.config import ProbeConfig

#: the SDK's entry points, also reachable as ``fdprof.probe.<name>``
SDK_ENTRY_POINTS = ("configure", "configure_from_env", "shutdown")

__all__ = [
    "NOOP",
    "Key",
    "Name",
    "Obj",
    "Probe",
    "ProbeConfig",
    "StreamProbe",
    "event_object",
    "get",
    "key",
    "name",
    "obj",
    "set_probe",
    *SDK_ENTRY_POINTS,
]


def __getattr__(attr: str) -> Any:
    if attr in SDK_ENTRY_POINTS:
        return getattr(importlib.import_module("fdprof.probe.sdk"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
