import gzip
import json

import pytest
from roundtrip import assert_same
from shared_data import DATA

from fdprof.trace import load
from tests.cli import fdprof


@pytest.mark.parametrize(
    "name, to, fmt",
    [
        ("run.json.gz", None, "chrome"),
        ("run.otlp.json", None, "otlp-json"),
        ("copy", None, "native"),
        ("anything.out", "perfetto", "chrome"),
    ],
)
def test_convert_native_run(engine_run, tmp_path, name, to, fmt):
    out = tmp_path / name
    args = ["convert", str(engine_run), str(out), "--json"] + (["--to", to] if to else [])
    result = fdprof(*args)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["spans"] == 12
    back = load(out)
    assert back.meta["format"] == fmt
    assert_same(load(engine_run), back)


def test_native_writer_keeps_what_records_hold(engine_run, tmp_path):
    native = load(engine_run)
    from fdprof.trace import save

    save(native, tmp_path / "again", "native")
    back = load(tmp_path / "again")
    assert_same(native, back, ("spans", "accesses", "syncs", "attrs"))
    assert back.meta["config"] == native.meta["config"]


def test_convert_foreign_chrome_to_otlp_and_back(tmp_path):
    """The first 3000 events of a real PyTorch-profiler trace, through the command."""
    with gzip.open(DATA / "hta" / "control.json.gz", "rt") as f:
        doc = json.load(f)
    doc["traceEvents"] = doc["traceEvents"][:3000]
    src = tmp_path / "head.json"
    src.write_text(json.dumps(doc))
    out = tmp_path / "hta.otlp.json"
    result = fdprof("convert", str(src), str(out))
    assert result.returncode == 0, result.stderr
    original = load(src)
    assert len(original.spans) > 1000
    assert_same(original, load(out))


def test_unknown_output_name_asks_for_to(engine_run, tmp_path):
    result = fdprof("convert", str(engine_run), str(tmp_path / "x.txt"))
    assert result.returncode == 2
    assert "--to" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_run_directory_is_never_overwritten_or_mixed(engine_run, tmp_path):
    """Converting into a directory that is not empty refuses (nothing lost) unless --force,
    which replaces it; a reader meeting .rec files its run.json does not name reads only the
    named ones and says so."""
    out = tmp_path / "copy"
    assert fdprof("convert", str(engine_run), str(out), "--to", "native").returncode == 0
    before = sorted((p.name, p.read_bytes()) for p in out.iterdir())
    (out / "notes.txt").write_text("mine")
    again = fdprof("convert", str(engine_run), str(out), "--to", "native")
    assert again.returncode == 2
    assert again.stderr.startswith(f"fdprof convert: {out} is not empty (")
    assert "--force" in again.stderr and len(again.stderr.splitlines()) == 1
    assert (out / "notes.txt").read_text() == "mine"
    forced = fdprof("convert", str(engine_run), str(out), "--to", "native", "--force")
    assert forced.returncode == 0, forced.stderr
    assert sorted((p.name, p.read_bytes()) for p in out.iterdir()) == before
    stranger = out / "worker-0-999999.rec"
    stranger.write_bytes(next(engine_run.glob("worker-*.rec")).read_bytes())
    mixed = load(out)
    assert len(mixed.spans) == 12
    assert f"not read, not in run.json: {stranger.name}" in mixed.meta["warnings"]
