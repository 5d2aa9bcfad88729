"""The device plumbing of the asynchronous engine (``--device-async``) and of Cache Manager V1
(``--cache-manager v1``), docs/engine.md: the events a DP group's TP rank shares between its
worker and its transfer process.

- ``event:compute/dp<r>/tp<t>``: recorded on the worker's compute stream after each forward
  pass, at the step's sequence number; the transfer's copy stream waits on it before it reads
  blocks that step writes (a store), and the worker's host before it reads the step's tokens.
- ``event:swap_in/dp<r>/tp<t>``: recorded on the transfer's swap-in stream after each swap-in
  copy, at the task id; the worker's compute stream waits on it before a forward reads the
  swapped-in blocks, and the transfer's host before it signals completion.

- Cache Manager V1: ``event:compute/...`` is recorded by the worker's host after each step
  (its forward ran on the host), and waited for by the transfer's input stream before a load
  into blocks a step still in flight uses and by its output stream before a store of blocks a
  step fills; ``event:swap_in.layer<l>/dp<r>/tp<t>``, one per layer, is recorded on the
  transfer's input stream after a load's copy of layer ``l`` (at the load's task id) and waited
  for by the worker just before layer ``l``'s attention.

All are :class:`fdprof.engine.device.SharedEvent`: generations in a slot file the supervisor makes
(``RunPaths.event``); on CUDA each is also an interprocess torch event, made by the transfer
process and handed to the worker with the device pool.
"""

from __future__ import annotations

from typing import Any

from fdprof import semconv as S
from fdprof.engine.device import Device, SharedEvent, interprocess_event
from fdprof.engine.process import ProcessContext


def ipc_events(device: str, kinds: tuple[str, ...]) -> dict[str, Any] | None:
    """The interprocess events the transfer process makes on CUDA (None on the CPU, or when
    there are none)."""
    if device != S.DEVICE_CUDA or not kinds:
        return None
    return {kind: interprocess_event() for kind in kinds}


def shared_events(dev: Device, ctx: ProcessContext, ipc: dict[str, Any] | None) -> dict:
    """This process's handles of its rank's shared events, by kind."""
    out: dict[str, SharedEvent] = {}
    for kind in ctx.cfg.event_kinds:
        name = S.engine_event(kind, ctx.rank, ctx.tp_rank)
        slot = ctx.paths.event(kind, ctx.rank, ctx.tp_rank)
        out[kind] = dev.shared_event(name, slot, None if ipc is None else ipc[kind])
    return out
