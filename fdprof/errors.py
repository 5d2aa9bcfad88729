"""The one error type users see: the CLI prints its message on one line and exits 2."""

from typing import Any


class FdprofError(Exception):
    """Bad input or configuration, said in one line a user can act on."""


#: top-level modules of the optional dependencies -> the extra that installs them
#: (pyproject.toml): the analyses run without any of them
EXTRAS = {
    "torch": "engine",
    "py_spy": "capture",
    "nvtx": "capture",
    "opentelemetry": "otel",
    "prometheus_client": "otel",
    "distributed": "dask",
    "dask": "dask",
}


def missing_extra(exc: ModuleNotFoundError) -> FdprofError | None:
    """A one-line error naming the extra to install, for an optional dependency that is not
    installed; None for any other missing module (a bug, not a configuration)."""
    root = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(root)
    if extra is None:
        return None
    return FdprofError(f"needs {root}, which is not installed: pip install 'fdprof[{extra}]'")


def short(value: Any, width: int = 60) -> str:
    """``repr(value)``, cut to ``width`` characters: an error line never carries a whole
    value, which may be megabytes (or nested past what ``repr`` can walk)."""
    if type(value) in (dict, list):
        return f"{'an object' if type(value) is dict else 'a list'} ({len(value)} items)"
    text = repr(value if type(value) is not str else value[: width + 1])
    return text if len(text) <= width else text[: width - 3] + "..."
