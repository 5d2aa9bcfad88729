"""What every engine process shares: its context (plain data and queues, passed to it at start)
and the entry point that sets up the probe, reports to the supervisor and turns a failure into a
message saying why."""

from __future__ import annotations

import importlib
import os
import signal
import traceback
from dataclasses import dataclass
from multiprocessing import reduction
from typing import Any

from fdprof import semconv as S
from fdprof import settings
from fdprof.engine import hosts
from fdprof.engine.config import EngineConfig
from fdprof.engine.ipc import Control, RunPaths, Stopped, stop_this_process
from fdprof.probe import ProbeConfig, sdk

#: role -> module whose ``serve(ctx)`` is the process's main loop (it returns its statistics)
ROLES = {
    S.ROLE_ENGINE: "fdprof.engine.server",
    S.ROLE_TRANSFER: "fdprof.engine.transfer",
    S.ROLE_WORKER: "fdprof.engine.worker",
}


@dataclass(frozen=True)
class GroupQueues:
    """The queues of one DP group: per TP rank, its batches (engine → worker), its swap tasks
    (engine → transfer) and its set-up channel (transfer → worker: the device KV cache); one
    result queue (every worker → engine)."""

    batch: list[Any]
    swap: list[Any]
    setup: list[Any]
    result: Any

    @staticmethod
    def make(mp, tp: int) -> GroupQueues:
        return GroupQueues(
            [mp.Queue() for _ in range(tp)],
            [mp.Queue() for _ in range(tp)],
            [mp.Queue() for _ in range(tp)],
            mp.Queue(),
        )

    def all(self) -> list[Any]:
        return [*self.batch, *self.swap, *self.setup, self.result]


class _Descriptor:
    """A descriptor of the starting process, pickled as a duplicate for the child."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self):
        return _inherited, (reduction.DupFd(self.fd),)


def _inherited(duplicate: Any) -> int:
    return duplicate.detach()


@dataclass(frozen=True)
class StdStreams:
    """This process's stdout and stderr, handed to a child however it starts (multiprocessing
    duplicates them into the child, as it does for the queues' pipes). Unpickled in the child,
    the fields are the child's own descriptors."""

    out: int = 1
    err: int = 2

    def __reduce__(self):
        return StdStreams, (_Descriptor(self.out), _Descriptor(self.err))

    def install(self) -> None:
        """Make them this process's descriptors 1 and 2."""
        for fd, target in ((self.out, 1), (self.err, 2)):
            if fd != target:
                os.dup2(fd, target)
                os.close(fd)


@dataclass(frozen=True)
class ProcessContext:
    cfg: EngineConfig
    probe_config: ProbeConfig
    rank: int
    paths: RunPaths
    queues: GroupQueues
    report_q: Any
    go: Any
    #: the supervisor's environment with the run's additions, and its stdout and stderr as
    #: they are at the start (:class:`StdStreams`): a child forked from a fork server starts
    #: with the server's, which may be older
    environ: dict[str, str]
    stdio: StdStreams
    #: the process's TP rank; -1 for the engine process, which serves every rank of its group
    tp_rank: int = -1
    #: the time namespace of its simulated host, which it joins first (:mod:`fdprof.engine.hosts`)
    clock: str | None = None

    @property
    def batch_q(self) -> Any:
        return self.queues.batch[self.tp_rank]

    @property
    def swap_q(self) -> Any:
        return self.queues.swap[self.tp_rank]

    @property
    def setup_q(self) -> Any:
        return self.queues.setup[self.tp_rank]

    @property
    def result_q(self) -> Any:
        return self.queues.result

    @property
    def control(self) -> Control:
        """The run's control block, as seen by a child of the supervisor."""
        return Control(self.paths.control, self.cfg.dp, child=True)

    def report(self, kind: str, role: str, payload: Any = None) -> None:
        self.report_q.put((kind, role, self.rank, self.tp_rank, payload))


def child_main(role: str, ctx: ProcessContext) -> None:
    """Run one engine process. Ctrl-C is the supervisor's to handle, so it is ignored here;
    SIGTERM (the supervisor's, or one sent to the whole process group) stops it cleanly."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, stop_this_process)
    settings.adopt(ctx.environ)
    ctx.stdio.install()
    try:
        if ctx.clock is not None:  # first: only a single-threaded process joins a namespace
            hosts.join(ctx.clock)
        sdk.configure(ctx.probe_config, role, ctx.rank, ctx.tp_rank)
        stats = importlib.import_module(ROLES[role]).serve(ctx)
        ctx.report("done", role, stats)
    except Stopped:
        # no one reads the queues any more: exit without waiting to flush what is still in
        # them (a full pipe would hold the process until it is killed)
        for q in (*ctx.queues.all(), ctx.report_q):
            q.cancel_join_thread()
    except BaseException as exc:
        last = traceback.extract_tb(exc.__traceback__)[-1]
        where = f" at {os.path.basename(last.filename)}:{last.lineno}"
        ctx.report("error", role, f"{type(exc).__name__}: {exc}{where}")
        ctx.report_q.close()
        ctx.report_q.join_thread()  # the message must leave before os._exit
        sdk.shutdown()
        os._exit(1)
    sdk.shutdown()
