"""W3C trace context as plain strings, so it can travel in queue messages between processes.

Span ids are the probe's own 64-bit ids, so a ``traceparent`` built here names a span that the
native records, the NVTX payloads and the exported OpenTelemetry spans all share.
"""

from __future__ import annotations

import hashlib


def trace_id_for(*parts: object) -> bytes:
    """A deterministic 16-byte trace id (e.g. from the run's seed and a request id)."""
    return hashlib.blake2b(repr(parts).encode(), digest_size=16).digest()


def format_traceparent(trace_id: bytes, span_id: int) -> str:
    return f"00-{trace_id.hex()}-{span_id:016x}-01"


def parse_traceparent(value: str) -> tuple[bytes, int]:
    """``(trace_id, span_id)`` of a ``traceparent``; ``ValueError`` if malformed."""
    parts = value.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        raise ValueError(f"malformed traceparent {value!r}")
    return bytes.fromhex(parts[1]), int(parts[2], 16)
