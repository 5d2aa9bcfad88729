"""Bad input of every kind gives one clear line (FdprofError; exit 2 from the CLI), never a
traceback: mutated real files of each format, and the classic broken files through the CLI."""

import gzip
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nsys_export import PUSHPOP, build_export

from fdprof.errors import FdprofError
from fdprof.trace import load, otlp, perfetto

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def samples(engine_run, tmp_path_factory):
    """One small valid file per format, written from the real run."""
    root = tmp_path_factory.mktemp("samples")
    trace = load(engine_run)
    perfetto.write(trace, root / "t.json")
    (root / "t.json.gz").write_bytes(gzip.compress((root / "t.json").read_bytes()))
    otlp.write(trace, root / "t.otlp.json")
    build_export(
        root / "t.sqlite",
        [{"start": 1, "end": 5, "eventType": PUSHPOP, "text": "r", "globalTid": 7}],
    )
    return root, engine_run


mutation = st.tuples(
    st.sampled_from(["truncate", "flip", "insert"]),
    st.floats(0, 1),
    st.binary(min_size=1, max_size=4),
)


def mutate(data: bytes, how) -> bytes:
    kind, where, junk = how
    pos = int(where * max(len(data) - 1, 0))
    if kind == "truncate":
        return data[:pos]
    if kind == "flip":
        return data[:pos] + junk[:1] + data[pos + 1 :]
    return data[:pos] + junk + data[pos:]


def must_load_or_fail_cleanly(path: Path) -> None:
    try:
        load(path)
    except FdprofError as exc:
        assert "\n" not in str(exc)


@SETTINGS
@given(name=st.sampled_from(["t.json", "t.json.gz", "t.otlp.json", "t.sqlite"]), how=mutation)
def test_mutated_files(samples, name, how):
    root, _ = samples
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(mutate((root / name).read_bytes(), how))
        must_load_or_fail_cleanly(path)


@SETTINGS
@given(how=mutation, which=st.integers(0, 2))
def test_mutated_record_files(samples, how, which):
    _, run = samples
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "run"
        shutil.copytree(run, copy)
        rec = sorted(copy.glob("*.rec"))[which]
        rec.write_bytes(mutate(rec.read_bytes(), how))
        must_load_or_fail_cleanly(copy)


def fdprof(*args):
    return subprocess.run(
        [sys.executable, "-m", "fdprof", *args], capture_output=True, text=True, timeout=120
    )


def _not_nsys(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()


BAD = {
    "truncated.json.gz": lambda p: p.write_bytes(gzip.compress(b'{"traceEvents": []}' * 50)[:30]),
    "truncated.json": lambda p: p.write_text('{"traceEvents": [{"ph": "X", "ts": 1,'),
    "types.json": lambda p: p.write_text(json.dumps({"traceEvents": [{"ph": "X", "ts": [1]}]})),
    "other.sqlite": _not_nsys,
    "noise.bin": lambda p: p.write_bytes(bytes(range(256)) * 4),
    "empty-dir": lambda p: p.mkdir(),
    "missing": lambda p: None,
}


@pytest.mark.parametrize(
    "name, command",
    [(name, "convert") for name in sorted(BAD)]
    + [("truncated.json", "export-otlp"), ("empty-dir", "export-otlp")],
)
def test_cli_bad_input_is_one_line_exit_2(tmp_path, name, command):
    path = tmp_path / name
    BAD[name](path)
    args = [command, str(path)] + (
        [str(tmp_path / "out.json")]
        if command == "convert"
        else ["--endpoint", "http://127.0.0.1:9"]
    )
    result = fdprof(*args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
