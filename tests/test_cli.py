import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from schemas import validate

from fdprof.cli import build_parser, main
from tests.cli import fdprof

TRACES = Path(__file__).resolve().parents[1] / "traces"


def test_help_lists_commands():
    result = fdprof("--help")
    assert result.returncode == 0
    assert "usage: fdprof" in result.stdout


def test_ab_help_lists_every_exit_code():
    """A gate's caller branches on the code: ``ab --help`` says what each of 0-3 means, and
    which wins when several apply."""
    result = fdprof("ab", "--help")
    assert result.returncode == 0
    codes = result.stdout.split("\nexit codes:\n", 1)[1].split("\n\n", 1)[0]
    starts = [line.split("  ")[1] for line in codes.splitlines() if line[2:3].isdigit()]
    assert starts == ["0", "1", "2", "3"]
    for text in ("0  safe:", "1  unsafe:", "2  bad input", "3  --require-gain X not met",
                 "2 > 1 > 3 > 0"):  # fmt: skip
        assert text in codes, text


def test_every_option_of_every_command_says_what_it_does():
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert {"ab", "run", "diff", "hazards", "convert", "export-otlp"} <= set(commands.choices)
    for name, parser in commands.choices.items():
        assert parser.description, name
        assert "%%" not in parser.description, name  # descriptions are not %-formatted
        bare = [a.dest for a in parser._actions if not a.help]
        assert not bare, f"{name}: options without help: {bare}"


def test_unknown_command_is_one_line_exit_2():
    result = fdprof("no-such-command")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_unwritable_output_is_one_line_exit_2():
    result = fdprof("hazards", "/no/such/trace")
    assert result.returncode == 2 and "no such file" in result.stderr
    result = fdprof("run", "--requests", "1", "--out", "/proc/fdprof-cannot-create")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "fdprof run: /proc/fdprof-cannot-create: No such file or directory"
    )


def test_a_reader_that_went_away_stops_it_quietly():
    """``fdprof hazards TRACE | head -1``: the pipe closes before the report is written; no
    traceback, no error line, the exit status a shell gives a tool killed by SIGPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    result = subprocess.run(
        [sys.executable, "-m", "fdprof", "hazards", str(TRACES / "lockless")],
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    os.close(write_end)
    assert result.stderr == ""
    assert result.returncode == 128 + signal.SIGPIPE


def test_a_usage_error_with_json_asked_for_is_a_json_object_too():
    """``hazards --json`` without a trace (argparse's own error) is a JSON error object on
    stdout, as every other exit 2 is; without JSON asked for, stdout stays empty."""
    import json

    for args in (("hazards", "--json"), ("hazards", "--format", "json"),
                 ("hazards", "t", "--format=json", "--what-if", "nope")):  # fmt: skip
        result = fdprof(*args)
        assert result.returncode == 2, args
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
        error = json.loads(result.stdout)["error"]
        assert error["command"] == "hazards" and error["exit_code"] == 2
        assert error["message"] == result.stderr.strip()
    result = fdprof("hazards")
    assert result.returncode == 2 and result.stdout == ""


def test_help_shows_every_default():
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for name, parser in commands.choices.items():
        for action in parser._actions:
            if action.default in (None, False, argparse.SUPPRESS) or not action.option_strings:
                continue
            help_text = parser._get_formatter()._get_help_string(action)
            assert "default" in help_text, (name, action.option_strings)


@pytest.mark.parametrize("command", [
    ("hazards", "--json", "{bad}"),
    ("diff", "--format", "json", "{bad}", "{bad}"),
    ("convert", "--json", "{bad}", "{out}"),
    ("export-otlp", "--json", "{bad}", "--endpoint", "http://127.0.0.1:9/v1/traces"),
])  # fmt: skip
def test_every_json_option_gets_a_json_error_object_on_bad_input(command, tmp_path, capsys):
    """Bad input with JSON asked for (``--json`` or ``--format json``, whichever the command
    has) prints one JSON error object on stdout beside the line on stderr."""
    import json

    bad = tmp_path / "t.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": null, "ts": 1, "dur": 1}]}')
    argv = [a.format(bad=bad, out=tmp_path / "o.json") for a in command]
    assert main(argv) == 2
    captured = capsys.readouterr()
    validate("error", json.loads(captured.out))
    error = json.loads(captured.out)["error"]
    assert error["command"] == command[0] and error["exit_code"] == 2
    assert f"fdprof {command[0]}: {error['message']}" == captured.err.strip()


def test_no_command_prints_the_usage_exit_2():
    """``fdprof`` alone: its usage and one error line naming the commands, not a traceback."""
    result = fdprof()
    assert result.returncode == 2 and "Traceback" not in result.stderr
    usage, error = result.stderr.split("\nfdprof: error: ")
    assert usage.startswith("usage: fdprof ")
    assert error.strip() == ("no command given (one of ab, convert, diff, export-otlp, "
                             "hazards, merge, roll, run; fdprof --help)")  # fmt: skip


@pytest.mark.parametrize("command", [
    ["run", "--requests", "4"],
    ["ab", "--baseline", "true", "--candidate", "true", "--runs", "2"],
    ["convert", str(TRACES / "lockless"), "--to", "native"],
])  # fmt: skip
def test_a_non_empty_out_is_refused_without_force(command, tmp_path):
    """A second run into a directory that holds anything refuses before it starts, touching
    nothing; --help says how to replace it."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "old-run.json").write_text("{}")
    argv = [*command, str(out)] if command[0] == "convert" else [*command, "--out", str(out)]
    result = fdprof(*argv)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line == (f"fdprof {command[0]}: {out} is not empty (1 entries: old-run.json): give "
                    "a new --out, or --force to replace what is there")  # fmt: skip
    assert [p.name for p in out.iterdir()] == ["old-run.json"]
    assert "--force" in fdprof(command[0], "--help").stdout


def test_make_demo_replaces_its_report():
    """``make demo`` twice leaves one report: the target passes --force (the A/B's own test of
    --force is tests/ab/test_generic.py)."""
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    (line,) = [x for x in makefile.splitlines() if "fdprof ab" in x and "out/demo" in x]
    assert "--force" in line.split()
