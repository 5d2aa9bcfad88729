"""Bounds on what a trace file may make a reader allocate, whatever the file claims.

Traces come from other people's machines. A reader's memory and time must follow the input's
real content, so a file that only *says* it is large (a gzip bomb, a sparse file, a count or an
id edited to 2^31, 10^6 declared processes, a value nested 900 deep) is refused with one line
before it costs more than the limit. The defaults are far above what real traces need
(docs/trace.md gives the numbers measured); each is lifted by an environment variable or the
command-line flag of the same name (``--max-event-size 256M``; 0: no limit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace

from fdprof import settings
from fdprof.errors import FdprofError


@dataclass(frozen=True)
class Limits:
    #: characters of one JSON value a reader decodes at once (a Chrome event, an OTLP request
    #: line, run.json): 64 MiB of text becomes some 10x that in Python objects
    event_size: int = 64 << 20
    #: bytes a gzip file may inflate to, as a multiple of the compressed bytes read so far
    #: (beyond 16 MiB; real traces: ~20x)
    inflate_ratio: float = 100.0
    #: nesting of a value a reader keeps (args, attributes, run.json); real traces: 3-4
    depth: int = 64
    #: processes in one trace (declared in run.json, or seen in its events)
    processes: int = 1 << 14
    #: distinct attribute keys in one trace (a column each); real traces: tens
    attr_keys: int = 10_000


#: field -> (environment variable, command-line flag, what it bounds)
SETTINGS = {
    "event_size": (settings.MAX_EVENT_SIZE, "--max-event-size",
                   "characters of one JSON event, OTLP request or run.json (default 64M)"),
    "inflate_ratio": (settings.MAX_INFLATE_RATIO, "--max-inflate-ratio",
                      "how many times the compressed bytes read a gzip trace may inflate to, "
                      "beyond 16 MiB (default 100)"),
    "depth": (settings.MAX_DEPTH, "--max-depth",
              "nesting of an attribute value or run.json (default 64)"),
    "processes": (settings.MAX_PROCESSES, "--max-processes",
                  "processes in one trace (default 16384)"),
    "attr_keys": (settings.MAX_ATTR_KEYS, "--max-attr-keys",
                  "distinct attribute keys in one trace (default 10000)"),
}  # fmt: skip

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_overrides: dict[str, float] = {}


def parse(name: str, text: str) -> float:
    """A limit's value from text: a number, sizes with K/M/G suffixes; 0 means no limit."""
    match = _SIZE.match(text)
    if match is None:
        env, flag, _ = SETTINGS[name]
        raise FdprofError(f"{flag} / {env}: {text!r} is not a number (e.g. 64M, 100, 0 = none)")
    value = float(match[1]) * _UNITS[match[2].lower()]
    return value if name == "inflate_ratio" else int(value)


def override(**values: float) -> None:
    """Set limits for this process (the command-line flags), over the environment's."""
    _overrides.update(values)


def current() -> Limits:
    """The limits in force: defaults, then the environment, then :func:`override`."""
    given = {}
    for f in fields(Limits):
        env = settings.text(SETTINGS[f.name][0])
        if env is not None:
            given[f.name] = parse(f.name, env)
    return replace(Limits(), **(given | _overrides))


def exceeded(what: str, name: str) -> FdprofError:
    """The one line saying a limit was hit, and how to lift it."""
    env, flag, _ = SETTINGS[name]
    limit = getattr(current(), name)
    return FdprofError(f"{what} (limit {_show(name, limit)}; raise it with {flag} or {env}, "
                       "0 for none)")  # fmt: skip


def check(count: int, name: str, what: str) -> None:
    """Raise :func:`exceeded` when ``count`` is over limit ``name`` (0: no limit)."""
    limit = getattr(current(), name)
    if limit and count > limit:
        raise exceeded(f"{what}: {count:,}" if count < 1 << 62 else what, name)


def _show(name: str, value: float) -> str:
    if name == "event_size":
        return f"{value / (1 << 20):g} MiB"
    if name == "inflate_ratio":
        return f"{value:g}x"
    return f"{value:,}"


def nesting(value: object, limit: int) -> int | None:
    """The depth of ``value`` if it nests deeper than ``limit`` containers, else None;
    iterative, so no value can exhaust the stack."""
    if not limit:
        return None
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if type(item) is dict else item if type(item) is list else ()
        for child in children:
            if type(child) in (dict, list):
                if depth + 1 > limit:
                    return depth + 1
                stack.append((child, depth + 1))
    return None


def check_depth(value: object, what: str) -> None:
    """Raise when ``value`` nests deeper than the depth limit."""
    depth = nesting(value, current().depth)
    if depth is not None:
        raise exceeded(f"{what} nests more than {depth - 1} levels deep", "depth")
