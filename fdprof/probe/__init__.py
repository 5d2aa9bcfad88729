"""fdprof.probe: the one instrumentation API (see :mod:`fdprof.probe.api`)."""

from fdprof.probe.api import (
    RUN_DIR_ENV,
    Key,
    Name,
    Obj,
    Probe,
    configure,
    configure_from_env,
    get,
    key,
    name,
    obj,
    shutdown,
)
from fdprof.probe.config import ProbeConfig

__all__ = [
    "RUN_DIR_ENV",
    "Key",
    "Name",
    "Obj",
    "Probe",
    "ProbeConfig",
    "configure",
    "configure_from_env",
    "get",
    "key",
    "name",
    "obj",
    "shutdown",
]
