"""The two sides of an A/B: what one run of a mode is. Any shell command, or the built-in engine.

Why one protocol: the session (:mod:`fdprof.ab.session`) runs, times and judges every run the
same way whatever produced it; a mode only has to leave a trace in the run directory it is
given. A command gets it through ``FDPROF_RUN_DIR`` (``fdprof.probe.sdk.configure_from_env`` in
each of its processes) and its pair index through ``FDPROF_AB_PAIR`` (to seed its workload);
the built-in engine is run in this process by :func:`fdprof.engine.launcher.run_engine`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from fdprof import files, interrupts, settings
from fdprof.capture.plan import CapturePlan
from fdprof.errors import FdprofError
from fdprof.formats.rundir import MANIFEST, write_run_manifest

#: lines of a failed command's stderr quoted in the error
_TAIL_LINES = 1
#: seconds an interrupted command's processes get to clean up before SIGKILL
STOP_GRACE_S = 15.0


class Arm(Protocol):
    """One mode of an A/B. ``key`` names its run directories, ``label`` its rows."""

    key: str
    label: str
    #: run the lock what-if on this mode's runs (the lock A/B's baseline)
    what_if: bool

    def settings(self) -> dict[str, Any]:
        """What this mode runs with, for the report's configuration block."""
        ...

    def run(self, run_dir: Path, pair: int) -> None:
        """One run recording into ``run_dir``; raises :class:`FdprofError` if it fails."""
        ...


@dataclass(frozen=True)
class CommandArm:
    """A shell command, run once per pair with its own run directory in the environment."""

    key: str
    label: str
    command: str
    what_if: bool = False

    def settings(self) -> dict[str, Any]:
        return {"command": self.command}

    def run(self, run_dir: Path, pair: int) -> None:
        files.make_dir(run_dir)
        env = settings.child_env({settings.RUN_DIR: str(run_dir), settings.AB_PAIR: str(pair)})
        with files.open_new(run_dir / "stdout.log") as out, \
                files.open_new(run_dir / "stderr.log") as err:  # fmt: skip
            try:
                code = run_command(self.command, env, out, err)
            except KeyboardInterrupt as exc:
                if not (run_dir / MANIFEST).exists():
                    write_run_manifest(run_dir, status="interrupted", config=self.settings(),
                                       error=interrupts.describe(exc))  # fmt: skip
                raise
        if code != 0:
            raise FdprofError(f"the command exited with code {code}{_stderr_tail(run_dir)}")
        if not any(run_dir.glob("*.rec")) and not (run_dir / MANIFEST).exists():
            raise FdprofError(
                f"the command left no trace in {run_dir} (does every process call "
                f"fdprof.probe.sdk.configure_from_env and read {settings.RUN_DIR}?)"
            )
        if not (run_dir / MANIFEST).exists():
            write_run_manifest(run_dir, status="ok", config=self.settings())


def run_command(command: str, env: dict[str, str], stdout, stderr) -> int:
    """Run a shell command in a session of its own and wait for it; its exit status. On Ctrl-C
    or SIGTERM the command's whole process group (the shell and whatever it started) gets the
    same signal, :data:`STOP_GRACE_S` to end, then SIGKILL; the interrupt is raised again."""
    proc = subprocess.Popen(command, shell=True, env=env, stdout=stdout, stderr=stderr,
                            stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        return proc.wait()
    except KeyboardInterrupt as exc:
        with interrupts.shielded():
            sig = signal.SIGTERM if isinstance(exc, interrupts.Terminated) else signal.SIGINT
            _stop_group(proc, sig)
        raise


def _stop_group(proc: subprocess.Popen, sig: int) -> None:
    """``sig`` to ``proc``'s process group; SIGKILL to what is left of it after the grace."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    deadline = time.monotonic() + STOP_GRACE_S
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=STOP_GRACE_S)
    while time.monotonic() < deadline and _group_alive(proc.pid):
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stderr_tail(run_dir: Path) -> str:
    lines = (run_dir / "stderr.log").read_text(errors="replace").strip().splitlines()
    return f": {' / '.join(lines[-_TAIL_LINES:])}" if lines else ""


@dataclass(frozen=True)
class EngineArm:
    """The built-in engine with one KV-lock mode; pair ``i`` runs seed ``config.seed + i``."""

    key: str
    label: str
    config: Any  # fdprof.engine.config.EngineConfig (the engine is imported only when it runs)
    capture: CapturePlan
    what_if: bool = False

    def settings(self) -> dict[str, Any]:
        from fdprof.engine.config import fault_modes
        from fdprof.engine.workloads import sized_for_workload

        cfg = sized_for_workload(self.config)
        return {
            **cfg.to_dict(),
            "seed": f"{cfg.seed} + pair index",
            "fault_delay_ms": cfg.fault_delay_s * 1000,  # the delay in effect, not the flag
            **({"fault_modes": fault_modes(cfg)} if cfg.fault else {}),  # what the fault turned on
        }

    def run(self, run_dir: Path, pair: int) -> None:
        from fdprof.engine.launcher import run_engine

        cfg = replace(self.config, seed=self.config.seed + pair)
        probe_config = self.capture.probe_config(run_dir, cfg.kv_lock)
        observers, env = self.capture.observers_and_env(probe_config)
        run_engine(cfg, probe_config, observers, env=env)
        self.capture.finish(run_dir)
