"""The formats fdprof's writers and readers share: the record file layout and the run directory
(what the probe's recorder and ``run.json`` writers produce and :mod:`fdprof.trace` reads).

Neutral ground: it imports only the vocabulary, fdprof's file utilities and numpy, so the
probe's SDK, the engine's supervisor and the trace readers all depend on it and never on each
other. ``records`` is one process's record file; ``tail`` follows one while its process
writes it (the live OTLP export and the Parquet roller both read runs as they go); ``rundir``
the run directory around them (``run.json``); ``otel`` the rules that make OpenTelemetry spans
of fdprof's spans, which the live export (the SDK) and the replay and OTLP writer (the trace
model) follow alike.
"""
