"""fdprof.probe: the one instrumentation API (see :mod:`fdprof.probe.api`)."""

from fdprof.probe.api import Key, Name, Obj, Probe, configure, get, key, name, obj, shutdown
from fdprof.probe.config import ProbeConfig

__all__ = [
    "Key",
    "Name",
    "Obj",
    "Probe",
    "ProbeConfig",
    "configure",
    "get",
    "key",
    "name",
    "obj",
    "shutdown",
]
