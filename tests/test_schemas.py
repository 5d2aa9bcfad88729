"""Every JSON output is a contract: it names its schema, validates against the JSON Schema of
docs/schemas/ (the real output of the command, not an example), and the validation is strict
enough to catch a layout change (ab's ``ideal_ratio`` becoming ``ideal.ratio``). The other
outputs are checked where their tests run them: ``run`` (tests/engine/test_cli_run.py),
``ab`` (tests/ab), ``export-otlp`` (tests/probe/test_otel_export.py), the error object of
each command (tests/test_cli.py)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from schemas import FOLDER, registry, undocumented, validate

from fdprof import contracts
from tests.cli import fdprof

TRACES = Path(__file__).resolve().parents[1] / "traces"


def test_each_output_has_a_valid_schema_file_of_its_version():
    assert {p.name for p in FOLDER.glob("*.schema.json")} == {
        f"{name}.schema.json" for name in contracts.VERSIONS
    } | {"common.schema.json"}
    for path in FOLDER.glob("*.schema.json"):
        schema = json.loads(path.read_text())
        jsonschema.Draft202012Validator.check_schema(schema)
    for name in contracts.VERSIONS:
        schema = registry()[f"{name}.schema.json"].contents
        assert schema["properties"]["schema"] == {"const": contracts.schema(name)}
        assert "schema" in schema["required"]


@pytest.mark.parametrize("args", [
    ["hazards", "{traces}/lockless"],
    ["hazards", "{traces}/fault-no-wait-swap-in", "--predict"],
    ["hazards", "{traces}/baseline", "--what-if", "drop-lock"],
    ["diff", "{traces}/baseline", "{traces}/lockless"],
])  # fmt: skip
def test_hazards_and_diff_json_validate(args, tmp_path):
    argv = [a.format(traces=TRACES) for a in args]
    result = fdprof(*argv, "--format", "json", "--out", str(tmp_path / "report.json"))
    assert result.returncode in (0, 1), result.stderr
    validate(argv[0], json.loads(result.stdout))
    validate(argv[0], json.loads((tmp_path / "report.json").read_text()))  # --out FILE too


def test_convert_json_validates(tmp_path):
    result = fdprof("convert", str(TRACES / "lockless"), str(tmp_path / "t.json"), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    validate("convert", data)
    assert data["format"] == "perfetto" and data["spans"] > 0


@pytest.mark.parametrize("argv", [
    ["--json"],  # no command at all
    ["hazards", "--json", "/no/such/trace"],
    ["ab", "--json", "--runs", "1", "--out", "{tmp}/ab"],
    ["run", "--json", "--requests", "0", "--out", "{tmp}/run"],
])  # fmt: skip
def test_error_object_validates(argv, tmp_path):
    result = fdprof(*(a.format(tmp=tmp_path) for a in argv))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) >= 1
    validate("error", json.loads(result.stdout))


def test_negative_durations_are_a_warning_and_a_count_in_the_json(tmp_path):
    """Kept as a warning on stderr, and counted under a code a script can gate on."""
    events = [
        {"ph": "X", "name": "execute_model", "ts": 10, "dur": 5, "pid": 1, "tid": 1,
         "args": {"kv.gpu_read": [1]}},
        {"ph": "X", "name": "swap", "ts": 30, "dur": -4, "pid": 1, "tid": 2,
         "args": {"kv.gpu_write": [1]}},
        {"ph": "X", "name": "swap", "ts": 40, "dur": -2, "pid": 1, "tid": 2},
    ]  # fmt: skip
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    for args in (["hazards", str(trace), "--json"],
                 ["convert", str(trace), str(tmp_path / "o.json"), "--json"]):  # fmt: skip
        result = fdprof(*args)
        assert result.returncode == 0, result.stderr
        data = json.loads(result.stdout)
        validate(args[0], data)
        (warning,) = [w for w in data["warnings"] if w["code"] == "negative_duration"]
        assert warning["count"] == 2
        assert f"fdprof {args[0]}: warning: {warning['message']}" in result.stderr


def test_validation_catches_a_layout_change_and_an_undocumented_key():
    """ab's old layout (``ideal_ratio``, hazards at the top) fails its schema; a key the
    schema does not name is reported (it must be documented when it is added)."""
    data = json.loads(fdprof("hazards", str(TRACES / "lockless"), "--json").stdout)
    validate("hazards", data)
    renamed = {("race_count" if k == "races" else k): v for k, v in data.items()}
    with pytest.raises(jsonschema.ValidationError, match="'races' is a required property"):
        validate("hazards", renamed)
    schema = registry()["hazards.schema.json"].contents
    resolver = registry().resolver("hazards.schema.json")
    added = {**data, "checked": {**data["checked"], "blocks": 3}, "novelty": []}
    assert undocumented(added, schema, resolver) == [".checked.blocks", ".novelty"]
    old_ab = {"schema": "fdprof.ab/1", "ideal_ratio": 1.2, "hazards": {"baseline": {}}}
    errors = list(
        jsonschema.Draft202012Validator(
            registry()["ab.schema.json"].contents, registry=registry()
        ).iter_errors(old_ab)
    )
    assert any("'ideal' is a required property" in e.message for e in errors)


def test_fdprof_json_is_strict_json():
    """A number that is not finite is null in every output, never a NaN literal."""
    assert contracts.dumps({"a": float("nan"), "b": [float("inf"), 1.5]}) == (
        '{"a": null, "b": [null, 1.5]}'
    )
