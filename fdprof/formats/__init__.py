"""The formats fdprof's writers and readers share: the record file layout and the run directory
(what the probe's recorder and ``run.json`` writers produce and :mod:`fdprof.trace` reads).

Neutral ground: it imports only the vocabulary and the standard numeric stack, so the probe's
SDK, the engine's supervisor and the trace readers all depend on it and never on each other.
"""
