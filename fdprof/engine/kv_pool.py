"""Where the KV pools live. On CPU the device pool is a file in /dev/shm that the transfer
process creates and the worker maps (the supervisor unlinks it at the end); on CUDA it is
device memory the transfer process allocates and shares with the worker over CUDA IPC."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from fdprof import semconv as S
from fdprof.engine.config import EngineConfig


def map_pool(path: Path, cfg: EngineConfig, num_blocks: int) -> torch.Tensor:
    """The pool in ``path`` as a float32 tensor (MAP_SHARED: writes are seen by every mapper)."""
    shape = cfg.kv_shape(num_blocks)
    t = torch.from_file(str(path), shared=True, size=math.prod(shape), dtype=torch.float32)
    return t.view(shape)


def host_pool(cfg: EngineConfig, device: str, extra: int = 0) -> torch.Tensor:
    """The transfer process's host pool (and ``extra`` blocks after it: the asynchronous
    engine's staging buffer); pinned when the device pool is on a GPU."""
    t = torch.zeros(cfg.kv_shape(cfg.cpu_blocks + extra), dtype=torch.float32)
    return t.pin_memory() if device == S.DEVICE_CUDA else t


def resolve_device(device: str) -> str:
    if device == "auto":
        return S.DEVICE_CUDA if torch.cuda.is_available() else S.DEVICE_CPU
    return device
