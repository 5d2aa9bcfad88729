"""A free list of KV block ids. LIFO, as real allocators tend to be: a freed block is the next
one handed out, which is also what makes a premature free show up as corruption at once."""

from __future__ import annotations


class OutOfBlocks(Exception):
    """Fewer free blocks than asked for; the caller waits or evicts."""


class BlockAllocator:
    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))
        self._used: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        """``n`` block ids, all or none."""
        if n > len(self._free):
            raise OutOfBlocks(f"asked for {n} blocks, {len(self._free)} free")
        ids = [self._free.pop() for _ in range(n)]
        self._used.update(ids)
        return ids

    def free(self, ids: list[int]) -> None:
        for b in ids:
            if b not in self._used:
                raise ValueError(f"block {b} freed twice or never allocated")
            self._used.remove(b)
            self._free.append(b)
