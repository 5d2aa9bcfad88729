"""The native reader reads its run directory's own record files only: names in run.json stay in
the directory, symbolic links may not lead out of it, and a record file of another process or
run is refused or named, never merged silently."""

from __future__ import annotations

import json
import shutil

import pytest
from corpus import BASELINE

from fdprof.errors import FdprofError
from fdprof.trace import load


@pytest.fixture
def run(tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(BASELINE, copy)
    return copy


def manifest(run):
    return json.loads((run / "run.json").read_text())


def rewrite(run, edit):
    doc = manifest(run)
    edit(doc)
    (run / "run.json").write_text(json.dumps(doc))


@pytest.mark.parametrize(
    "record", ["../engine-0-29228.rec", "/etc/passwd", "sub/x.rec", "..", ".", "a\\b.rec"]
)
def test_a_record_name_leaving_the_directory_is_refused(run, record):
    rewrite(run, lambda doc: doc["processes"][0].update(record=record))
    with pytest.raises(FdprofError, match="not a file name in the run directory"):
        load(run)


def test_a_symbolic_link_to_another_runs_record_file_is_refused(run, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(BASELINE, other)
    rec = run / manifest(run)["processes"][0]["record"]
    rec.unlink()
    rec.symlink_to(other / rec.name)
    with pytest.raises(FdprofError, match="symbolic link out of the run directory"):
        load(run)


def test_a_symbolic_link_inside_the_directory_is_read(run):
    rec = run / manifest(run)["processes"][0]["record"]
    kept = run / "kept.data"
    rec.rename(kept)
    rec.symlink_to(kept.name)
    assert len(load(run).spans) == len(load(BASELINE).spans)


def test_a_record_file_of_another_process_under_this_runs_name_is_refused(run):
    """Another run's worker file copied over this run's worker (same name, other pid inside)."""
    procs = manifest(run)["processes"]
    (run / procs[2]["record"]).write_bytes((run / procs[1]["record"]).read_bytes())
    with pytest.raises(FdprofError, match="holds the records of pid .* run.json says pid"):
        load(run)


def test_without_a_manifest_a_renamed_record_file_is_refused(run):
    procs = manifest(run)["processes"]
    (run / "run.json").unlink()
    (run / procs[2]["record"]).unlink()
    shutil.copy(run / procs[1]["record"], run / procs[2]["record"])
    with pytest.raises(FdprofError, match="its name says pid"):
        load(run)


def test_a_stranger_record_file_is_named_and_not_read(run, tmp_path):
    stranger = run / "worker-0-4242.rec"
    stranger.symlink_to(BASELINE / manifest(run)["processes"][2]["record"])
    trace = load(run)
    assert any("worker-0-4242.rec" in w and "not read" in w for w in trace.meta["warnings"])
    assert len(trace.spans) == len(load(BASELINE).spans)


@pytest.mark.parametrize("missing", ["null", "absent"])
def test_a_manifest_without_its_process_list_reads_the_records_it_finds(run, missing):
    """``"processes": null`` reads as no list at all: the record files of the directory, by
    their names (it was a TypeError, exit 70)."""

    def edit(doc: dict) -> None:
        if missing == "null":
            doc["processes"] = None
        else:
            del doc["processes"]

    rewrite(run, edit)
    trace = load(run)
    assert len(trace.spans) == len(load(BASELINE).spans)
