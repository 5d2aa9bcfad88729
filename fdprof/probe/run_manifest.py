"""The name ``fdprof.probe.run_manifest.write_run_manifest`` had before the run directory's
format moved to :mod:`fdprof.formats.rundir`; kept for engines that call it (README, "Any other
engine")."""

from fdprof.formats.rundir import write_run_manifest

__all__ = ["write_run_manifest"]
