"""Bad input of every kind gives one clear line (FdprofError; exit 2 from the CLI), never a
traceback: mutated real files of each format, and the classic broken files through the CLI."""

import gzip
import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nsys_export import PUSHPOP, build_export

from fdprof.errors import FdprofError
from fdprof.trace import load, otlp, perfetto
from tests.cli import fdprof

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="session")
def samples(engine_run, tmp_path_factory):
    """One small valid file per format, written from the real run (per session, not module:
    the module's tests then spread over make test's workers)."""
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


#: what a foreign writer puts where a value belongs: nulls, wrong types, int64's edges and
#: past them, floats that JSON cannot say, empty and nested containers
ODD_VALUES = [None, "", "x" * 300, -1, 0, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 1.5,
              float("nan"), float("inf"), True, [], {}, [None], {"k": None}]  # fmt: skip


def _slots(doc, path: tuple = ()):
    """The path of every value inside a JSON document, depth first."""
    items = (
        doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    )
    for k, v in items:
        yield path + (k,)
        yield from _slots(v, path + (k,))


def mutate_structure(doc, field: float, where: float, how: str, value):
    """``doc`` with one value replaced, its key deleted or its element duplicated: a field
    name first (every key the document uses, and list elements, are equally likely), then
    one of its places."""
    by_field: dict = {}
    for slot in _slots(doc):
        by_field.setdefault(slot[-1] if isinstance(slot[-1], str) else None, []).append(slot)
    fields = sorted(by_field, key=str)
    slots = by_field[fields[int(field * (len(fields) - 1))]]
    *parent_path, k = slots[int(where * (len(slots) - 1))]
    parent = doc
    for p in parent_path:
        parent = parent[p]
    if how == "replace":
        parent[k] = value
    elif how == "delete":
        del parent[k]
    elif isinstance(parent, list):
        parent.insert(k, json.loads(json.dumps(parent[k])))
    else:
        parent[k] = [parent[k], parent[k]]
    return doc


COMMANDS = {
    "hazards": lambda p, out: ["hazards", str(p), "--predict", "--json"],
    "diff": lambda p, out: ["diff", str(p), str(p), "--json"],
    "convert": lambda p, out: ["convert", str(p), str(out)],
}


def _read_docs(path: Path) -> list:
    """A Chrome file's document, or an OTLP file's export requests (one per line)."""
    text = path.read_text()
    if path.name.endswith(".otlp.json"):
        return [json.loads(line) for line in text.splitlines()]
    return [json.loads(text)]


def _answer_or_one_line(capfd, docs: list, name: str, command: str) -> str | None:
    """What is wrong with how ``command`` treated ``docs``, or None: it must answer (exit 0
    or 1) or say what is wrong in one line (exit 2), never fail inside."""
    from fdprof.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text("".join(json.dumps(doc) + "\n" for doc in docs))
        capfd.readouterr()
        code = main(COMMANDS[command](path, Path(tmp) / "out.json"))
        err = capfd.readouterr().err
    if code not in (0, 1, 2) or "Traceback" in err or "internal error" in err:
        return f"exit {code}: {err.strip()[-300:]}"
    said = [line for line in err.splitlines() if line and "warning:" not in line]
    if code == 2 and len(said) != 1:  # warnings about what was read may come first
        return f"exit 2 in {len(said)} lines: {err.strip()[-300:]}"
    return None


@SETTINGS
@given(
    name=st.sampled_from(["t.json", "t.otlp.json"]),
    field=st.floats(0, 1),
    where=st.floats(0, 1),
    how=st.sampled_from(["replace", "delete", "duplicate"]),
    value=st.sampled_from(ODD_VALUES),
    command=st.sampled_from(sorted(COMMANDS)),
)
def test_one_mutated_place_in_json_is_an_answer_or_one_line(samples, capfd, name, field, where,
                                                            how, value, command):  # fmt: skip
    """One value of the wrong type or range, one key gone or one element twice, anywhere in
    a Chrome or OTLP file, through every command."""
    root, _ = samples
    docs = mutate_structure(_read_docs(root / name), field, where, how, value)
    assert _answer_or_one_line(capfd, docs, name, command) is None


def _replace_everywhere(doc, field: str, value):
    """``doc`` with every value under the key ``field`` replaced (``...``: the key removed)."""
    if isinstance(doc, list):
        return [_replace_everywhere(v, field, value) for v in doc]
    if not isinstance(doc, dict):
        return doc
    out = {k: value if k == field else _replace_everywhere(v, field, value) for k, v in doc.items()}
    if value is ...:
        out.pop(field, None)
    return out


#: the exhaustive test's keys, split in this many tests (every key in one of them)
SHARDS = 4


@pytest.mark.filterwarnings("error::RuntimeWarning")  # a value cast silently is a bug too
@pytest.mark.parametrize("shard", range(SHARDS))
@pytest.mark.parametrize("command", ["hazards", "diff"])
@pytest.mark.parametrize("name", ["t.json", "t.otlp.json"])
def test_every_field_of_every_wrong_kind_is_an_answer_or_one_line(samples, capfd, name, command,
                                                                  shard):  # fmt: skip
    """Every key the file uses, in turn, set everywhere to each odd value or removed
    everywhere: the exhaustive twin of the random test above, through the two commands that
    read every field (``hazards --predict``: the accesses and syncs; ``diff``: steps, times
    and statistics). The keys in sorted order, every ``SHARDS``-th from ``shard`` on."""
    root, _ = samples
    docs = _read_docs(root / name)
    fields = sorted({slot[-1] for slot in _slots(docs) if isinstance(slot[-1], str)})
    failures = []
    for field in fields[shard::SHARDS]:
        for value in [*ODD_VALUES, ...]:
            mutated = _replace_everywhere(docs, field, value)
            problem = _answer_or_one_line(capfd, mutated, name, command)
            if problem:
                failures.append(f"{field}={value!r}: {problem}")
    assert not failures, "\n".join(failures)
