"""What a run writes on a shared machine: its records and manifests only the owner's (0600 in a
0700 directory, or FDPROF_FILE_MODE), no symbolic link planted in the output directory
followed, and two runs given the same --out at once: the second refuses in one line (exit 2)
and the first's records stay."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
import sys
import time
from pathlib import Path

import pytest
from test_signals import TOY, serving
from test_signals import fdprof as fdprof_process

from fdprof import files, settings
from fdprof.errors import FdprofError
from fdprof.formats.rundir import write_run_manifest
from fdprof.probe.sdk.recorder import open_recorder
from tests.cli import fdprof


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.fixture
def bait(tmp_path):
    """A file a planted link points at: nothing fdprof does may change it."""
    path = tmp_path / "bait"
    path.write_text("precious\n")
    os.chmod(path, 0o644)
    return path


def assert_untouched(bait: Path) -> None:
    assert bait.read_text() == "precious\n" and mode(bait) == 0o644


# -- the pieces --------------------------------------------------------------------------


def test_create_new_replaces_a_planted_link_instead_of_following_it(tmp_path, bait):
    link = tmp_path / "engine-0-1.rec"
    link.symlink_to(bait)
    os.close(files.create_new(link))
    assert not link.is_symlink() and link.stat().st_size == 0 and mode(link) == 0o600
    assert_untouched(bait)


@pytest.mark.parametrize("recorder", ["c", "python"])
def test_a_record_file_planted_as_a_link_is_not_followed(tmp_path, bait, monkeypatch, recorder):
    if recorder == "python":
        monkeypatch.setenv(settings.RECORDER, "python")
    path = tmp_path / f"worker-0-{os.getpid()}.rec"
    path.symlink_to(bait)
    rec = open_recorder(path, "worker")
    rec.close()
    assert not path.is_symlink() and mode(path) == 0o600
    assert_untouched(bait)


def test_write_atomic_replaces_a_planted_link(tmp_path, bait):
    (tmp_path / "run.json").symlink_to(bait)
    write_run_manifest(tmp_path, status="ok", processes=[])
    assert not (tmp_path / "run.json").is_symlink()
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "ok"
    assert mode(tmp_path / "run.json") == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    assert_untouched(bait)


def test_a_lock_file_planted_as_a_link_is_refused(tmp_path, bait):
    (tmp_path / files.LOCK_NAME).symlink_to(bait)
    with pytest.raises(OSError), files.DirectoryLock(tmp_path):
        pass
    assert_untouched(bait)


MODES = [(None, 0o600, 0o700), ("0640", 0o640, 0o750), ("644", 0o644, 0o755)]


@pytest.mark.parametrize(("value", "file_mode", "dir_mode"), MODES)
def test_the_file_mode_setting(monkeypatch, value, file_mode, dir_mode):
    if value is not None:
        monkeypatch.setenv(settings.FILE_MODE, value)
    assert settings.file_mode() == file_mode and settings.dir_mode() == dir_mode


@pytest.mark.parametrize("value", ["rw", "0400", "0700", "1777", "-1"])
def test_a_bad_file_mode_is_one_line(monkeypatch, value):
    monkeypatch.setenv(settings.FILE_MODE, value)
    with pytest.raises(FdprofError, match=settings.FILE_MODE):
        settings.file_mode()


def _hold(directory: str, held, release) -> None:
    with files.DirectoryLock(directory):
        held.set()
        release.wait(60)


def test_a_locked_directory_is_refused_by_another_process(tmp_path):
    mp = multiprocessing.get_context("spawn")
    held, release = mp.Event(), mp.Event()
    holder = mp.Process(target=_hold, args=(str(tmp_path), held, release))
    holder.start()
    try:
        assert held.wait(60)
        with pytest.raises(
            FdprofError, match=rf"in use by another fdprof run \(pid {holder.pid}\)"
        ):
            files.DirectoryLock(tmp_path).__enter__()
    finally:
        release.set()
        holder.join(60)
    assert holder.exitcode == 0
    assert not (tmp_path / files.LOCK_NAME).exists()  # removed by its holder
    with files.DirectoryLock(tmp_path):  # free again
        pass


# -- whole runs --------------------------------------------------------------------------


@pytest.mark.slow
def test_a_run_is_private_and_follows_no_planted_link(tmp_path, bait):
    out = tmp_path / "run"
    out.mkdir()
    os.chmod(out, 0o700)
    for name in ("run.json", "tokens.json"):
        (out / name).symlink_to(bait)
    refused = fdprof("run", "--out", out, "--requests", 4, "--workload", "no-swap")
    assert refused.returncode == 2 and "is not empty" in refused.stderr  # without --force
    assert_untouched(bait)
    result = fdprof("run", "--out", out, "--requests", 4, "--workload", "no-swap", "--force")
    assert result.returncode == 0, result.stderr
    assert_untouched(bait)
    written = [p for p in out.iterdir()]
    assert {p.name for p in written} >= {"run.json", "tokens.json"}
    assert len([p for p in written if p.suffix == ".rec"]) == 3
    for path in written:
        assert not path.is_symlink() and mode(path) == 0o600, path
    assert not (out / files.LOCK_NAME).exists()


@pytest.mark.slow
def test_a_new_run_directory_is_0700_or_as_fdprof_file_mode_says(tmp_path):
    out = tmp_path / "deep" / "run"
    result = fdprof("run", "--out", out, "--requests", 4, "--workload", "no-swap",
                        env={settings.FILE_MODE: "0640"})  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert mode(out) == 0o750
    assert {mode(p) for p in out.iterdir()} == {0o640}


@pytest.mark.slow
def test_a_second_run_on_the_same_out_refuses_and_leaves_the_first_alone(tmp_path):
    out = tmp_path / "run"
    first = fdprof_process("run", "--out", out, "--requests", 2000)
    try:
        serving(first, out)
        records = sorted(out.glob("*.rec"))
        second = fdprof("run", "--out", out, "--requests", 4)
        assert second.returncode == 2
        (line,) = second.stderr.strip().splitlines()
        assert line == (f"fdprof run: {out} is in use by another fdprof run (pid {first.pid}): "
                        "wait for it to end, or give another --out")  # fmt: skip
        assert sorted(out.glob("*.rec")) == records and first.poll() is None
        assert json.loads((out / "run.json").read_text())["status"] == "running"
    finally:
        first.terminate()
        first.communicate(timeout=120)
    assert first.returncode == 143
    assert sorted(out.glob("*.rec")) == records


@pytest.mark.slow
def test_a_second_ab_on_the_same_out_refuses(tmp_path):
    out = tmp_path / "ab"
    slow = f"{sys.executable} {TOY} --tokens 100000 --step-ms 5"
    first = fdprof_process("ab", "--baseline", slow, "--candidate", slow, "--runs", 2, "--out", out)
    try:
        run_dir = out / "runs" / "baseline-0"
        while not list(run_dir.glob("*.rec")):
            assert first.poll() is None
            time.sleep(0.05)
        second = fdprof("ab", "--baseline", "true", "--candidate", "true", "--out", out)
        assert second.returncode == 2
        assert "is in use by another fdprof run" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
        assert list(run_dir.glob("*.rec"))
    finally:
        first.terminate()
        first.communicate(timeout=120)
    assert first.returncode == 143
