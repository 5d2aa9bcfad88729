"""The Parquet store: every reference trace and every third-party trace reads back exactly, and
every command takes a store where it takes a trace."""

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from roundtrip import assert_same
from shared_data import DATA

from fdprof.cli import main
from fdprof.trace import load, pyspy, save, store
from tests.cli import fdprof
from tests.reference_runs import REFERENCE_RUNS as REFERENCE

ROOT = Path(__file__).resolve().parents[2]
THIRD_PARTY = sorted((DATA / "hta").glob("*.json.gz")) + sorted((DATA / "nsys").glob("*.sqlite"))
EVERY_TABLE = ("spans", "accesses", "syncs", "attrs", "processes")


def _same_meta(a: dict, b: dict) -> None:
    assert set(a) == set(b) - {"store"}
    for key, value in a.items():
        other = b[key]
        if isinstance(value, pd.DataFrame):
            pd.testing.assert_frame_equal(value, other)
        elif isinstance(value, pyspy.Samples):
            pd.testing.assert_frame_equal(value.slices, other.slices)
            pd.testing.assert_frame_equal(value.segments, other.segments)
            assert (value.frames, value.threads, value.processes) == (
                other.frames, other.threads, other.processes)  # fmt: skip
        else:
            assert value == other, key


@pytest.mark.parametrize("source", REFERENCE + THIRD_PARTY, ids=lambda p: p.name)
def test_round_trip(source, tmp_path):
    trace = load(source)
    save(trace, tmp_path / "store", "parquet")
    back = load(tmp_path / "store")
    assert back.meta["store"] == str(tmp_path / "store")
    assert_same(trace, back, EVERY_TABLE)
    _same_meta(trace.meta, back.meta)


def test_round_trip_covers_the_shared_data():
    """The parametrised round trip above ran on every trace there is: none was skipped by a
    missing checkout of shared/."""
    assert len(REFERENCE) >= 5 and len(THIRD_PARTY) >= 4


def test_accesses_are_bucketed_by_block_with_their_spans(tmp_path):
    trace = load(REFERENCE[0])
    store.write(trace, tmp_path / "s", buckets=4)
    spans = trace.spans.set_index("span_id")
    for b, folder in enumerate(store.bucket_dirs(tmp_path / "s")):
        part = pq.read_table(next(folder.glob("*.parquet"))).to_pandas()
        assert (part["block"] % 4 == b).all()
        assert (
            part["span_start"].to_numpy() == spans.loc[part["span_id"], "start"].to_numpy()
        ).all()
        assert (part["span_lane"].to_numpy() == spans.loc[part["span_id"], "lane"].to_numpy()).all()


def test_every_command_reads_a_store(tmp_path):
    """convert to a store, then hazards, diff and convert read it as they read the trace."""
    faulty = ROOT / "traces" / "fault-no-wait-swap-in"
    out = tmp_path / "s"
    assert main(["convert", str(faulty), str(out), "--to", "parquet"]) == 0
    direct, stored = fdprof("hazards", str(faulty), "--json"), fdprof("hazards", str(out), "--json")
    assert direct.returncode == stored.returncode == 1
    assert json.loads(direct.stdout) == json.loads(stored.stdout)
    base = ROOT / "traces" / "baseline"
    d1, d2 = (
        fdprof("diff", str(base), str(faulty), "--json"),
        fdprof("diff", str(base), str(out), "--json"),
    )
    assert d1.returncode == d2.returncode == 0
    a, b = json.loads(d1.stdout), json.loads(d2.stdout)
    b["new"]["label"] = a["new"]["label"]
    assert a == b
    assert main(["convert", str(out), str(tmp_path / "t.json")]) == 0
    assert_same(load(faulty), load(tmp_path / "t.json"), ("spans", "accesses", "syncs"))


def test_writing_refuses_a_directory_in_use(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("mine")
    r = fdprof("convert", str(REFERENCE[0]), str(tmp_path / "busy"), "--to", "parquet")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert (tmp_path / "busy" / "x").read_text() == "mine"


def _damage(root: Path, case: str) -> None:
    part = sorted(root.glob("spans/*.parquet"))[0]
    data = part.read_bytes()
    manifest = root / store.MANIFEST
    text = manifest.read_text()
    table = pq.read_table(part)
    {
        "truncated part": lambda: part.write_bytes(data[: len(data) // 2]),
        "flipped bytes": lambda: part.write_bytes(
            data[:100] + bytes(b ^ 0xFF for b in data[100:400]) + data[400:]),
        "not parquet": lambda: part.write_bytes(b"hello world" * 10),
        "empty part": lambda: part.write_bytes(b""),
        "manifest cut": lambda: manifest.write_text(text[:50]),
        "wrong format": lambda: manifest.write_text(text.replace(store.FORMAT, "other/9")),
        "bad kind": lambda: manifest.write_text(
            json.dumps(json.loads(text) | {"attrs": {"x": "blob"}})),
        "column of another type": lambda: pq.write_table(
            table.drop_columns(["start"]).append_column("start", table["name"]), part),
        "missing column": lambda: pq.write_table(table.drop_columns(["lane"]), part),
    }[case]()  # fmt: skip


CASES = ["truncated part", "flipped bytes", "not parquet", "empty part", "manifest cut",
         "wrong format", "bad kind", "column of another type", "missing column"]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_corrupt_store_is_bad_input(case, tmp_path):
    """A broken store: one line on stderr, exit 2, for every command that reads it."""
    root = tmp_path / "s"
    save(load(REFERENCE[0]), root, "parquet")
    _damage(root, case)
    for cmd in (["hazards", str(root)], ["convert", str(root), str(tmp_path / "o.json")]):
        r = fdprof(*cmd)
        assert r.returncode == 2, (case, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, (case, r.stderr)
        assert "Traceback" not in r.stderr
