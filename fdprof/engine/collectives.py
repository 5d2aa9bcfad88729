"""The workers' collectives (``torch.distributed``: gloo on the CPU, NCCL on CUDA), each one
recorded as sync edges so happens-before sees the order it makes between workers.

A collective is a barrier for what it exchanges: after it, every member has seen what every
other member did before it. With pairwise sync edges that is, for collective number ``n`` of
group ``g``: member ``r`` releases ``collective:g/rank<r>`` with seq ``n`` on entry, and on exit
acquires ``collective:g/rank<s>`` with seq ``n`` for every other member ``s``. The objects are
global (not scoped by DP group or process) and keyed, so the pairs match exactly; every member
numbers its collectives alike because collectives are called in the same order by all.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import torch
import torch.distributed as dist

from fdprof import probe
from fdprof import semconv as S

TIMEOUT = datetime.timedelta(seconds=120)


class Collective:
    """One process's membership of the (only) ``torch.distributed`` group of its processes."""

    def __init__(self, name: str, rank: int, size: int, store: Path, device: str) -> None:
        self.name, self.rank, self.size = name, rank, size
        self.device = device
        backend = "nccl" if device == S.DEVICE_CUDA else "gloo"
        dist.init_process_group(
            backend,
            store=dist.FileStore(str(store), size),
            rank=rank,
            world_size=size,
            timeout=TIMEOUT,
        )
        self._objs = [probe.obj(S.collective_obj(name, r)) for r in range(size)]
        self._count = 0

    def _enter(self) -> int:
        self._count += 1
        probe.get().release(self._objs[self.rank], self._count)
        return self._count

    def _exit(self, n: int) -> None:
        p = probe.get()
        for r, o in enumerate(self._objs):
            if r != self.rank:
                p.acquire(o, n)

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        """The sum over the members (``t`` summed in place, and returned)."""
        n = self._enter()
        dist.all_reduce(t)
        self._exit(n)
        return t

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        """Every member's ``t`` (same shape everywhere), stacked in rank order."""
        n = self._enter()
        out = [torch.empty_like(t) for _ in range(self.size)]
        dist.all_gather(out, t)
        self._exit(n)
        return torch.stack(out)

    def all_to_all(
        self, t: torch.Tensor, send_counts: list[int], recv_counts: list[int]
    ) -> torch.Tensor:
        """Rows ``t`` sent in rank order (``send_counts[r]`` rows to member ``r``); the rows
        received, in rank order (``recv_counts[r]`` from member ``r``)."""
        n = self._enter()
        out = t.new_empty((sum(recv_counts), *t.shape[1:]))
        dist.all_to_all_single(out, t.contiguous(), recv_counts, send_counts)
        self._exit(n)
        return out

    def close(self) -> None:
        dist.destroy_process_group()
