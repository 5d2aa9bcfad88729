"""Helpers for the end-to-end engine tests: a real run in a temp dir, and its record files."""

import json
import os
from pathlib import Path

import pytest

from fdprof.engine.config import EngineConfig
from fdprof.engine.launcher import run_engine
from fdprof.formats import records as R
from fdprof.probe import ProbeConfig

SHM = Path("/dev/shm")


def own_shm() -> list[Path]:
    """What runs started by this test process left in /dev/shm."""
    return sorted(SHM.glob(f"fdprof-{os.getpid()}-*"))


def run(tmp_path: Path, observers=(), **overrides) -> tuple[dict, Path]:
    run_dir = tmp_path / "run"
    cfg = EngineConfig(**{"requests": 32, "seed": 1, **overrides})
    results = run_engine(cfg, ProbeConfig(run_dir=str(run_dir)), observers).to_json()
    return results, run_dir


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def read_records(path: Path) -> list[tuple[int, tuple]]:
    """``(kind, fields)`` of every record, with interned ids replaced by their text."""
    data = path.read_bytes()
    strings: dict[int, str] = {}
    out = []
    for kind, _flags, _tid, fields, _ in R.iter_records(data):
        if kind == R.Kind.STRING:
            strings[fields[0]] = fields[1]
            continue
        if kind == R.Kind.SPAN_BEGIN:
            fields = (fields[0], fields[1], strings[fields[2]], fields[4])
        elif kind in (R.Kind.ATTR_INT, R.Kind.ATTR_INTS, R.Kind.ATTR_STR):
            value = strings[fields[-1]] if kind == R.Kind.ATTR_STR else fields[-1]
            fields = (fields[0], strings[fields[1]], value)
        elif kind == R.Kind.SYNC:
            fields = (strings[fields[1]], R.SyncCode(fields[2]).name.lower(), fields[3])
        out.append((kind, fields))
    return out


@pytest.fixture(autouse=True)
def _no_leftovers():
    yield
    assert own_shm() == []
