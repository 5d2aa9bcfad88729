"""Engine runs shared by the whole test session: one run per configuration, however many tests
read it.

A real engine run (three to six processes, the worker's model on the CPU) costs seconds; many
tests only read what a run recorded or returned. They ask the session fixture ``engine_runs``
(``tests/conftest.py``) for a configuration; the first asks runs it, the others get the same
:class:`EngineRun` (or, through :meth:`EngineRuns.checked`, the same regression-suite
:class:`~fdprof.regress.Outcome`). Tests must not change a shared run's directory: one that
writes into a run (plants a file, rolls it, corrupts a record) copies it first
(:meth:`EngineRun.copy`) or runs its own (``tests/engine/conftest.py``'s ``run``).

Two tests that want the same run should ask for the same configuration: it is the
:class:`EngineConfig` that is the key (a default spelled out or left out, a mode given as its
string or as its enum, a fault's modes turned on by the fault or given: the same run).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from fdprof.engine.config import EngineConfig
from fdprof.engine.launcher import run_engine
from fdprof.probe import ProbeConfig
from fdprof.regress import Case, Outcome, Suite
from fdprof.trace import Trace, load


@dataclass
class EngineRun:
    """One finished run: its configuration, what ``run_engine`` returned (as ``fdprof run
    --json`` prints it) and the directory it recorded into (read-only by agreement)."""

    config: EngineConfig
    results: dict
    run_dir: Path

    @property
    def manifest(self) -> dict:
        return json.loads((self.run_dir / "run.json").read_text())

    def load(self) -> Trace:
        """The run's trace, loaded afresh: a test may change the tables it gets."""
        return load(self.run_dir)

    def copy(self, to: Path) -> Path:
        """The run's directory copied to ``to``, for a test that writes into it."""
        shutil.copytree(self.run_dir, to)
        return to


class EngineRuns:
    """The session's runs, by configuration; each made on first request, into ``shared``: a
    directory every pytest-xdist worker of the session sees, so a run one worker made is read by
    the others (a lock file per configuration: the first to ask makes it, the others wait for
    it). ``root`` holds what one worker alone uses (the regression suite's checked runs)."""

    def __init__(self, root: Path, shared: Path) -> None:
        self.root = root
        self.shared = shared
        self._runs: dict[tuple[EngineConfig, bool], EngineRun] = {}
        self._suite = Suite(root / "checked", log=lambda line: None)
        self._checked: dict[EngineConfig, Outcome] = {}

    def get(self, *, reference: bool = False, **settings) -> EngineRun:
        """The run of ``EngineConfig(**settings)`` (``reference``: with the reference run
        whose tokens the results compare against, as ``run_engine`` does)."""
        config = EngineConfig(**settings)
        key = (config, reference)
        if key not in self._runs:
            name = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
            run_dir, done = self.shared / f"run-{name}", self.shared / f"run-{name}.json"
            with open(self.shared / f"run-{name}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # another worker making it: wait for it
                if not done.exists():
                    results = run_engine(config, ProbeConfig(run_dir=str(run_dir)),
                                         reference=reference)  # fmt: skip
                    done.write_text(json.dumps(results.to_json()))
            self._runs[key] = EngineRun(config, json.loads(done.read_text()), run_dir)
        return self._runs[key]

    def checked(self, name: str, config: EngineConfig) -> Outcome:
        """The run of ``config`` as the regression suite checks it (:mod:`fdprof.regress`:
        its tokens against a reference run of the same seed, which runs of one seed and
        layout share; races, lifetime violations and broken locks counted); ``name`` names its
        directory and its line in a summary."""
        if config not in self._checked:
            taken = {o.case.name for o in self._checked.values()}
            unique = name if name not in taken else f"{name} {len(self._checked)}"
            case = Case(unique, config, (config.seed,))
            self._checked[config] = self._suite.run(case, config.seed)
        return self._checked[config]
