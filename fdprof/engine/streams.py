"""The asynchronous engine's device plumbing (``--device-async``, docs/engine.md): each process's
device, and the two events a DP group's TP rank shares between its worker and its transfer
process.

- ``event:compute/dp<r>/tp<t>``: recorded on the worker's compute stream after each forward
  pass, at the step's sequence number; the transfer's copy stream waits on it before it reads
  blocks that step writes (a store), and the worker's host before it reads the step's tokens.
- ``event:swap_in/dp<r>/tp<t>``: recorded on the transfer's swap-in stream after each swap-in
  copy, at the task id; the worker's compute stream waits on it before a forward reads the
  swapped-in blocks, and the transfer's host before it signals completion.

Both are :class:`fdprof.engine.device.SharedEvent`: generations in a slot file the supervisor makes
(``RunPaths.event``); on CUDA each is also an interprocess torch event, made by the transfer
process and handed to the worker with the device pool.
"""

from __future__ import annotations

from typing import Any

from fdprof import semconv as S
from fdprof.engine.device import Device, SharedEvent, interprocess_event
from fdprof.engine.process import ProcessContext

#: the shared events' kinds, in the order the set-up message carries them
KINDS = (S.COMPUTE_DONE_EVENT, S.SWAP_IN_EVENT)


def ipc_events(device: str) -> dict[str, Any] | None:
    """The interprocess events the transfer process makes on CUDA (None on the CPU)."""
    if device != S.DEVICE_CUDA:
        return None
    return {kind: interprocess_event() for kind in KINDS}


def shared_events(dev: Device, ctx: ProcessContext, ipc: dict[str, Any] | None) -> dict:
    """This process's handles of its rank's two shared events, by kind."""
    out: dict[str, SharedEvent] = {}
    for kind in KINDS:
        name = S.engine_event(kind, ctx.rank, ctx.tp_rank)
        slot = ctx.paths.event(kind, ctx.rank, ctx.tp_rank)
        out[kind] = dev.shared_event(name, slot, None if ipc is None else ipc[kind])
    return out
