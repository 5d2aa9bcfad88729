"""What a process's probe should do: the plain-data settings the engine passes to each process.

It crosses a spawn boundary, so it holds only plain values; it sits on the API's side so that
whoever carries it (the engine's supervisor, the CLI, the A/B) needs nothing of the SDK, whose
``configure`` reads it. Environment variables (``OTEL_*``) are read where the sink is built,
not here.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ProbeConfig:
    #: run directory; each process writes ``<role>-<dp rank>-<pid>.rec`` there. None: no recorder.
    run_dir: str | None = None
    #: emit NVTX ranges (domain ``fdprof``); a capture tool or nsys must be attached to see them
    nvtx: bool = False
    #: OTLP/HTTP endpoint for spans and metrics (None: only ``OTEL_EXPORTER_OTLP_ENDPOINT``)
    otlp_endpoint: str | None = None
    #: serve Prometheus metrics on this port (engine process of DP rank 0; +rank for others)
    metrics_port: int | None = None
    #: the address the metrics endpoint binds (loopback unless ``--metrics-host`` says otherwise)
    metrics_host: str = "127.0.0.1"
    #: resource attributes every process reports (``fd.kv_lock``, ``fd.dp_rank`` ...)
    resource: dict[str, str] = field(default_factory=dict)
