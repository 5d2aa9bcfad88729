"""The probe's SDK: what sits behind :mod:`fdprof.probe`'s API. In an engine process, the sinks
(the native recorder, in C with a Python twin, and NVTX) and the one call that sets them up,
:func:`configure`; beside a run, the OpenTelemetry export and Prometheus metrics built from the
record files (:mod:`fdprof.probe.sdk.otel_export`).

The SDK depends on the API, never the reverse: instrumented code imports :mod:`fdprof.probe`,
and the one place of a program that configures its processes imports this (fdprof's engine:
``fdprof/engine/process.py``; the vLLM plugin: ``fdprof/adapters/vllm/__init__.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

from fdprof import files, settings
from fdprof import semconv as S
from fdprof.formats.rundir import record_file_name
from fdprof.probe import api
from fdprof.probe.api import Probe
from fdprof.probe.config import ProbeConfig
from fdprof.probe.sdk.recorder import open_recorder
from fdprof.probe.sdk.recording import RecordingProbe


def configure(config: ProbeConfig, role: str, dp_rank: int = 0, tp_rank: int = -1) -> Probe:
    """Set this process's probe from ``config``; call once at process start (after spawn or
    fork). ``dp_rank`` and ``tp_rank`` (-1: unknown) go to the record file's header: the
    analyses scope KV pools by them (equal block ids of two TP ranks are different memory).
    With no sink asked for (or NVTX asked with no tool attached), the API's no-op probe."""
    recorder = None
    if config.run_dir is not None:
        path = Path(config.run_dir) / record_file_name(role, dp_rank, os.getpid())
        recorder = open_recorder(path, role, dp_rank, tp_rank)
    nvtx_sink = None
    if config.nvtx:
        from fdprof.probe.sdk.nvtx_sink import open_nvtx_sink

        nvtx_sink = open_nvtx_sink()
    probe = api.NOOP if recorder is nvtx_sink is None else RecordingProbe(recorder, nvtx_sink)
    api.set_probe(probe)
    return probe


def configure_from_env(role: str, dp_rank: int = 0, tp_rank: int = 0) -> Probe:
    """This process's probe for an engine fdprof did not start itself (vLLM, ``fdprof ab
    --baseline CMD``): with ``FDPROF_RUN_DIR`` set, the native recorder writes
    ``<role>-<dp_rank>-<pid>.rec`` there (the directory is made if missing, mode 0700);
    otherwise the no-op probe. ``tp_rank`` goes to the probe's resource attributes."""
    run_dir = settings.run_dir()
    if not run_dir:
        return api.NOOP
    files.make_dir(run_dir)
    resource = {S.DP_RANK: str(dp_rank), S.TP_RANK: str(tp_rank)}
    return configure(ProbeConfig(run_dir=run_dir, resource=resource), role, dp_rank, tp_rank)


def shutdown() -> None:
    """Close this process's probe (its record file trimmed to what was written); the process
    has none afterwards, as before :func:`configure`."""
    api.set_probe(None).close()
