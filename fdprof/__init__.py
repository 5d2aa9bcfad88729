"""fdprof: profiling and observability for LLM-serving engines."""

__version__ = "0.1.0"
