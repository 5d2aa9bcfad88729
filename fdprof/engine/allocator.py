"""A free list of KV block ids, as FastDeploy's allocator keeps it: a heap, so allocation takes
the smallest free id first (``heappop``) and a freed id goes back into the heap. A block freed
too early is handed out again as soon as it is the smallest free one, which under the steady
churn of a serving engine is soon."""

from __future__ import annotations

import heapq


class OutOfBlocks(Exception):
    """Fewer free blocks than asked for; the caller waits or evicts."""


class BlockAllocator:
    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks))  # sorted: already a heap
        self._used: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        """The ``n`` smallest free block ids, in increasing order; all or none."""
        if n > len(self._free):
            raise OutOfBlocks(f"asked for {n} blocks, {len(self._free)} free")
        ids = [heapq.heappop(self._free) for _ in range(n)]
        self._used.update(ids)
        return ids

    def free(self, ids: list[int]) -> None:
        for b in ids:
            if b not in self._used:
                raise ValueError(f"block {b} freed twice or never allocated")
            self._used.remove(b)
            heapq.heappush(self._free, b)
