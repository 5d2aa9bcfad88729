"""The probe's SDK: the sinks behind :mod:`fdprof.probe`'s API (the native recorder in C and
its Python twin, NVTX, the OpenTelemetry export and Prometheus metrics)."""
