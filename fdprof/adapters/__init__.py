"""Adapters: fdprof's probe inside engines it did not write (vLLM: :mod:`fdprof.adapters.vllm`)."""
