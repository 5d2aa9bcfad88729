"""The prefix cache: full KV blocks keyed by a chained hash of their tokens, on the device pool,
the host pool, or both. Pure bookkeeping: the cache manager moves the data and holds the mutex."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


def block_hashes(tokens: list[int], block_size: int, limit: int | None = None) -> list[bytes]:
    """Chained hashes of the full blocks of ``tokens`` (at most ``limit`` blocks): equal hashes
    mean equal whole prefixes, not just equal blocks."""
    n = len(tokens) // block_size
    if limit is not None:
        n = min(n, limit)
    out: list[bytes] = []
    prev = b""
    for i in range(n):
        chunk = tokens[i * block_size : (i + 1) * block_size]
        prev = hashlib.blake2b(prev + repr(chunk).encode(), digest_size=12).digest()
        out.append(prev)
    return out


@dataclass
class Entry:
    """One cached block. ``fp`` is the fingerprint of its content when it was written."""

    hash: bytes
    fp: int
    gpu: int | None = None
    cpu: int | None = None
    #: requests using the device copy
    ref: int = 0
    last_used: int = 0
    swapping_out: bool = False
    swapping_in: bool = False
    #: while swapping in: the device block it goes to, and the swap task
    loading_to: int | None = None
    loading_task: int | None = None


class PrefixCache:
    def __init__(self) -> None:
        self._entries: dict[bytes, Entry] = {}
        self._clock = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, h: bytes) -> Entry | None:
        return self._entries.get(h)

    def match(self, hashes: list[bytes]) -> list[Entry]:
        """The longest run of leading blocks present on either pool."""
        out = []
        for h in hashes:
            e = self._entries.get(h)
            if e is None or (e.gpu is None and e.cpu is None):
                break
            out.append(e)
        return out

    def insert(self, h: bytes, gpu_block: int, fp: int) -> Entry | None:
        """Cache a freshly filled device block (one reference: its writer). None if ``h`` is
        already cached: the caller keeps its block private."""
        if h in self._entries:
            return None
        e = Entry(h, fp, gpu=gpu_block, ref=1)
        self.touch(e)
        self._entries[h] = e
        return e

    def touch(self, e: Entry) -> None:
        self._clock += 1
        e.last_used = self._clock

    def evictable(self, n: int) -> list[Entry]:
        """Up to ``n`` least recently used device blocks no request holds."""
        cands = [
            e
            for e in self._entries.values()
            if e.gpu is not None and e.ref == 0 and not e.swapping_out and not e.swapping_in
        ]
        cands.sort(key=lambda e: e.last_used)
        return cands[:n]

    def host_victims(self, n: int) -> list[Entry]:
        """Up to ``n`` least recently used host copies that no swap is using."""
        cands = [
            e
            for e in self._entries.values()
            if e.cpu is not None and not e.swapping_in and not e.swapping_out
        ]
        cands.sort(key=lambda e: e.last_used)
        return cands[:n]

    def drop_if_empty(self, e: Entry) -> None:
        if e.gpu is None and e.cpu is None:
            self._entries.pop(e.hash, None)
